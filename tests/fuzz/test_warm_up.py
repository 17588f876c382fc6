"""A campaign's warm-up shard (fuzz.warm_up): small cases, half of them with every declared feature on, so that a
defect on a feature's path shows within its first examples (benchmarks/detection.py measures it)."""
from __future__ import annotations

from backends.naive import NaivePaged, mutants
from benchmarks.detection import first_kill
from fuzz.limits import Limits
from fuzz.warm_up import warm_up_cases
from reference.case import kv_len
from tests.fuzz.drawing import drawn


def test_half_the_warm_up_has_every_feature_on_and_all_of_it_is_small():
    caps = NaivePaged().caps
    cases = [c for s in range(3) for c in drawn(warm_up_cases(caps), 20, s)]
    rich = [c for c in cases if c.soft_cap is not None and c.sinks is not None and (c.sliding_window or c.window)]
    plain = [c for c in cases if c.soft_cap is None and c.sinks is None and c.alibi is None]
    assert len(rich) >= len(cases) // 4 and plain, (len(rich), len(plain), len(cases))
    # every feature the case's attention type admits is on in those
    assert any(c.alibi is not None and (c.sliding_window or c.window) for c in rich)
    small = Limits().max_context + Limits().max_query  # the small tier's most keys
    assert max(kv_len(c.attn_type, s) for c in cases for s in c.sequences) <= small


def test_a_focus_s_features_stay_the_only_ones_drawn():
    cases = drawn(warm_up_cases(NaivePaged().caps, Limits(features=("gqa", "paged"))), 30, 0)
    assert not any(c.soft_cap or c.sinks or c.alibi or c.sliding_window or c.window for c in cases)


def test_a_feature_s_planted_bug_dies_within_the_first_examples():
    """The window mutant took 8-27 examples while the warm-up drew plain small cases only (its second case the
    simplest one of another attention type)."""
    window = next(m for m in mutants() if m.name == "mutant-window-off-by-one")
    for s in range(3):
        examples, _, verdict, _ = first_kill(window, s, budget=20)
        assert examples <= 4 and verdict == "mismatch", (s, examples)
