"""Adapter-side conversions that a square shape could fool."""
from __future__ import annotations

import torch

from backends._convert import tokens_first_lse


def test_lse_layout_follows_the_documentation_when_tokens_equal_heads():
    th = torch.arange(9.0).reshape(3, 3)  # [tokens, heads] with tokens == heads
    out, notes = tokens_first_lse(th, 3, 3, documented="TH")
    assert torch.equal(out, th) and notes == {}
    out, notes = tokens_first_lse(th.T.contiguous(), 3, 3, documented="HT")
    assert torch.equal(out, th) and notes == {}


def test_lse_layout_that_contradicts_the_documentation_is_followed_and_reported():
    th = torch.arange(6.0).reshape(3, 2)  # 3 tokens, 2 heads, but documented [heads, tokens]
    out, notes = tokens_first_lse(th, 3, 2, documented="HT")
    assert torch.equal(out, th) and "documented HT" in notes["lse_layout"]
    out, _ = tokens_first_lse(th[..., None], 3, 2, documented="TH")  # cuDNN's trailing 1
    assert torch.equal(out, th)


def test_position_rule_with_tensor_scalars_is_the_same_rule():
    # flex's FLASH backend needs the rule's integers as device tensors; the mask must not change.
    from hypothesis import HealthCheck, given, settings

    from backends._convert import key_offset, position_rule
    from fuzz.strategies import ORACLE_CAPS, Limits, cases

    @settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases(ORACLE_CAPS, Limits(max_sequences=2, max_context=30, max_query=6)))
    def check(case):
        plain, tensors = position_rule(case, "cpu"), position_rule(case, "cpu", tensor_scalars=True)
        for i, s in enumerate(case.sequences):
            qp = torch.arange(s.query_len)[:, None] + key_offset(case, i)
            kp = torch.arange(case.kv_lens[i])[None, :]
            for h in range(case.num_heads):
                assert torch.equal(plain(h, qp, kp), tensors(h, qp, kp))

    check()


def test_an_alibi_bias_counting_only_new_queries_moves_only_the_lse_and_by_alibi_context_term():
    """FlashInfer's LSE (measured: decode and prefill) uses slope * (k - i), i the query's index among its
    sequence's new tokens; the oracle slope * (k - q): the adapter subtracts alibi_context_term. Checked here
    on the oracle: the softmax over slope * (k - i) scores has its LSE, and its output is the oracle's."""
    import reference as r
    from backends._convert import alibi_context_term
    from reference.attention import attention
    from reference.inputs import materialize

    slopes = (0.5, 0.125, 0.03125, 2.0 ** -7)
    case = r.Case(sequences=(r.SequenceSpec(query_len=1, context_len=40), r.SequenceSpec(query_len=3, context_len=9)),
                  num_heads=4, num_kv_heads=2, head_size=16, dtype=r.DType.FLOAT32,
                  alibi=r.Alibi(slopes, r.AlibiConvention.SIGNED))
    inputs = materialize(case)
    expected = attention(inputs)
    lse_k_only, start = [], 0
    for seq, k in zip(case.sequences, inputs.keys):
        q = inputs.query[start:start + seq.query_len].double()
        start += seq.query_len
        pos_q = torch.arange(seq.query_len) + case.query_offset(seq)
        scores = torch.einsum("qhd,khd->hqk", q, k.double().repeat_interleave(2, 1)) * case.softmax_scale
        new_index = torch.arange(seq.query_len, dtype=torch.float64)  # i: among the new tokens only
        bias = torch.tensor(slopes, dtype=torch.float64)[:, None, None] * (
            torch.arange(k.shape[0])[None, None, :] - new_index[None, :, None])
        scores = scores + bias
        scores = scores.masked_fill(torch.arange(k.shape[0])[None, None] > pos_q[None, :, None], float("-inf"))
        lse_k_only.append(scores.logsumexp(-1).T)
        out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), inputs.values[len(lse_k_only) - 1].double()
                           .repeat_interleave(2, 1))
        assert torch.allclose(out, expected.output[start - seq.query_len:start], atol=1e-5)
    shifted = torch.cat(lse_k_only) - alibi_context_term(case, torch.tensor(slopes)).double()
    assert torch.allclose(shifted, expected.lse, atol=1e-5)


