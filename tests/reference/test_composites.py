"""Each composite algorithm (how backends split attention) equals the direct oracle."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, strategies as st

import reference as r
from backends.base import Feature
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference import batching, block_sparse, cascade, dcp, local_batches, mla
from reference.visibility import query_positions, visible
from tests.reference.test_oracle_properties import close

SMALL = Limits(max_sequences=3, max_context=40, max_query=6, max_kv_heads=2, tiers=("small",))
DECODER = dataclasses.replace(ORACLE_CAPS, attn_types=frozenset({r.AttentionType.DECODER}))
PAGED_DECODER = dataclasses.replace(DECODER, requires_cache=True)


def same(a: r.Expected, b: r.Expected, tol: float = 1e-10) -> bool:
    return close(a.output, b.output, tol) and close(a.lse, b.lse, tol)


# --- merge contract ------------------------------------------------------------------------------

def test_merge_with_an_empty_side_returns_the_other_and_two_empty_sides_give_zero_and_minus_inf():
    out = torch.randn(3, 2, 4, dtype=torch.float64)
    lse = torch.randn(3, 2, dtype=torch.float64)
    zero, ninf = torch.zeros_like(out), torch.full_like(lse, -math.inf)
    for merged in (r.merge_attn_states(out, lse, zero, ninf), r.merge_attn_states(zero, ninf, out, lse)):
        assert torch.equal(merged[0], out) and torch.equal(merged[1], lse)
    both = r.merge_attn_states(zero, ninf, zero, ninf)
    assert torch.equal(both[0], zero) and torch.isneginf(both[1]).all() and not both[0].isnan().any()
    plus_inf = r.merge_attn_states(out, lse, zero, torch.full_like(lse, math.inf))  # vLLM's empty marker
    assert torch.equal(plus_inf[0], out)


@given(st.lists(st.floats(-50, 50), min_size=1, max_size=8))
def test_lse_base_conversion_round_trips_and_matches_log2(logits):
    x = torch.tensor(logits, dtype=torch.float64)
    lse = torch.logsumexp(x, 0)
    assert torch.allclose(r.lse_to_base2(lse), torch.log2(torch.exp2(x * r.merge.LOG2_E).sum()), atol=1e-9, rtol=0)
    assert torch.allclose(r.lse_from_base2(r.lse_to_base2(lse)), lse, atol=1e-12)
    assert torch.isneginf(r.lse_to_base2(torch.tensor(-math.inf)))


# --- cascade -------------------------------------------------------------------------------------

CASCADE = dataclasses.replace(PAGED_DECODER, block_sizes=(1, 2, 3, 4, 8, 16), features=ORACLE_CAPS.features - {
    Feature.ALIBI, Feature.WINDOW, Feature.CHUNKED_LOCAL, Feature.BLOCK_SPARSE, Feature.PREFIX_LM, Feature.GLOBAL_PREFIX,
    Feature.CHUNK_LOOKBACK, Feature.QQ_BIAS})


@given(cases(CASCADE, SMALL), st.integers(1, 3), st.integers(0, 8))
def test_cascade_prefix_plus_suffix_equals_direct(case, prefix_blocks, extra):
    bs = case.cache.block_size
    p = prefix_blocks * bs
    seqs = tuple(dataclasses.replace(s, context_len=max(s.context_len, p + extra % (s.context_len + 1)))
                 for s in case.sequences)
    case = case.replace(sequences=seqs, cache=dataclasses.replace(
        case.cache, table=r.BlockTableKind.SHARED_PREFIX, prefix_blocks=prefix_blocks))
    inputs = r.materialize(case)
    assert same(cascade.cascade_attention(inputs, p), r.attention(inputs))


def test_cascade_refuses_what_vllm_asserts_off():
    case = r.Case(sequences=(r.SequenceSpec(1, 16),), sliding_window=4, cache=r.CacheSpec(block_size=8))
    with pytest.raises(ValueError, match="sliding_window"):
        cascade.cascade_attention(r.materialize(case), 8)
    with pytest.raises(ValueError, match="multiple of block_size"):
        cascade.cascade_attention(r.materialize(case.replace(sliding_window=None)), 12)


@pytest.mark.parametrize("prefix,query_lens,heads,kv_heads,alibi,window,local,sms,dcp_size,expected", [
    (255, [1] * 16, 32, 8, False, False, False, 132, 1, False),  # prefix below 256 tokens
    (1024, [1] * 16, 32, 8, True, False, False, 132, 1, False),  # ALiBi
    (1024, [1] * 16, 32, 8, False, True, False, 132, 1, False),  # sliding window
    (1024, [1] * 16, 32, 8, False, False, True, 132, 1, False),  # local attention
    (1024, [1] * 7, 32, 8, False, False, False, 132, 1, False),  # fewer than 8 requests
    (1024, [1] * 16, 32, 8, False, False, False, 132, 2, False),  # DCP
    (1024, [2] * 16, 32, 8, False, False, False, 132, 1, True),  # not FlashDecoding: cascade
    (1024, [1] * 16, 32, 32, False, False, False, 132, 1, True),  # MHA decode: no FlashDecoding
    # All-decode GQA: the CTA model. 16 reqs, 32 heads: cascade 1 wave x 8 tiles = 8;
    # FlashDecoding 16*8*1*8 = 1024 CTAs / 132 SMs = 8 waves: not faster, so no cascade.
    (1024, [1] * 16, 32, 8, False, False, False, 132, 1, False),
    # 256 reqs: cascade cdiv(32*2, 132)=1 x 8 = 8; FlashDecoding cdiv(256*8*8, 132) = 125: cascade.
    (1024, [1] * 256, 32, 8, False, False, False, 132, 1, True),
])
def test_use_cascade_attention_documented_cases(prefix, query_lens, heads, kv_heads, alibi, window, local, sms,
                                                dcp_size, expected):
    assert cascade.use_cascade_attention(prefix, np.array(query_lens), heads, kv_heads, alibi, window, local, sms,
                                         dcp_size) is expected


# --- decode context parallelism ------------------------------------------------------------------

@given(st.integers(0, 200), st.integers(1, 8), st.integers(1, 8))
def test_dcp_local_lengths_count_the_positions_each_rank_owns(length, world, interleave):
    owner = dcp.dcp_owner(torch.arange(length), world, interleave)
    total = 0
    for rank in range(world):
        n = int(dcp.dcp_local_seq_lens(torch.tensor([length]), world, rank, interleave)[0])
        assert n == int((owner == rank).sum())
        pos = dcp.dcp_global_position(torch.arange(n), rank, world, interleave)
        assert bool((dcp.dcp_owner(pos, world, interleave) == rank).all()) and (pos < length).all()
        total += n
    assert total == length


@given(cases(DECODER, SMALL), st.integers(1, 4), st.integers(1, 4))
def test_dcp_ranks_merged_equal_direct(case, world, interleave):
    inputs = r.materialize(case)
    assert same(dcp.dcp_attention(inputs, world, interleave), r.attention(inputs))


@given(cases(ORACLE_CAPS, SMALL), st.integers(1, 4), st.integers(1, 3))
def test_cp_every_key_on_the_ranks_merged_equals_direct(case, world, interleave):
    """FA3's context parallelism (new tokens on the ranks too), for every attention type and mask rule."""
    inputs = r.materialize(case)
    assert same(dcp.cp_attention(inputs, world, interleave), r.attention(inputs))


