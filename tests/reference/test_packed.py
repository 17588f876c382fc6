"""The packed oracle (reference/packed.py) is a second formulation of reference/attention.py: it must agree to
1e-12 in float64 on every packable case, under the case's mask and under the blind check's shifted one, and
evaluate() must give the same verdicts either way (benchmarks/packed_equivalence.py runs the 10,000-case version)."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import assume, given, settings

from backends.registry import get
from benchmarks.packed_equivalence import verdict_of
from fuzz.blind import shift_by_one_key
from fuzz.compare import evaluate
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference.attention import KEY_CHUNK, Expected, attention, query_for_oracle, sequence_kv
from fuzz.tolerance import limits, rule_for
from reference.case import Case, SequenceSpec
from reference.inputs import materialize
from reference.visibility import visible, visible_padded
from reference.widening import widen
from reference import packed
from reference.packed import (PACKED_ELEMENTS_GPU, PackedLayout, pack_scores, packable, packed_attention, packed_baseline,
                              padded_elements)

LIMITS = Limits(max_sequences=5, tiers=("small", "tile"))


def agree(a: Expected, b: Expected, tol: float = 1e-12) -> None:
    """Equal to tol where finite, -inf / NaN in the same places, equal visible-key counts."""
    for x, y in ((a.output, b.output), (a.lse, b.lse)):
        assert x.shape == y.shape
        finite = torch.isfinite(x) & torch.isfinite(y)
        assert torch.equal(torch.isfinite(x), torch.isfinite(y)) and torch.equal(torch.isnan(x), torch.isnan(y))
        assert torch.equal(x[~finite & ~torch.isnan(x)], y[~finite & ~torch.isnan(y)])  # same infinities
        scale = max(1.0, float(y[finite].abs().max())) if finite.any() else 1.0
        if finite.any():
            assert float((x[finite] - y[finite]).abs().max()) <= tol * scale
    assert torch.equal(a.num_visible, b.num_visible)
    if a.logit_spread is not None and b.logit_spread is not None:
        assert abs(float(a.logit_spread) - float(b.logit_spread)) <= tol * max(1.0, float(b.logit_spread))


@given(cases(ORACLE_CAPS, LIMITS))
def test_packed_oracle_equals_the_chunked_one(case):
    inputs = materialize(case)
    assume(packable(inputs))
    agree(packed_attention(inputs), attention(inputs))


# ALiBi whose bias reaches the kernel in the case's dtype (Alibi.in_model_dtype: torch SDPA's attn_mask)
HELD_ALIBI = cases(replace(ORACLE_CAPS, alibi_in_model_dtype=True), replace(LIMITS, features_on=("alibi",)))


@settings(max_examples=60, deadline=None)
@given(HELD_ALIBI)
def test_packed_oracle_equals_the_chunked_one_with_the_bias_held_in_the_model_dtype(case):
    inputs = materialize(case)
    assume(packable(inputs))
    assert case.alibi_held_in == case.dtype.torch
    agree(packed_attention(inputs), attention(inputs))


@given(cases(ORACLE_CAPS, replace(LIMITS, tiers=("small",))))
def test_packed_oracle_equals_the_chunked_one_in_small_chunks(case):
    # the chunked path merges key and query chunks by LSE: cut them small so that merge is what is compared. Small
    # cases only: a tile case's 513 keys in chunks of two made this one test 44 s of the suite's 860 on the 2-core CPU,
    # and the tiles' own chunk boundaries are the test above's
    inputs = materialize(case)
    assume(packable(inputs) and case.max_kv_len > 2)
    agree(packed_attention(inputs), attention(inputs, key_chunk=2, chunk_elements=case.num_heads * 2))


@given(cases(ORACLE_CAPS, LIMITS))
def test_shifted_mask_over_shared_scores_equals_a_fresh_pass(case):
    inputs = materialize(case)
    assume(packable(inputs))
    changes = []

    def shift(mask):
        moved = shift_by_one_key(mask)
        changes.append(bool((moved != mask).any()))
        return moved

    fresh = attention(inputs, mask_transform=shift)
    shared, changed = pack_scores(inputs).attend_transformed(shift_by_one_key)
    agree(shared, fresh)
    assert changed == any(changes)


@settings(max_examples=30)
@given(cases(get("torch-naive-paged").caps, Limits(max_sequences=4, tiers=("small", "tile"))))
def test_evaluate_gives_the_same_row_packed_or_chunked(case):
    # the baseline (case dtype) may round differently in the padded product; the verdict, symptoms and blind
    # call must not move (measured on 10,000 cases: benchmarks/results/oracle/packed-equivalence-cpu-2026-11-25.md)
    for name in ("torch-naive-paged", "mutant-window-off-by-one", "mutant-kv-scales-swapped"):
        backend = get(name)
        a, b = evaluate(backend, case, "cpu").row, evaluate(backend, case, "cpu", packed=False).row
        assert verdict_of(a) == verdict_of(b), name


@settings(max_examples=40)
@given(cases(ORACLE_CAPS, Limits(max_sequences=4, tiers=("small", "tile"), dtypes=("float32",))))
def test_two_float32_summation_orders_differ_by_less_than_the_floor(case):
    # the packed and the chunked baseline sum q.k in different orders (one padded GEMM, one per sequence): both are
    # correct float32 passes, so the rule's floor must cover their difference, or a verdict depends on which one
    # measured the baseline (it did, before Expected.logit_spread: the case below, 1.04x the limit)
    inputs = materialize(case)
    assume(packable(inputs))
    expected = attention(inputs)
    packed = packed_baseline(inputs, torch.float32, PackedLayout.of(inputs)).output.double()
    chunked = attention(inputs, dtype=torch.float32, reorder=True).output.double()
    finite = torch.isfinite(packed) & torch.isfinite(chunked)
    assume(bool(finite.any()))
    floor = limits(rule_for(case.dtype), expected.output, chunked, torch.float32, expected.lse,
                   float(expected.logit_spread)).floor
    assert float((packed - chunked)[finite].abs().max()) <= floor


def test_a_cancelling_float32_case_passes_a_correct_kernel_either_way():
    # terms of size 250 cancel to a logit of 0.5 under a soft-cap of 0.5: the chunked baseline's sum rounds 6x more
    # than the packed one's, and the correct twin rounds like the chunked one (5.58e-6 from float64)
    saved = Path(__file__).parents[2] / "benchmarks/results/cases/torch-naive-paged-float32-cancelling-logits.json"
    case = Case.from_json(json.dumps(json.loads(saved.read_text())["case"]))
    backend = get("torch-naive-paged")
    rows = [evaluate(backend, case, "cpu", packed=p).row for p in (True, False)]
    assert [r["verdict"] for r in rows] == ["pass", "pass"]
    assert rows[0]["logit_spread"] == pytest.approx(rows[1]["logit_spread"], rel=1e-12) and rows[1]["logit_spread"] > 60


# decoders only, where vLLM's per-sequence rules (ranges, global prefixes, chunk lookback) are drawn: some 1 case in 100
# of a plain draw has a global prefix
MASK_RULES = cases(ORACLE_CAPS, replace(LIMITS, attn_types=("decoder",)))


def _padded_one_by_one(case: Case) -> torch.Tensor:
    masks = [visible(case, seq, i) for i, seq in enumerate(case.sequences)]
    heads = max(m.shape[0] for m in masks)
    return torch.stack([torch.nn.functional.pad(m, (0, case.max_kv_len - m.shape[-1], 0, case.max_query_len - m.shape[-2]))
                        .expand(heads, -1, -1) for m in masks])


@given(cases(ORACLE_CAPS, LIMITS))
def test_the_padded_masks_are_each_sequences_mask_padded(case):
    # visible_padded applies visible's predicates to the whole batch's positions at once: the same mask, False on padding
    assert torch.equal(visible_padded(case, case.max_query_len, case.max_kv_len), _padded_one_by_one(case))


@settings(max_examples=400, deadline=None)
@given(MASK_RULES)
def test_the_padded_masks_agree_under_every_mask_rule(case):
    assert torch.equal(visible_padded(case, case.max_query_len, case.max_kv_len), _padded_one_by_one(case))


@given(cases(ORACLE_CAPS, LIMITS))
def test_the_gpus_one_scatter_pads_the_operands_as_the_hosts_copies_do(case):
    # a GPU pads each operand in one scatter (packed.scattered), the host with a copy a sequence and pass or, where the
    # parts are short, once for both passes (packed.padded_once): the same bits
    inputs = materialize(case)
    assume(inputs.cache is None and inputs.query_fp8 is None)
    layout = PackedLayout.of(inputs)
    key_rows = packed.real_positions(case.kv_lens, case.max_kv_len).nonzero().unbind(1)  # what the layout moves to a GPU
    assert layout.key_rows is None  # the host's layout leaves them out: nothing there reads them
    operands = ((list(inputs.query.split(case.query_lens)), layout.token_rows, case.max_query_len),
                (list(inputs.keys), key_rows, case.max_kv_len), (list(inputs.values), key_rows, case.max_kv_len))
    for parts, at, length in operands:
        once = packed.padded_once(parts, at, length)  # the host's pad for both passes, where its parts are short
        assert (once is None) == (length > packed.PAD_ONCE_TOKENS)
        for dtype in (torch.float64, case.dtype.torch):
            by_part = packed._heads_first(parts, at, length, dtype)
            assert torch.equal(packed.scattered(parts, at, length, dtype), by_part)
            if once is not None:
                assert torch.equal(widen(once, dtype), by_part)


def test_padding_is_never_seen_nor_added():
    # a one-key sequence beside a 16-key one: its row is padded to 16 keys; the shift can neither add key 1 (padding)
    # nor drop its only key, so its mask stays as it is, and its output is its one value
    case = Case(sequences=(SequenceSpec(query_len=1), SequenceSpec(query_len=4, context_len=12),
                           SequenceSpec(query_len=2, context_len=1)), num_heads=4, num_kv_heads=2, head_size=8)
    inputs = materialize(case)
    scores = pack_scores(inputs)
    assert scores.scores.shape == (3, 4, 4, 16)
    agree(scores.attend(), attention(inputs))
    moved = shift_by_one_key(scores.mask, scores.num_keys[:, None, None])
    row = scores.mask[0, :, 0]  # sequence 0's one real query
    assert torch.equal(moved[0, :, 0], row) and not torch.equal(shift_by_one_key(scores.mask)[0, :, 0], row)
    expected = scores.attend()
    g = case.num_heads // case.num_kv_heads
    assert torch.allclose(expected.output[0], inputs.values[0][0].double().repeat_interleave(g, 0), atol=1e-12)
    assert expected.num_visible[0].tolist() == [1] * case.num_heads


def test_unpackable_cases_are_left_to_the_chunked_path():
    long = Case(sequences=(SequenceSpec(query_len=512, context_len=4000),), num_heads=8, num_kv_heads=8, head_size=8)
    assert not packable(materialize(long))


def _on(case: Case, device: str) -> SimpleNamespace:
    """What packable reads of a case's inputs on `device`: the case and the query's device (no GPU needed)."""
    return SimpleNamespace(case=case, query=SimpleNamespace(device=torch.device(device)))


def test_a_gpu_packs_what_padding_keeps_chunked_on_the_host_up_to_its_own_bound():
    # a 500-key sequence beside three one-key ones: 4x its real scores once padded, chunked on the host, one pass on a GPU
    padded = Case(sequences=(SequenceSpec(query_len=8, context_len=492), *[SequenceSpec(query_len=8)] * 3),
                  num_heads=8, num_kv_heads=8, head_size=8)
    assert not packable(_on(padded, "cpu")) and packable(_on(padded, "cuda"))
    over = padded.replace(num_heads=64, num_kv_heads=64, sequences=padded.sequences * 16)  # 64 x 64 x 8 x 500 > 2^23
    assert padded_elements(_on(over, "cuda")) > PACKED_ELEMENTS_GPU and not packable(_on(over, "cuda"))
    beyond = Case(sequences=(SequenceSpec(query_len=1, context_len=KEY_CHUNK),), num_heads=1, num_kv_heads=1, head_size=8)
    assert not packable(_on(beyond, "cuda"))  # past one key chunk: the chunked path's cut stays


@settings(max_examples=25)
@given(cases(ORACLE_CAPS, Limits(max_sequences=2, tiers=("small",), dtypes=("float32",))))
def test_logit_spread_is_the_largest_visible_term_norm_through_the_cap(case):
    # a second formulation of reference.scores.logit_spread, pair by pair: scale * ||q_i * k_j||_2 * tanh' at the logit
    inputs = materialize(case)
    query = query_for_oracle(inputs, torch.float64)
    worst = 0.0
    g = case.num_heads // case.num_kv_heads
    for i, seq in enumerate(case.sequences):
        q = query[case.query_starts[i]:case.query_starts[i + 1]]
        k = sequence_kv(inputs, i, torch.float64)[0].repeat_interleave(g, 1)
        mask = visible(case, seq, i).expand(case.num_heads, -1, -1)
        for h, a, b in mask.nonzero().tolist():
            terms = q[a, h] * k[b, h]
            spread = case.softmax_scale * float(terms.norm())
            if case.soft_cap is not None:
                spread *= 1 - math.tanh(case.softmax_scale * float(terms.sum()) / case.soft_cap) ** 2
            worst = max(worst, spread)
    assert float(attention(inputs).logit_spread) == pytest.approx(worst, rel=1e-9, abs=1e-12)
