"""fuzz.simplify: after a shrink, each field or feature the bug does not need is set to its plainest value."""
from __future__ import annotations

from backends.registry import get
from fuzz.simplify import simplify
from reference.case import Alibi, AlibiConvention, CacheSpec, Case, DType, SequenceSpec

CASE = Case(sequences=(SequenceSpec(query_len=3, context_len=6),), num_heads=4, num_kv_heads=2, head_size=16,
            dtype=DType.FLOAT32, sliding_window=3, sinks=(0.5, 0.0, 1.0, 2.0), soft_cap=5.0,
            alibi=Alibi((0.5, 0.25, 0.125, 0.0625), AlibiConvention.SIGNED), cache=CacheSpec(block_size=4), seed=3)
CAPS = get("torch-naive-paged").caps


def test_features_the_bug_does_not_need_are_dropped():
    """A window bug's shrunk case that kept sinks, a soft-cap, ALiBi and GQA ends with the window alone (a planted
    window bug saved 5 minimal cases in a 60-s CPU campaign with them, 3 since)."""
    case, runs = simplify(CASE, CAPS, lambda c: c.sliding_window is not None)
    assert (case.sinks, case.soft_cap, case.alibi, case.num_kv_heads) == (None, None, None, 4)
    assert case.sliding_window == 3 and runs == 4


def test_a_feature_the_bug_needs_is_kept():
    case, _ = simplify(CASE, CAPS, lambda c: c.sinks is not None)
    assert case.sinks is not None and case.soft_cap is None and case.num_kv_heads == 4
