"""The up-projections the whole-MLA backends hand vLLM's layer make its decode and prefill compute the absorbed
case exactly: in float64 through both of the oracle's MLA formulations, and bit for bit in 16-bit arithmetic."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from backends.mla_projections import exact_projections
from reference import mla

# (kv_lora_rank, qk_nope, v_head): as vLLM's MLA shapes, scaled down (DeepSeek's 512 / 128 / 128, GLM's 512 / 192 / 256)
DIMS = st.sampled_from([(16, 4, 4), (16, 6, 8), (8, 8, 8)])


def _identity(heads: int, rank: int) -> mla.MLAWeights:
    eye = torch.eye(rank, dtype=torch.float64)[:, None, :].expand(rank, heads, rank)
    return mla.MLAWeights(w_uk=eye, w_uv=eye)


@settings(max_examples=40, deadline=None)
@given(dims=DIMS, heads=st.integers(1, 4), q_len=st.integers(1, 5), context=st.integers(0, 9),
       rope=st.sampled_from([2, 4]), chunk=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_exact_projections_turn_the_layer_forms_into_the_absorbed_case(dims, heads, q_len, context, rope, chunk, seed):
    rank, nope, v_head = dims
    g = torch.Generator().manual_seed(seed)
    p = exact_projections(heads, nope, v_head, seed)
    w = mla.MLAWeights(w_uk=p.uk.matrix(rank), w_uv=p.uv.matrix(rank))
    q_latent = torch.randn(q_len, heads, rank, generator=g, dtype=torch.float64)  # the case's absorbed query,
    q_latent[..., nope:] = 0  # 0 past qk_nope (Values.query_zero_dims)
    q_pe = torch.randn(q_len, heads, rope, generator=g, dtype=torch.float64)
    latent = torch.randn(context + q_len, rank, generator=g, dtype=torch.float64)
    k_pe = torch.randn(context + q_len, rope, generator=g, dtype=torch.float64)
    rows = torch.cat([latent, k_pe], dim=-1)
    scale = 0.3
    # the case: MQA over the latent rows, the value the latent's first v_head dimensions
    want, want_lse = mla.mla_absorbed(q_latent, q_pe, rows, _identity(heads, rank), scale)
    want = want[..., :v_head]

    q_nope = p.uk.spread(q_latent[..., :nope])  # what the harness hands the layer
    decode, decode_lse = mla.mla_absorbed(q_nope, q_pe, rows, w, scale)
    prefill, prefill_lse = mla.mla_prefill_chunked(q_nope, q_pe, latent, k_pe, w, scale, chunk)
    for out, lse in ((decode, decode_lse), (prefill, prefill_lse)):
        assert out.shape[-1] == v_head
        assert torch.allclose(p.uv.gather(out), want, atol=1e-12, rtol=1e-12)
        assert torch.allclose(lse, want_lse, atol=1e-12, rtol=1e-12)


@given(dims=DIMS, heads=st.integers(1, 4), tokens=st.integers(1, 7), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.bfloat16, torch.float16]))
def test_the_layers_16_bit_products_reproduce_the_case_bit_for_bit(dims, heads, tokens, seed, dtype):
    """vLLM's decode computes bmm(q_nope, W_UK_T) and bmm(o, W_UV), its prefill kv_b_proj(c), all in the model's
    dtype (MLAAttention.forward_impl, _v_up_proj, forward_mha): each sum has one non-zero term, so nothing rounds."""
    rank, nope, v_head = dims
    g = torch.Generator().manual_seed(seed)
    p = exact_projections(heads, nope, v_head, seed)
    weight = p.kv_b_proj_weight(rank, dtype)  # [H * (nope + v), R]
    w_uk, w_uv = weight.T.reshape(rank, heads, nope + v_head).split([nope, v_head], dim=-1)
    q_latent = torch.randn(tokens, heads, rank, generator=g).to(dtype)
    q_latent[..., nope:] = 0
    absorbed = torch.bmm(p.uk.spread(q_latent[..., :nope]).transpose(0, 1), w_uk.permute(1, 2, 0)).transpose(0, 1)
    assert torch.equal(absorbed, q_latent)
    latent = torch.randn(tokens, rank, generator=g).to(dtype)
    up = torch.nn.functional.linear(latent, weight).view(tokens, heads, nope + v_head)
    assert torch.equal(p.uk.gather(up[..., :nope]), latent[:, None, :nope].expand(tokens, heads, nope))
    assert torch.equal(p.uv.gather(up[..., nope:]), latent[:, None, :v_head].expand(tokens, heads, v_head))
    o = torch.randn(tokens, heads, rank, generator=g).to(dtype)
    out = torch.bmm(o.transpose(0, 1), w_uv.transpose(0, 1)).transpose(0, 1)
    assert torch.equal(p.uv.gather(out), o[..., :v_head])


def test_heads_get_different_permutations_and_the_seed_fixes_them():
    a, b = exact_projections(4, 16, 16, seed=3), exact_projections(4, 16, 16, seed=3)
    assert torch.equal(a.uk.index, b.uk.index) and torch.equal(a.uv.sign, b.uv.sign)
    assert len({tuple(row.tolist()) for row in a.uk.index}) == 4  # a head mix-up would show