CAUSAL_ONLY = dataclasses.replace(PAGED_DECODER, features=ORACLE_CAPS.features - {
    Feature.WINDOW, Feature.CHUNKED_LOCAL, Feature.BLOCK_SPARSE, Feature.PREFIX_LM, Feature.GLOBAL_PREFIX,
    Feature.CHUNK_LOOKBACK})


@given(cases(CAUSAL_ONLY, SMALL), st.integers(1, 4))
def test_cp_rank_mask_is_fa3s_rule_at_global_positions(case, world):
    """Second formulation of a rank's causal mask, as FA3 writes it for cp_world_size > 1 (hopper/mask.h):
    local key j of rank r stands at j * R + r and is visible to row m iff j * R + r <= m + tot_seqlen_k - seqlen_q."""
    for i, seq in enumerate(case.sequences):
        tot, q_len = seq.context_len + seq.query_len, seq.query_len
        mask = visible(case, seq, i)[0]
        for rank in range(world):
            pos = dcp.rank_positions(tot, world, rank, 1)
            local = torch.arange(pos.numel())
            assert torch.equal(pos, local * world + rank)
            rule = (local * world + rank)[None, :] <= torch.arange(q_len)[:, None] + tot - q_len
            assert torch.equal(mask[:, pos], rule)


