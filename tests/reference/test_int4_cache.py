"""Laws of vLLM 0.26's int4 per-(token, head) cache (reference/int4.py): the rotation, the codes, the
zero point hidden in the scale, and attention over such a cache computed a second way."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import assume, given, strategies as st

import reference as r
from backends import _int4
from backends.base import Feature
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference import int4, layouts
from reference.visibility import visible
from reference.inputs import read_kv

POW2 = st.sampled_from([2, 4, 8, 16, 32, 64, 128, 256])
INT4 = r.KVCacheDType.INT4_PER_TOKEN_HEAD
INT4_CAPS = dataclasses.replace(ORACLE_CAPS, attn_types=frozenset({r.AttentionType.DECODER}), requires_cache=True,
                                kv_cache_dtypes=frozenset({INT4}), head_sizes=(8, 16, 24, 32, 64))
PLAIN_INT4 = dataclasses.replace(INT4_CAPS, features=frozenset({Feature.GQA, Feature.CONTEXT, Feature.WINDOW}))
SMALL = Limits(max_sequences=3, max_context=40, max_query=6, max_kv_heads=2, tiers=("small",))


def _vectors(d: int, seed: int, n: int = 6) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@given(POW2)
def test_sylvester_matrix_is_the_walsh_hadamard_matrix(d):
    """Second formulation: H[i, j] = (-1)^popcount(i & j), and H H = d I."""
    h = int4.sylvester(d)
    i = torch.arange(d)
    bits = (i[:, None] & i[None, :])
    parity = torch.zeros_like(bits)
    while bits.any():
        parity ^= bits & 1
        bits = bits >> 1
    assert torch.equal(h, 1.0 - 2.0 * parity.double())
    assert torch.equal(h @ h, d * torch.eye(d, dtype=torch.float64))


@given(POW2, st.integers(0, 2**16))
def test_rotation_is_inverted_and_scales_inner_products_by_d(d, seed):
    x, y = _vectors(d, seed), _vectors(d, seed + 1)
    assert torch.allclose(int4.unrotate(int4.rotate(x)), x, atol=1e-12)
    assert torch.allclose((int4.rotate(x) * int4.rotate(y)).sum(-1), d * (x * y).sum(-1), rtol=1e-10, atol=1e-9)


@given(POW2, st.integers(0, 2**16))
def test_the_kernel_shaped_butterfly_rotates_as_the_matrix_does(d, seed):
    """backends/_int4.fwht (float32 butterfly) against the oracle's float64 matrix form."""
    x = _vectors(d, seed)
    signs = int4.rotation_signs(d)
    assert torch.allclose(_int4.fwht((x * signs).float()).double(), int4.rotate(x), rtol=1e-5, atol=1e-4 * d)


def test_rotation_signs_are_plus_minus_one_and_mixed():
    s = int4.rotation_signs(128)
    assert set(s.tolist()) == {-1.0, 1.0}
    assert 32 < int((s > 0).sum()) < 96  # a coin per element, not a constant


@given(st.lists(st.integers(0, 15), min_size=2, max_size=64).filter(lambda c: len(c) % 2 == 0))
def test_nibbles_pack_element_2i_low_and_unpack_back(codes):
    n = torch.tensor(codes, dtype=torch.uint8)
    b = int4.pack_nibbles(n)
    assert b.tolist() == [lo + 16 * hi for lo, hi in zip(codes[0::2], codes[1::2])]
    assert torch.equal(int4.unpack_nibbles(b), n)


@given(st.floats(2.0**-20, 2.0**20, width=32), st.integers(0, 15))
def test_the_zero_point_rides_in_the_scale_low_bits(scale, zero):
    stored = int4.hide_zero_point(torch.tensor([scale]), torch.tensor([zero]))
    s, z = int4.split_scale(stored)
    assert int(z) == zero
    assert abs(float(s) - scale) <= scale * 2.0**-19  # at most the low 4 of 23 mantissa bits are cleared
    assert int(s.view(torch.int32)) & 0xF == 0


