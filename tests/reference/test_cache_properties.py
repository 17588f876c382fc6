"""Laws of the paged cache: layouts, block tables, quantization and canaries."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import assume, given, strategies as st

import reference as r
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference import layouts, quant
from reference.inputs import read_kv, write_kv

SMALL = Limits(max_sequences=3, max_context=40, max_query=6, max_kv_heads=2, tiers=("small",))
PAGED = dataclasses.replace(ORACLE_CAPS, attn_types=frozenset({r.AttentionType.DECODER, r.AttentionType.ENCODER_DECODER}),
                            requires_cache=True)
UNQUANTIZED = dataclasses.replace(PAGED, kv_cache_dtypes=frozenset({r.KVCacheDType.AUTO}))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.dtype.itemsize == 1 else t


@given(cases(UNQUANTIZED, SMALL))
def test_write_then_gather_is_identity_for_unquantized_layouts(case):
    inputs = r.materialize(case)
    for i in range(len(case.sequences)):
        k, v = read_kv(inputs.cache, inputs.block_table[i], case.kv_lens[i], case.dtype.torch)
        assert torch.equal(k, inputs.keys[i]) and torch.equal(v, inputs.values[i])


@given(cases(PAGED, SMALL))
def test_writing_new_tokens_through_slot_mapping_gives_the_cache_vllm_reads(case):
    inputs = r.materialize(case)
    cache = inputs.cache_before_write.clone()
    write_kv(cache, inputs.key, inputs.value, inputs.slot_mapping)
    for x, y in zip(cache.paged.tensors, inputs.cache.paged.tensors):
        assert torch.equal(_bits(x), _bits(y)) or torch.allclose(x.double(), y.double(), equal_nan=True)


@given(cases(PAGED, SMALL), st.data())
def test_every_layout_gives_the_same_attention(case, data):
    spec = case.cache
    kvd = spec.quant.kv_cache_dtype
    choices = [l for l in r.KVLayout if not kvd.is_int8 or l == r.KVLayout.FLASH_HND]
    x = 16 // (1 if kvd.is_one_byte else case.dtype.torch.itemsize)
    # paged_v0 packs x elements of a head per 16 bytes, and never an int4 cache's two codes per byte (Case validation)
    v0 = case.head_size % x == 0 and case.value_size == case.head_size and kvd != r.KVCacheDType.INT4_PER_TOKEN_HEAD
    choices = [l for l in choices if l != r.KVLayout.PAGED_V0 or v0]
    packed = (r.KVLayout.VLLM_NHD, r.KVLayout.VLLM_HND)  # one 2 * head_size last dimension for K and V
    choices = [l for l in choices if l not in packed or (case.value_size == case.head_size
                                                         and kvd != r.KVCacheDType.INT8_K_FP16_V)]
    # mla_latent draws its values as the latent's prefix (other data): it is checked on its own below
    assume(spec.layout != r.KVLayout.MLA_LATENT)
    other = data.draw(st.sampled_from([l for l in choices if l != r.KVLayout.MLA_LATENT]))
    layers = layer = 0
    if other in (r.KVLayout.FLASH_NHD, r.KVLayout.FLASH_HND) and case.value_size == case.head_size \
            and kvd != r.KVCacheDType.INT8_K_FP16_V:
        layers = data.draw(st.sampled_from([0, 1, 3]))
        layer = data.draw(st.integers(0, max(0, layers - 1)))
    a = r.attention(r.materialize(case))
    b = r.attention(r.materialize(case.replace(cache=dataclasses.replace(spec, layout=other, layers=layers, layer=layer))))
    assert torch.equal(a.output, b.output) and torch.equal(a.lse, b.lse)


@given(cases(UNQUANTIZED, SMALL))
def test_mla_latent_value_is_the_latent_prefix_in_memory(case):
    assume(case.num_kv_heads == 1 and case.value_size <= case.head_size)
    case = case.replace(cache=dataclasses.replace(case.cache, layout=r.KVLayout.MLA_LATENT, layers=0, layer=0))
    inputs = r.materialize(case)
    paged = inputs.cache.paged
    (latent,) = paged.tensors
    assert latent.shape == (paged.num_blocks, case.cache.block_size, case.head_size)
    assert paged.value_view().data_ptr() == paged.key_view().data_ptr()  # one tensor, no copy
    for i in range(len(case.sequences)):
        assert torch.equal(inputs.values[i], inputs.keys[i][..., : case.value_size])


@pytest.mark.parametrize("layout,memory", [(r.KVLayout.FLASH_NHD, (5, 3, 2, 4, 2, 8)),
                                           (r.KVLayout.FLASH_HND, (5, 2, 3, 2, 4, 8))])
def test_layered_cache_is_one_tensor_in_vllm_stride_order(layout, memory):
    cache = layouts.allocate(layout, num_blocks=5, block_size=4, num_kv_heads=2, head_size=8, head_size_v=8,
                             key_dtype=torch.float16, layers=3, layer=1)
    unlayered = layouts.allocate(layout, 5, 4, 2, 8, 8, torch.float16)
    (t,) = cache.tensors
    assert t.shape == unlayered.tensors[0].shape and not t.is_contiguous()
    order = {r.KVLayout.FLASH_NHD: (2, 0, 1, 3, 4, 5), r.KVLayout.FLASH_HND: (2, 3, 0, 1, 4, 5)}[layout]
    physical = cache.storage.permute(*order)
    assert physical.shape == memory and physical.is_contiguous()
    layouts.write(cache, torch.ones(1, 2, 8), torch.ones(1, 2, 8), torch.tensor([6]))
    assert cache.storage[1].eq(1).sum() == 32 and cache.storage[[0, 2]].isnan().all()
    moved = cache.clone()
    assert torch.equal(moved.storage.nan_to_num(), cache.storage.nan_to_num())
    assert moved.tensors[0].data_ptr() != t.data_ptr() and moved.storage.permute(*order).is_contiguous()


@given(cases(PAGED, SMALL), st.randoms(use_true_random=False))
def test_permuting_physical_blocks_with_the_table_changes_nothing(case, rnd):
    inputs = r.materialize(case)
    n = inputs.cache.paged.num_blocks
    perm = list(range(1, n))
    rnd.shuffle(perm)
    new_of_old = torch.tensor([0] + perm)  # block 0 stays the null block
    old_of_new = torch.argsort(new_of_old)
    moved = inputs.cache.clone()
    for src, dst in ((inputs.cache.paged.key_view(), moved.paged.key_view()),
                     (inputs.cache.paged.value_view(), moved.paged.value_view())):
        dst.copy_(src[old_of_new])
    for name, scales in moved.scale_caches.items():  # scale caches are indexed by block too
        scales.copy_(getattr(inputs.cache, name)[old_of_new])
    shuffled = dataclasses.replace(inputs, cache=moved, block_table=new_of_old[inputs.block_table.long()].to(torch.int32))
    a, b = r.attention(inputs), r.attention(shuffled)
    assert torch.equal(a.output, b.output) and torch.equal(a.lse, b.lse)


@given(cases(PAGED, SMALL))
def test_nan_canaries_never_reach_the_output_of_a_valid_case(case):
    inputs = r.materialize(case)
    e = r.attention(inputs)
    assert not e.output.isnan().any() and not e.lse.isnan().any()


@given(cases(PAGED, SMALL))
def test_a_gather_off_by_one_block_reaches_the_canaries(case):
    assume(case.kv_cache_dtype != r.KVCacheDType.INT8_KV)  # int8 values have no NaN; their key scales do
    assume(not case.cache.finite_canaries)  # those are checked below
    inputs = r.materialize(case)
    longest = max(range(len(case.sequences)), key=lambda i: case.kv_lens[i])
    assume(case.kv_lens[longest] > 0)
    shifted_row = torch.cat([inputs.block_table[longest, 1:], torch.zeros(1, dtype=torch.int32)])
    k, v = read_kv(inputs.cache, shifted_row, case.kv_lens[longest])
    assert k.isnan().any() or v.isnan().any()


FP8_MANTISSA = {r.KVCacheDType.FP8_E4M3: (3, -6), r.KVCacheDType.FP8_E5M2: (2, -14)}


@given(st.sampled_from([r.KVCacheDType.FP8_E4M3, r.KVCacheDType.FP8_E5M2]),
       st.floats(-400.0, 400.0, allow_nan=False), st.sampled_from([0.25, 0.5, 1.0, 3.0]))
def test_fp8_round_trip_is_within_half_a_quantum(fmt, x, scale):
    mantissa, min_exp = FP8_MANTISSA[fmt]
    y = float(quant.dequantize(quant.quantize_fp8(torch.tensor([x]), scale, fmt), scale)[0])
    v = abs(x / scale)
    if v > quant.FP8_MAX[fmt]:
        assert abs(y) == quant.FP8_MAX[fmt] * scale  # saturates, never inf or NaN
        return
    exponent = max(math.floor(math.log2(v)) if v > 0 else min_exp, min_exp)
    quantum = 2.0 ** (exponent - mantissa)
    assert abs(y / scale - x / scale) <= quantum / 2 + 1e-12


@given(st.floats(-1e3, 1e3, allow_nan=False), st.floats(0.01, 10.0))
def test_int8_round_trip_is_within_half_a_quantum(x, scale):
    y = float(quant.dequantize(quant.quantize_int8(torch.tensor([x]), scale), scale)[0])
    if abs(x / scale) <= 127:
        assert abs(y - x) <= scale / 2 + 1e-9
    else:
        assert abs(y) in (127 * scale, 128 * scale)


TOKEN_HEAD = [r.KVCacheDType.INT8_PER_TOKEN_HEAD, r.KVCacheDType.FP8_PER_TOKEN_HEAD]
TOKEN_HEAD_CAPS = dataclasses.replace(PAGED, kv_cache_dtypes=frozenset(TOKEN_HEAD))


@given(cases(TOKEN_HEAD_CAPS, SMALL))
def test_per_token_head_cache_reads_back_each_tokens_own_quantization(case):
    """Second formulation: quantizing each sequence's keys directly (no pages, no slots) gives what the
    paged cache reads back."""
    fmt = case.kv_cache_dtype
    inputs = r.materialize(case)
    for i in range(len(case.sequences)):
        k, v = read_kv(inputs.cache, inputs.block_table[i], case.kv_lens[i])
        for got, x in ((k, inputs.keys[i]), (v, inputs.values[i])):
            scale = quant.per_token_head_scale(x, fmt)
            want = quant.dequantize(quant.quantize_per_token_head(x, scale, fmt), scale[..., None])
            assert torch.equal(got, want)


@given(st.sampled_from(TOKEN_HEAD), st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=16),
       st.integers(-20, 20))
def test_per_token_head_quantization_is_invariant_to_power_of_two_scaling(fmt, xs, shift):
    """Multiplying a (token, head) by 2^shift multiplies its scale by 2^shift and stores the same bytes
    (while the scale stays above the 1e-6 floor)."""
    x = torch.tensor(xs, dtype=torch.float32).reshape(1, 1, -1)
    y = x * 2.0 ** shift
    sx, sy = quant.per_token_head_scale(x, fmt), quant.per_token_head_scale(y, fmt)
    assume(float(sx) > 1e-6 * 2 ** max(0, -shift) and float(sy) > 1e-6 * 2 ** max(0, shift))
    assert torch.equal(sy, sx * 2.0 ** shift)
    assert torch.equal(_bits(quant.quantize_per_token_head(x, sx, fmt)), _bits(quant.quantize_per_token_head(y, sy, fmt)))


@given(st.sampled_from(TOKEN_HEAD), st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=16))
def test_per_token_head_round_trip_keeps_the_extreme_and_is_within_half_a_quantum(fmt, xs):
    x = torch.tensor(xs, dtype=torch.float32).reshape(1, 1, -1)
    scale = quant.per_token_head_scale(x, fmt)
    y = quant.dequantize(quant.quantize_per_token_head(x, scale, fmt), scale[..., None])[0, 0]
    top = quant.TOKEN_HEAD_MAX[fmt]
    amax = float(x.abs().max())
    if amax / top > quant.TOKEN_HEAD_MIN_SCALE:
        i = int(x.abs().argmax())
        assert abs(abs(float(y[i])) - amax) <= 1e-5 * amax  # the largest element maps to QMAX
    s = float(scale)
    for a, b in zip(x.flatten().tolist(), y.tolist()):
        v = abs(a) / s
        if fmt == r.KVCacheDType.INT8_PER_TOKEN_HEAD:
            quantum = s
        else:
            quantum = s * 2.0 ** (max(math.floor(math.log2(v)) if v > 0 else -6, -6) - 3)
        assert abs(a - b) <= quantum / 2 + 1e-6 * s


def test_per_token_head_int8_rounds_half_away_from_zero():
    """vLLM's writer adds +-0.5 before its truncating int8 store: 2.5 -> 3, -2.5 -> -3 (not 2, -2)."""
    x = torch.tensor([[[2.5, -2.5, 127.0]]])
    stored = quant.quantize_per_token_head(x, torch.tensor([[1.0]]), r.KVCacheDType.INT8_PER_TOKEN_HEAD)
    assert stored.flatten().tolist() == [3, -3, 127]