# --- chunked local attention as virtual batches --------------------------------------------------

def test_virtual_batches_match_the_worked_example_in_vllm():
    query_start_loc = torch.tensor([0, 4, 14, 19])
    seq_lens = torch.tensor([6, 17, 9])
    table = torch.arange(30, dtype=torch.int32).reshape(3, 10)
    vb = local_batches.make_local_attention_virtual_batches(4, query_start_loc, seq_lens, table, block_size=2)
    assert vb.seqlens_q.tolist() == [2, 2, 1, 4, 4, 1, 4, 1]
    assert vb.seqlens_k.tolist() == [4, 2, 4, 4, 4, 1, 4, 1]
    assert vb.key_start.tolist() == [0, 4, 4, 8, 12, 16, 4, 8]
    assert vb.block_table.tolist() == [[0, 1], [2, 3], [12, 13], [14, 15], [16, 17], [18, 19], [22, 23], [24, 25]]
    assert vb.cu_seqlens_q.tolist() == [0, 2, 4, 5, 9, 13, 14, 18, 19]


@given(cases(DECODER, SMALL), st.sampled_from([1, 2, 4, 8]), st.integers(1, 4))
def test_virtual_batches_equal_the_chunked_local_mask(case, blocks_per_chunk, _):
    assume(case.block_sparse is None and all(s.query_len > 0 for s in case.sequences))
    if case.cache is not None:
        chunk = case.cache.block_size * blocks_per_chunk
    else:
        chunk = blocks_per_chunk + _
    case = case.replace(attn_chunk_size=chunk, bidirectional_ranges=None, global_prefix=None, chunk_lookback=None,
                        qq_bias=False)  # vLLM's unified-attention rules are not defined on virtual batches
    inputs = r.materialize(case)
    assert same(local_batches.local_attention_via_virtual_batches(inputs), r.attention(inputs))


# --- block-sparse --------------------------------------------------------------------------------

@given(cases(dataclasses.replace(DECODER, features=frozenset({Feature.BLOCK_SPARSE, Feature.GQA, Feature.MQA,
                                                              Feature.CONTEXT})), SMALL))