@given(POW2.filter(lambda d: d >= 8), st.integers(0, 2**16), st.sampled_from([torch.float32, torch.bfloat16]))
def test_codes_are_within_half_a_quantum_of_the_rotated_vector(d, seed, dtype):
    """Dequantized codes reproduce the rotated (dtype-rounded) vector to scale / 2 when 0 lies in its range."""
    x = _vectors(d, seed).to(dtype)
    rot = int4.rotate(x).to(dtype)
    assume(bool(((rot.amin(-1) <= 0) & (rot.amax(-1) >= 0)).all()))
    packed, stored = int4.encode(x)
    scale, zero = int4.split_scale(stored)
    deq = (int4.unpack_nibbles(packed).double() - zero.double()[..., None]) * scale.double()[..., None]
    quantum = scale.double()[..., None]
    assert bool(((deq - rot.double()).abs() <= quantum * (0.5 + 1e-4)).all())
    # and the extremes use the whole code range
    codes = int4.unpack_nibbles(packed)
    assert bool((codes.amax(-1) - codes.amin(-1) >= 14).all())


@given(POW2.filter(lambda d: d >= 4), st.integers(0, 2**16))
def test_kernel_shaped_writer_stores_the_oracle_bytes(d, seed):
    """backends/_int4.store (the CPU twin of vLLM's writer) and reference/int4.encode agree bit for bit
    on the CPU, and their readers agree to float32 rounding."""
    x = _vectors(d, seed).to(torch.bfloat16)
    (p1, s1), (p2, s2) = int4.encode(x), _int4.store(x)
    assert torch.equal(p1, p2) and torch.equal(s1.view(torch.int32), s2.view(torch.int32))
    assert torch.allclose(_int4.load(p2, s2).double(), int4.decode(p1, s1), atol=1e-5)


@given(cases(INT4_CAPS, SMALL))
def test_int4_cache_reads_back_each_tokens_own_encoding(case):
    """Second formulation: encoding each sequence's keys directly (no pages, no slots) gives what the
    paged cache reads back."""
    inputs = r.materialize(case)
    for i in range(len(case.sequences)):
        k, v = read_kv(inputs.cache, inputs.block_table[i], case.kv_lens[i])
        for got, x in ((k, inputs.keys[i]), (v, inputs.values[i])):
            assert torch.equal(got, int4.decode(*int4.encode(x)))


@given(cases(PLAIN_INT4, SMALL))
def test_attention_over_int4_equals_attention_in_the_rotated_domain(case):
    """What vLLM's kernel computes: rotated queries against the dequantized rotated codes, scale / d,
    and the output rotated back. Equal to the oracle (which unrotates the keys instead) in float64."""
    inputs = r.materialize(case)
    want = r.attention(inputs)
    d = case.head_size
    for i, seq in enumerate(case.sequences):
        a, b = int(inputs.query_start_loc[i]), int(inputs.query_start_loc[i + 1])
        mask = visible(case, seq, i)[0]
        if b == a or not bool(mask.any(-1).all()):
            continue
        packed_k, packed_v = layouts.gather(inputs.cache.paged, inputs.block_table[i], case.kv_lens[i])
        slots = torch.arange(case.kv_lens[i])
        blocks = inputs.block_table[i].long()[slots // case.cache.block_size]
        offsets = slots % case.cache.block_size
        rot = []
        for packed, stored in ((packed_k, inputs.cache.k_token_scales), (packed_v, inputs.cache.v_token_scales)):
            scale, zero = int4.split_scale(stored[blocks, offsets])
            codes = int4.unpack_nibbles(packed).double()
            rot.append(((codes - zero.double()[..., None]) * scale.double()[..., None]).repeat_interleave(
                case.num_heads // case.num_kv_heads, 1))
        q_rot = int4.rotate(inputs.query[a:b].double())
        scores = torch.einsum("qhd,khd->hqk", q_rot, rot[0]) * case.softmax_scale / d
        scores = scores.masked_fill(~mask, float("-inf"))
        out = int4.unrotate(torch.einsum("hqk,khd->qhd", scores.softmax(-1), rot[1]))
        assert torch.allclose(out, want.output[a:b], atol=1e-9), case.to_json()


def test_int4_case_validation_names_the_head_size():
    seqs = (r.SequenceSpec(2, 8),)
    quant = r.Quant(kv_cache_dtype=INT4)
    r.Case(sequences=seqs, head_size=32, cache=r.CacheSpec(block_size=4, quant=quant))  # a power of two: valid
    with pytest.raises(r.CaseError, match="head_size=24.*powers of two"):
        r.Case(sequences=seqs, head_size=24, cache=r.CacheSpec(block_size=4, quant=quant))
    with pytest.raises(r.CaseError, match="paged_v0"):
        r.Case(sequences=seqs, head_size=32, cache=r.CacheSpec(block_size=4, quant=quant, layout=r.KVLayout.PAGED_V0))