def test_fp8_saturates_where_torch_cpu_cast_would_overflow():
    big = torch.tensor([1e6])
    assert float(quant.quantize_fp8(big, 1.0, r.KVCacheDType.FP8_E5M2).float()) == 57344.0
    assert float(quant.quantize_fp8(big, 1.0, r.KVCacheDType.FP8_E4M3).float()) == 448.0


def test_v0_layout_splits_keys_by_sixteen_bytes():
    cache = layouts.allocate(r.KVLayout.PAGED_V0, num_blocks=3, block_size=4, num_kv_heads=2, head_size=16,
                             head_size_v=16, key_dtype=torch.bfloat16)
    assert cache.tensors[0].shape == (3, 2, 2, 4, 8) and cache.tensors[1].shape == (3, 2, 16, 4)


def test_slot_minus_one_is_skipped():
    cache = layouts.allocate(r.KVLayout.FLASH_NHD, 2, 2, 1, 2, 2, torch.float32)
    layouts.write(cache, torch.ones(2, 1, 2), torch.ones(2, 1, 2), torch.tensor([1, -1]))
    assert cache.key_view()[0, 1].eq(1).all() and cache.key_view()[1, 1].isnan().all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.int8])
def test_finite_canaries_are_loud_but_finite(dtype):
    cache = layouts.allocate(r.KVLayout.FLASH_NHD, 2, 4, 1, 8, 8, dtype, finite=True)
    values = cache.key_view().to(torch.float32)
    assert values.isfinite().all() and (values.abs() >= 30).all()


