"""The known-failure ledger names real backends and explains only its own symptom."""
from __future__ import annotations

import dataclasses
import importlib
import math
from unittest import mock

import torch
from hypothesis import given, settings, strategies as st

import reference as r
from backends.registry import builtin_backends
from fuzz.ledger import (KNOWN, SINK_OVERFLOW, Finding, known_crash_for, known_for, largest_sink_excess,
                         score_floor)
from fuzz.strategies import ORACLE_CAPS, Limits, cases


def test_every_entry_names_a_builtin_backend_and_an_upstream_link():
    names = {b.name for b in builtin_backends()}
    for finding in KNOWN:
        assert finding.backend in names, finding.backend
        assert finding.link.startswith("https://github.com/"), finding.link


def test_a_symptom_keeps_other_failures_of_the_same_cases_unexplained():
    lse_only = Finding("x", lambda c: True, "https://github.com/o/r/issues/1", "LSE scaled", symptom=r"^LSE ")
    assert lse_only.explains("LSE max error 0.17 > limit 0.013")
    assert not lse_only.explains("ValueError: Block sparsity requires sparse_block_size[1] to be a multiple of 80")
    assert not lse_only.explains("max error 0.7 > limit 0.01 (baseline 0.004)")
    assert Finding("x", lambda c: True, "l", "any").explains("anything at all")


# --- FA4's sink overflow (fuzz.ledger.largest_sink_excess) -------------------------------------------------------

SMALL = Limits(max_sequences=3, max_context=12, max_query=6, max_kv_heads=2, tiers=("small",))
CONTIGUOUS = dataclasses.replace(ORACLE_CAPS, kv_layouts=frozenset())


def _excess_from_probabilities(case) -> float:
    """The same quantity from the oracle's outputs alone: with one-hot values (key j's value is e_j) the output row is
    the softmax p, and a row's largest score is lse + log(max_j p_j)."""
    plain = case.replace(sinks=None)
    inputs = r.materialize(plain)
    width = max(max(plain.kv_lens), 1)
    eye = [torch.eye(n, width, dtype=torch.float64)[:, None, :].expand(n, plain.num_kv_heads, width)
           for n in plain.kv_lens]
    onehot = dataclasses.replace(inputs, case=plain.replace(head_size_v=width), values=tuple(eye))
    e = r.attention(onehot)
    seen = torch.isfinite(e.lse)
    if not bool(seen.any()):
        return -math.inf
    row_max = e.lse + torch.log(e.output.amax(-1))
    sinks = r.materialize(case).sinks.double()  # as the kernel gets them (float32)
    return float((sinks[None, :] - row_max)[seen].max())


@settings(max_examples=40, deadline=None)
@given(cases(CONTIGUOUS, SMALL), st.lists(st.floats(-20, 120), min_size=1, max_size=1))
def test_sink_excess_equals_the_oracles_softmax_form(case, sink):
    case = case.replace(sinks=tuple(sink * case.num_heads))
    got, want = largest_sink_excess(case), _excess_from_probabilities(case)
    assert (got == want == -math.inf) or abs(got - want) < 1e-9, (got, want)
    oracle_module = importlib.import_module("reference.attention")  # (the package exports a function of that name)
    with mock.patch.object(oracle_module, "CHUNK_ELEMENTS", 1):  # one query row per chunk: the same maximum
        chunked = largest_sink_excess(case)
        assert (chunked == got == -math.inf) or abs(chunked - got) < 1e-12
    # over the evaluation's own inputs (a campaign worker's: not drawn again), the same value
    again = largest_sink_excess(case, r.materialize(case))
    assert (again == got == -math.inf) or again == got


@settings(max_examples=60, deadline=None)
@given(cases(ORACLE_CAPS, SMALL))
def test_the_norms_bound_lies_below_every_visible_score(case):
    """score_floor (the sink overflow's shortcut) against the scores themselves: with zero sinks the largest excess is
    minus the smallest row maximum, which the floor must not exceed."""
    zero = case.replace(sinks=(0.0,) * case.num_heads)
    inputs = r.materialize(zero)
    lowest_row_max = -largest_sink_excess(zero, inputs)
    assert score_floor(zero, inputs) <= lowest_row_max + 1e-9


def test_sink_overflow_threshold_is_128_ln2_above_the_rows_score():
    one = r.Case(sequences=(r.SequenceSpec(query_len=1),), num_heads=1, num_kv_heads=1, head_size=4,
                 dtype=r.DType.FLOAT32, sinks=(0.0,))
    score = -largest_sink_excess(one)  # sink 0: minus the single key's score
    fa4 = next(f for f in KNOWN if f.backend == "fa4-varlen" and f.link.endswith("/pull/2752"))
    assert not fa4.match(one.replace(sinks=(score + SINK_OVERFLOW - 0.01,)))
    assert fa4.match(one.replace(sinks=(score + SINK_OVERFLOW + 0.01,)))
    assert not fa4.match(one.replace(sinks=None))
    assert fa4.explains("255 NaN/Inf LSE values where the oracle is finite")
    assert not fa4.explains("max error 0.7 > limit 0.01 (baseline 0.004)")


def test_a_row_without_keys_never_counts_as_overflow():
    empty = r.Case(sequences=(r.SequenceSpec(query_len=2, encoder_len=0),), attn_type=r.AttentionType.ENCODER_DECODER,
                   num_heads=1, num_kv_heads=1, head_size=8, sinks=(500.0,))
    assert largest_sink_excess(empty) == -math.inf


def test_flashmla_fp8_crash_is_known_only_for_an_fp8_cache_with_a_sequence_without_keys():
    """Never launched (an illegal memory access ends the worker's CUDA context): the entry must not swallow the
    16-bit path, which answers 0 / +inf there, nor fp8 batches whose every sequence has keys."""
    import json
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "results", "cases",
                        "vllm-flashmla-fp8-zero-keys-illegal-access.json")
    with open(path) as f:
        case = r.Case.from_dict(json.load(f)["case"])
    assert 0 in case.kv_lens and case.kv_cache_dtype.is_fp8
    assert known_for("vllm-flashmla", case).crashes
    sixteen_bit = case.replace(cache=dataclasses.replace(case.cache, quant=r.Quant()))
    assert known_for("vllm-flashmla", sixteen_bit) is None
    with_keys = case.replace(sequences=tuple(dataclasses.replace(s, key_len=max(s.key_len or 0, 1))
                                              for s in case.sequences))
    assert known_for("vllm-flashmla", with_keys) is None
    assert known_for("vllm-triton-mla", case) is None
    assert known_crash_for("vllm-flashmla", case) is known_for("vllm-flashmla", case)


def test_only_crash_entries_are_checked_before_a_launch_and_input_predicates_read_the_given_inputs():
    """known_crash_for reads the case alone (before the launch); known_for hands an inputs predicate the evaluation's
    tensors, so FA4's sink overflow is judged on the inputs the kernel ran, without drawing them again."""
    one = r.Case(sequences=(r.SequenceSpec(query_len=1),), num_heads=1, num_kv_heads=1, head_size=4,
                 dtype=r.DType.FLOAT32, sinks=(500.0,))
    assert known_crash_for("fa4-varlen", one) is None
    assert known_for("fa4-varlen", one).link.endswith("/pull/2752")
    inputs = r.materialize(one)
    drawn = []
    with mock.patch("fuzz.ledger.materialize", side_effect=lambda *a, **k: drawn.append(a)):
        assert known_for("fa4-varlen", one, inputs).link.endswith("/pull/2752")
    assert not drawn
