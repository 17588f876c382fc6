"""Laws the oracle must obey: each checks one feature against a second, independent formulation."""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from hypothesis import assume, given, strategies as st

import reference as r
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference.scores import standard_alibi_slopes as alibi_slopes
from reference.attention import alibi_terms, attend_sequence
from reference.visibility import query_positions, visible
from tests.reference.brute_force import brute_force_attention

SMALL = Limits(max_sequences=3, max_context=12, max_query=6, max_kv_heads=2, tiers=("small",))
CONTIGUOUS = dataclasses.replace(ORACLE_CAPS, kv_layouts=frozenset())  # no paged cache: keys as given


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-10) -> bool:
    """Equal up to tol, with -inf matching -inf (empty rows)."""
    both_inf = torch.isneginf(a) & torch.isneginf(b)
    return bool(((a - b).abs() <= tol)[~both_inf].all()) and bool((torch.isneginf(a) == torch.isneginf(b)).all())


def with_case(inputs: r.Inputs, **changes) -> r.Inputs:
    return dataclasses.replace(inputs, case=inputs.case.replace(**changes))


@given(cases(CONTIGUOUS, SMALL))
def test_oracle_equals_brute_force_loops(case):
    inputs = r.materialize(case)
    expected = r.attention(inputs)
    q = r.attention.__globals__["query_for_oracle"](inputs, torch.float64).numpy()
    out, lse = brute_force_attention(case, q, [k.double().numpy() for k in inputs.keys],
                                     [v.double().numpy() for v in inputs.values],
                                     None if inputs.qq_bias is None else inputs.qq_bias.double().numpy())
    assert np.allclose(expected.output.numpy(), out, atol=1e-9)
    assert close(expected.lse, torch.from_numpy(lse), 1e-9)


@given(cases(CONTIGUOUS, SMALL))
def test_gqa_equals_mha_with_repeated_kv_heads(case):
    assume(case.num_kv_heads < case.num_heads)
    # homo_head_group picks vertical blocks by kv head: repeating kv heads changes the pattern itself
    assume(case.block_sparse is None or not case.block_sparse.homo_head_group)
    inputs = r.materialize(case)
    g = case.num_heads // case.num_kv_heads
    mha = dataclasses.replace(
        inputs, case=case.replace(num_kv_heads=case.num_heads),
        keys=tuple(k.repeat_interleave(g, dim=1) for k in inputs.keys),
        values=tuple(v.repeat_interleave(g, dim=1) for v in inputs.values))
    a, b = r.attention(inputs), r.attention(mha)
    assert close(a.output, b.output) and close(a.lse, b.lse)


@given(cases(CONTIGUOUS, SMALL), st.integers(0, 5))
def test_window_at_least_sequence_length_equals_no_window(case, extra):
    # Not for attn_type=encoder: vLLM gives it the one-sided (W-1, 0) window, which also hides
    # every later key (pinned by test_encoder_window_is_one_sided_as_in_vllm).
    assume(case.attn_type in (r.AttentionType.DECODER, r.AttentionType.ENCODER_ONLY) and case.global_prefix is None)
    inputs = r.materialize(case.replace(sliding_window=None, chunk_lookback=None))
    wide = with_case(inputs, sliding_window=case.max_kv_len + extra if case.max_kv_len else 1 + extra)
    a, b = r.attention(inputs), r.attention(wide)
    assert close(a.output, b.output) and close(a.lse, b.lse)


@given(cases(CONTIGUOUS, SMALL))
def test_huge_soft_cap_equals_none(case):
    inputs = r.materialize(case.replace(soft_cap=None))
    a, b = r.attention(inputs), r.attention(with_case(inputs, soft_cap=1e12))
    assert close(a.output, b.output, 1e-8) and close(a.lse, b.lse, 1e-8)


@given(cases(CONTIGUOUS, SMALL), st.data())
def test_permuting_sequences_permutes_output(case, data):
    inputs = r.materialize(case)
    order = data.draw(st.permutations(range(len(case.sequences))))
    starts = inputs.query_start_loc.tolist()
    blocks = [inputs.query[starts[i]:starts[i + 1]] for i in order]
    lens = torch.tensor([case.sequences[i].query_len for i in order])
    permuted = dataclasses.replace(
        inputs, case=case.select(order),
        query=torch.cat(blocks), keys=tuple(inputs.keys[i] for i in order),
        values=tuple(inputs.values[i] for i in order),
        query_start_loc=torch.nn.functional.pad(torch.cumsum(lens, 0), (1, 0)).to(torch.int32))
    a, b = r.attention(inputs), r.attention(permuted)
    a_out = torch.cat([a.output[starts[i]:starts[i + 1]] for i in order])
    a_lse = torch.cat([a.lse[starts[i]:starts[i + 1]] for i in order])
    assert close(a_out, b.output) and close(a_lse, b.lse)