FP8_PER_TENSOR = dataclasses.replace(PAGED, kv_cache_dtypes=frozenset({r.KVCacheDType.FP8_E4M3, r.KVCacheDType.FP8_E5M2}),
                                     scale_granularities=frozenset({r.ScaleGranularity.PER_TENSOR}))


@given(cases(FP8_PER_TENSOR, SMALL), st.booleans())
def test_dynamic_scales_are_the_static_scales_of_amax_over_range(case, with_query):
    """calc_kv_scales' rule, a second way: every key's (value's, the query's) amax / its range, given as static
    scales, gives the same quantized inputs and the same attention."""
    with_query &= case.kv_cache_dtype == r.KVCacheDType.FP8_E4M3  # an fp8 query is e4m3
    dynamic = case.replace(cache=dataclasses.replace(case.cache, quant=dataclasses.replace(
        case.cache.quant, dynamic_scales=True, q_fp8_scale=1.0 if with_query else None)))
    inputs = r.materialize(dynamic)

    def over_range(x: torch.Tensor, rng: float) -> float:  # 1 where there is nothing (or only zeros) to scale
        return float(x.abs().max().float() / torch.tensor(rng)) or 1.0 if x.numel() else 1.0

    k, v = over_range(torch.cat(inputs.keys), 200.0), over_range(torch.cat(inputs.values), 100.0)
    if case.cache.layout == r.KVLayout.MLA_LATENT:  # one latent tensor, one scale
        v = k
    q = over_range(inputs.query, 200.0) if with_query else None
    static = case.replace(cache=dataclasses.replace(case.cache, quant=dataclasses.replace(
        case.cache.quant, dynamic_scales=False, k_scales=(k,), v_scales=(v,), q_fp8_scale=q)))
    twin = r.materialize(static)
    assert float(inputs.cache.k_scale[0]) == k and float(inputs.cache.v_scale[0]) == v
    if with_query:
        assert torch.equal(inputs.query_fp8.view(torch.uint8), twin.query_fp8.view(torch.uint8))
    a, b = r.attention(inputs), r.attention(twin)
    assert torch.equal(a.output, b.output) and torch.equal(a.lse, b.lse)