def test_block_sparse_predicate_equals_the_dense_block_layout(case):
    assume(case.block_sparse is not None)
    sparse = case.block_sparse
    for seq in case.sequences:
        n = r.kv_len(case.attn_type, seq)
        layout = block_sparse.block_layout(sparse, case.num_heads, case.num_kv_heads, -(-max(n, 1) // sparse.block_size))
        expanded = block_sparse.token_mask_from_layout(layout, sparse.block_size, query_positions(case, seq), n)
        assert torch.equal(visible(case, seq).expand_as(expanded), expanded)


def test_block_sparse_heads_follow_vllm_sliding_step():
    sparse = r.BlockSparse(block_size=1, local_blocks=0, vert_stride=8)
    # 4 heads over 1 TP rank: step = 8 // 4 = 2, offsets 1, 3, 5, 7.
    assert [block_sparse.head_offset(sparse, h, 4, 2) for h in range(4)] == [1, 3, 5, 7]
    # Rank 1 of 2 holds global heads 4..7: step = 8 // 8 = 1.
    rank1 = dataclasses.replace(sparse, tp_size=2, tp_rank=1)
    assert [block_sparse.head_offset(rank1, h, 4, 2) for h in range(4)] == [5, 6, 7, 8]
    group = dataclasses.replace(sparse, homo_head_group=True)  # slides over the 2 kv heads: step -4
    assert [block_sparse.head_offset(group, h, 4, 2) for h in range(4)] == [1, 1, 5, 5]
    homo = dataclasses.replace(sparse, homo_head=True)
    assert {block_sparse.head_offset(homo, h, 4, 2) for h in range(4)} == {1}


# --- MLA -----------------------------------------------------------------------------------------

@given(st.integers(1, 6), st.integers(0, 40), st.integers(1, 4), st.sampled_from([4, 8, 16]), st.sampled_from([2, 4]),
       st.sampled_from([4, 8]), st.sampled_from([4, 8]), st.integers(1, 17), st.integers(0, 2**31 - 1))
def test_mla_absorbed_and_chunked_prefill_equal_expanded(q_len, context, heads, rank, rope, nope, dv, chunk, seed):
    """Three formulations of one MLA: up-projected keys (expanded), the query absorbed into the latent space, and
    vLLM's prefill (context chunks of `chunk` keys seen whole, new tokens causal, merged by LSE)."""
    g = torch.Generator().manual_seed(seed)
    n = context + q_len

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    w = mla.MLAWeights(w_uk=rand(rank, heads, nope) / rank**0.5, w_uv=rand(rank, heads, dv))
    q_nope, q_pe, latent, k_pe = rand(q_len, heads, nope), rand(q_len, heads, rope), rand(n, rank), rand(n, rope)
    scale = (nope + rope) ** -0.5
    expanded = mla.mla_expanded(q_nope, q_pe, latent, k_pe, w, scale)
    absorbed = mla.mla_absorbed(q_nope, q_pe, torch.cat([latent, k_pe], -1), w, scale)
    chunked = mla.mla_prefill_chunked(q_nope, q_pe, latent, k_pe, w, scale, chunk)
    for other in (absorbed, chunked):
        assert torch.allclose(expanded[0], other[0], atol=1e-9, rtol=0)
        assert torch.allclose(expanded[1], other[1], atol=1e-9, rtol=0)


@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 20)), min_size=1, max_size=4), st.integers(1, 2),
       st.sampled_from([1, 3, 16]), st.integers(0, 2**31 - 1))
def test_mla_decodes_absorbed_from_the_paged_latent_cache_and_prefills_expanded_equal_expanded(
        seqs, threshold, block_size, seed):
    """vLLM's MLA split: decodes read the latent cache (absorbed), prefills up-project (expanded)."""
    heads, rank, rope, nope, dv = 3, 8, 4, 8, 4
    case = r.Case(sequences=tuple(r.SequenceSpec(q, c) for q, c in seqs), num_heads=heads, num_kv_heads=1,
                  head_size=rank + rope, head_size_v=rank, dtype=r.DType.FLOAT32,
                  cache=r.CacheSpec(layout=r.KVLayout.MLA_LATENT, block_size=block_size,
                                    table=r.BlockTableKind.SHUFFLED), seed=seed)
    inputs = r.materialize(case)
    g = torch.Generator().manual_seed(seed)
    w = mla.MLAWeights(w_uk=torch.randn(rank, heads, nope, generator=g, dtype=torch.float64),
                       w_uv=torch.randn(rank, heads, dv, generator=g, dtype=torch.float64))
    q_nope = torch.randn(case.num_tokens, heads, nope, generator=g, dtype=torch.float64)
    q_pe = torch.randn(case.num_tokens, heads, rope, generator=g, dtype=torch.float64)
    scale = (nope + rope) ** -0.5
    order = batching.reorder_decodes_first(case.query_lens, threshold)
    num_decodes, *_ = batching.split_decodes_and_prefills([case.query_lens[i] for i in order], threshold)
    for rank_in_order, i in enumerate(order):
        a, b = int(inputs.query_start_loc[i]), int(inputs.query_start_loc[i + 1])
        latent_rows = inputs.keys[i].double()[:, 0]  # [kv, R + P] as written
        direct = mla.mla_expanded(q_nope[a:b], q_pe[a:b], latent_rows[:, :rank], latent_rows[:, rank:], w, scale)
        if rank_in_order < num_decodes:
            cached, _ = r.read_kv(inputs.cache, inputs.block_table[i], case.kv_lens[i])
            got = mla.mla_absorbed(q_nope[a:b], q_pe[a:b], cached[:, 0], w, scale)
        else:
            got = mla.mla_expanded(q_nope[a:b], q_pe[a:b], latent_rows[:, :rank], latent_rows[:, rank:], w, scale)
        assert torch.allclose(got[0], direct[0], atol=1e-9, rtol=0) and torch.allclose(got[1], direct[1], atol=1e-9, rtol=0)