@given(cases(CONTIGUOUS, SMALL), st.data())
def test_splitting_keys_and_merging_by_lse_equals_whole(case, data):
    inputs = r.materialize(case.replace(sinks=None))
    seq = case.sequences[0]
    k, v = inputs.keys[0].double(), inputs.values[0].double()
    cut = data.draw(st.integers(0, k.shape[0]))
    q = inputs.query[: seq.query_len].double()
    mask = visible(case, seq)
    kw = dict(scale=case.softmax_scale, q_pos=query_positions(case, seq), soft_cap=case.soft_cap,
              alibi=alibi_terms(inputs, torch.float64))
    whole = attend_sequence(q, k, v, mask, **kw)
    left = attend_sequence(q, k[:cut], v[:cut], mask[..., :cut], **kw)
    right_alibi = kw  # positions of the right half start at `cut`: shift through a pad of invisible keys
    right = attend_sequence(q, k, v, mask & (torch.arange(k.shape[0]) >= cut), **right_alibi)
    merged = r.merge_attn_states(*left, *right)
    assert close(whole[0], merged[0]) and close(whole[1], merged[1])


@given(cases(CONTIGUOUS, SMALL), st.integers(1, 13), st.booleans())
def test_chunked_evaluation_equals_one_block(case, key_chunk, with_alibi):
    # ALiBi half the time: a key chunk must keep its keys' absolute positions (not restart at 0)
    if with_alibi and case.alibi is None:
        case = case.replace(alibi=r.Alibi(alibi_slopes(case.num_heads)))
    inputs = r.materialize(case)
    a = r.attention(inputs)
    b = r.attention(inputs, chunk_elements=1, key_chunk=key_chunk)  # one query row, `key_chunk` keys per chunk
    assert close(a.output, b.output) and close(a.lse, b.lse)


@given(cases(CONTIGUOUS, SMALL))
def test_float32_agrees_with_float64_on_well_conditioned_cases(case):
    case = case.replace(dtype=r.DType.FLOAT32, values=r.Values(logit_scale=1.0), soft_cap=None, scale=None, sinks=None)
    inputs = r.materialize(case)
    a, b = r.attention(inputs), r.attention(inputs, dtype=torch.float32)
    assert torch.allclose(a.output, b.output.double(), atol=1e-5)
    assert close(a.lse, b.lse.double(), 1e-5)


@given(cases(ORACLE_CAPS, SMALL))
def test_materialize_is_bit_identical_for_the_same_case(case):
    a, b = r.materialize(case), r.materialize(case)
    assert torch.equal(a.query, b.query)
    assert all(torch.equal(x, y) for x, y in zip(a.keys, b.keys))
    if a.cache is not None:
        for x, y in zip(a.cache.paged.tensors, b.cache.paged.tensors):
            assert torch.equal(x.view(torch.uint8), y.view(torch.uint8))


@given(cases(ORACLE_CAPS, SMALL))
def test_case_json_round_trip(case):
    assert r.Case.from_json(case.to_json()) == case
    # the JSON a frozen Case keeps after its first to_json is its own: a replaced case has its own, indent= is honoured
    other = dataclasses.replace(case, seed=case.seed + 1)
    assert r.Case.from_json(other.to_json()) == other and other.to_json() != case.to_json()
    assert case.to_json() == case.to_json(indent=None) and "\n" in case.to_json(indent=1)


KERNEL = dataclasses.replace(CONTIGUOUS, attn_types=frozenset({r.AttentionType.KERNEL}))


@given(cases(KERNEL, SMALL))
def test_kernel_cases_equal_brute_force_loops(case):
    """Explicit causal flag, either alignment, (left, right) windows, more queries than keys."""
    inputs = r.materialize(case)
    expected = r.attention(inputs)
    out, lse = brute_force_attention(case, inputs.query.double().numpy(), [k.double().numpy() for k in inputs.keys],
                                     [v.double().numpy() for v in inputs.values])
    assert np.allclose(expected.output.numpy(), out, atol=1e-9)
    assert close(expected.lse, torch.from_numpy(lse), 1e-9)


@given(cases(KERNEL, SMALL))
def test_alignments_agree_when_queries_and_keys_have_the_same_length(case):
    case = case.replace(sequences=tuple(dataclasses.replace(s, key_len=s.query_len) for s in case.sequences))
    other = r.CausalAlignment.TOP_LEFT if case.causal_alignment == r.CausalAlignment.BOTTOM_RIGHT \
        else r.CausalAlignment.BOTTOM_RIGHT
    a = r.attention(r.materialize(case))
    b = r.attention(r.materialize(case.replace(causal_alignment=other)))
    assert close(a.output, b.output) and close(a.lse, b.lse)


@given(cases(KERNEL, SMALL))
def test_unbounded_window_sides_equal_no_window(case):
    assume(case.window is not None)
    unbounded = r.attention(r.materialize(case.replace(window=(None, None))))
    none = r.attention(r.materialize(case.replace(window=None)))
    assert close(unbounded.output, none.output) and close(unbounded.lse, none.lse)