def test_rank_caches_hold_each_ranks_keys_in_local_order():
    # vllm-fa3-cp hands FA3 one cache per simulated rank: position p of a sequence at local index p // R of
    # rank p % R. Checked against the materialized keys, for the NHD-canonical layouts (fp8 caches as bytes).
    import dataclasses

    from hypothesis import HealthCheck, given, settings, strategies as st

    from backends.vllm_dcp import rank_cache
    from fuzz.strategies import ORACLE_CAPS, Limits, cases
    from reference import materialize
    from reference.case import AttentionType, KVLayout
    from tests.reference.test_cache_properties import _bits

    caps = dataclasses.replace(ORACLE_CAPS, attn_types=frozenset({AttentionType.DECODER}), requires_cache=True,
                               kv_layouts=frozenset({KVLayout.FLASH_NHD, KVLayout.VLLM_NHD, KVLayout.VLLM_HND}))

    @settings(max_examples=40, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases(caps, Limits(max_sequences=3, max_context=40, max_query=4, tiers=("small",))), st.integers(1, 4))
    def check(case, world):
        inputs = materialize(case)
        pool = inputs.cache.paged
        seq_lens = [int(n) for n in inputs.seq_lens]
        for rank in range(world):
            views = (pool.key_view(), pool.value_view())
            locals_, table, lengths = rank_cache(views, inputs.block_table, seq_lens, world, rank)
            assert lengths == [len(range(rank, n, world)) for n in seq_lens]
            for view, local, keys in zip(views, locals_, (inputs.keys, inputs.values)):
                assert local.dtype == view.dtype
                bs = view.shape[1]
                for i, n in enumerate(seq_lens):
                    j = torch.arange(lengths[i])
                    got = local[table[i, j // bs].long(), j % bs]
                    pos = j * world + rank
                    want = view[inputs.block_table[i, pos // bs].long(), pos % bs]
                    assert torch.equal(_bits(got), _bits(want))
                    if case.kv_cache_dtype.value == "auto":  # an unquantized cache holds the keys themselves
                        assert torch.equal(got, keys[i][pos])
    check()


def test_lse_merge_of_key_groups_equals_one_softmax_and_empty_rows_are_zero_minus_inf():
    # vllm-fa3-cp's torch combine (its A/B twin of vLLM's correct_attn_out): rank states merged by LSE.
    from backends.vllm_dcp import lse_merge

    g = torch.Generator().manual_seed(0)
    t, h, d, n_keys, world = 5, 3, 8, 23, 4
    scores = torch.randn(t, h, n_keys, generator=g, dtype=torch.float64) * 3
    values = torch.randn(n_keys, d, generator=g, dtype=torch.float64)
    visible = torch.rand(t, h, n_keys, generator=g) < 0.6
    visible[0] = False  # a row no rank sees
    scores = scores.masked_fill(~visible, float("-inf"))
    outs, lses = [], []
    for r in range(world):
        s = scores[..., r::world]
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
        outs.append((p @ values[r::world]).float())
        lses.append(lse.float())
    out, lse = lse_merge(outs, torch.stack(lses))
    full_lse = torch.logsumexp(scores, -1)
    full = torch.softmax(scores[1:], -1) @ values
    assert torch.allclose(out[1:].double(), full, atol=1e-5) and torch.allclose(lse[1:].double(), full_lse[1:], atol=1e-5)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and bool((lse[0] == float("-inf")).all())


def test_a_blind_share_twin_draws_its_gpu_backends_region_and_runs_on_the_cpu():
    # benchmarks/blind_twins.py: the blind share of a GPU backend's region, measured without a GPU
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from backends.registry import get
    from benchmarks.blind_twins import OnNaive
    from fuzz.compare import evaluate
    from hypothesis import HealthCheck, given, settings

    from fuzz.strategies import Limits, cases

    inner = get("vllm-triton-decode")
    twin = OnNaive(inner)
    assert twin.availability() is None and twin.device() == "cpu"
    assert (twin.caps.dtypes, twin.caps.head_sizes, twin.caps.encodings) == (
        inner.caps.dtypes, inner.caps.head_sizes, inner.caps.encodings)

    @settings(max_examples=8, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases(twin.caps, Limits(max_sequences=2, max_context=40, max_query=4, tiers=("small",))))
    def check(case):
        assert case.max_query_len <= 1  # the decode kernel's region: one query per sequence
        row = evaluate(twin, case).row
        assert row["verdict"] in ("pass", "blind", "unsupported"), row.get("message")
    check()


def test_varlen_offsets_are_the_cases_cumulative_lengths():
    # the varlen adapters read their cu_seqlens from the inputs' own offsets: they must be the Case's lengths summed
    from hypothesis import HealthCheck, given, settings

    from backends._convert import cu_seqlens, varlen_offsets
    from fuzz.strategies import ORACLE_CAPS, Limits, cases
    from reference.inputs import materialize

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases(ORACLE_CAPS, Limits(max_sequences=4, tiers=("small", "tile"))))
    def check(case):
        cu_q, cu_k = varlen_offsets(materialize(case))
        assert cu_q.dtype == cu_k.dtype == torch.int32
        assert torch.equal(cu_q, cu_seqlens(case.query_lens, "cpu")) and torch.equal(cu_k, cu_seqlens(case.kv_lens, "cpu"))

    check()