@given(st.sampled_from([r.KVCacheDType.AUTO, r.KVCacheDType.FP8_E4M3]), st.sampled_from([0.02, 0.5, 3.0]),
       st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_mla_over_the_written_latent_cache_absorbed_equals_expanded(fmt, scale_kv, n, seed):
    """The cache writer's rows (fp8: one per-tensor scale for latent and rope): decoding them absorbed equals
    up-projecting the same stored values; a 16-bit row is stored exactly, an fp8 one within its step."""
    g = torch.Generator().manual_seed(seed)
    heads, rank, rope, nope, dv = 2, 8, 4, 8, 4
    kv_c = torch.randn(n, rank, generator=g).to(torch.bfloat16)
    k_pe = torch.randn(n, rope, generator=g).to(torch.bfloat16)
    stored = mla.latent_cache_rows(kv_c, k_pe, fmt, scale_kv)
    assert stored.shape == (n, rank + rope)
    rows = mla.latent_rows_value(stored, fmt, scale_kv)
    exact = torch.cat([kv_c, k_pe], -1).double()
    if fmt.is_fp8:
        assert stored.dtype == torch.float8_e4m3fn
        assert torch.all((rows - exact).abs() <= exact.abs() / 16 + scale_kv * 2.0**-9)  # e4m3: 3 mantissa bits
    else:
        assert torch.equal(rows, exact)
    w = mla.MLAWeights(w_uk=torch.randn(rank, heads, nope, generator=g, dtype=torch.float64),
                       w_uv=torch.randn(rank, heads, dv, generator=g, dtype=torch.float64))
    q_nope = torch.randn(1, heads, nope, generator=g, dtype=torch.float64)
    q_pe = torch.randn(1, heads, rope, generator=g, dtype=torch.float64)
    absorbed = mla.mla_absorbed(q_nope, q_pe, rows, w, (nope + rope) ** -0.5)
    expanded = mla.mla_expanded(q_nope, q_pe, rows[:, :rank], rows[:, rank:], w, (nope + rope) ** -0.5)
    assert torch.allclose(absorbed[0], expanded[0], atol=1e-9, rtol=0)
    assert torch.allclose(absorbed[1], expanded[1], atol=1e-9, rtol=0)


# --- batch splitting -----------------------------------------------------------------------------

@given(st.lists(st.integers(0, 6), min_size=1, max_size=10), st.integers(1, 3))
def test_reorder_puts_decodes_first_with_vllms_swaps(query_lens, threshold):
    order = batching.reorder_decodes_first(query_lens, threshold)
    assert sorted(order) == list(range(len(query_lens)))
    reordered = [query_lens[i] for i in order]
    d, p, dt, pt = batching.split_decodes_and_prefills(reordered, threshold)
    assert all(n <= threshold for n in reordered[:d]) and all(n > threshold for n in reordered[d:])
    assert (d + p, dt + pt) == (len(query_lens), sum(query_lens))
    moved = sum(1 for i, j in enumerate(order) if i != j)
    misplaced = sum(1 for i, n in enumerate(query_lens) if n <= threshold and i >= d)
    assert moved == 2 * misplaced  # each swap moves one misplaced decode and one prefill


@given(cases(ORACLE_CAPS, SMALL), st.integers(1, 4))
def test_running_decodes_and_prefills_separately_equals_the_whole_batch(case, threshold):
    inputs = r.materialize(case)
    whole = r.attention(inputs)
    order = batching.reorder_decodes_first(case.query_lens, threshold)
    d, *_ = batching.split_decodes_and_prefills([case.query_lens[i] for i in order], threshold)
    rows = []
    parts = []
    for part in (order[:d], order[d:]):
        if not part or sum(case.query_lens[i] for i in part) == 0:
            continue
        parts.append(r.attention(batching.select_sequences(inputs, part)))
        rows += [torch.arange(int(inputs.query_start_loc[i]), int(inputs.query_start_loc[i + 1])) for i in part]
    if not parts:
        return
    index = torch.cat(rows)
    out, lse = torch.cat([p.output for p in parts]), torch.cat([p.lse for p in parts])
    assert close(out, whole.output[index]) and close(lse, whole.lse[index])
