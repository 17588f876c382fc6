"""The cache a kernel wrote, and the fp8 query a library quantized itself, judged against the oracle's: byte for
byte, or element by element where the scale is computed (per-token-head formats, calc_kv_scales' dynamic per-tensor
scales), where a code may differ only at a rounding tie of the exact quotient."""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from reference.case import KVCacheDType
from reference.inputs import Inputs, slots_for
from reference.quant import FP8_DTYPES

from .verdicts import Symptom, Verdict


RawValues = Callable[[], "tuple[Tensor, Tensor] | None"]  # the unquantized keys and values by slot, built on demand


def judge_writes(inputs: Inputs, actual) -> list[Symptom]:
    """Every quantized tensor the kernel's library wrote and handed back: its cache (`Actual.written_cache`) and its
    own fp8 query (`Actual.query_fp8`)."""
    out = []
    if actual.written_cache is not None and inputs.cache is not None:
        out += judge_cache_write(inputs.cache, actual.written_cache, lambda: raw_by_slot(inputs))
    if actual.query_fp8 is not None and inputs.query_fp8 is not None:
        out += judge_query_quant(inputs, actual.query_fp8)
    return out


def judge_cache_write(expected_cache, written, raw: RawValues | None = None) -> list[Symptom]:
    """The kernel's cache writer against the oracle's `write_kv`: every byte of the pool (canaries in
    untouched slots included) and the scale caches must be equal (per-token-head caches: see
    `judge_int4_write` and `judge_token_head_write`, which may call `raw` for `raw_by_slot`). An fp8 per-tensor
    cache whose bytes differ is judged element by element at ties where `raw` has values (dynamic scales:
    `judge_fp8_tensor_write`)."""
    if expected_cache.kv_cache_dtype == KVCacheDType.INT4_PER_TOKEN_HEAD:
        return judge_int4_write(expected_cache, written)
    if expected_cache.kv_cache_dtype in TOKEN_HEAD_STEP:
        return judge_token_head_write(expected_cache, written, raw)
    out = []
    pairs = list(zip(expected_cache.paged.tensors, written.paged.tensors))
    written_scales = written.scale_caches
    pairs += [(want, written_scales[name]) for name, want in expected_cache.scale_caches.items() if name in written_scales]
    differ, first = 0, None
    for want, got in pairs:
        w = want.detach().cpu().contiguous().view(torch.uint8)
        g = got.detach().cpu().contiguous().view(torch.uint8)
        if w.shape != g.shape:
            return [Symptom(Verdict.CONTRACT, "cache-write", f"written cache shape {tuple(got.shape)}, expected {tuple(want.shape)}")]
        bad = w != g
        if bool(bad.any()):
            differ += int(bad.sum())
            if first is None:
                first = tuple(int(x) for x in bad.nonzero()[0])
    out += per_tensor_scale_symptoms(expected_cache, written)
    unquantized = functools.cache(raw or (lambda: None))
    if differ and expected_cache.kv_cache_dtype in FP8_DTYPES and unquantized() is not None:
        return out + judge_fp8_tensor_write(expected_cache, written, unquantized())
    if differ:
        out.append(Symptom(Verdict.CONTRACT, "cache-write",
                           f"the written cache differs from the oracle's in {differ} bytes (first at index {first})"))
    return out


TIE_QUANTA = 1.5  # a code flip (1) or a zero point flip pushing the extreme code into the clamp (1.5)


def judge_int4_write(expected_cache, written) -> list[Symptom]:
    """int4 writers rotate in finite precision (vLLM's in fp32, or bf16 through its Hadamard kernel), so a
    code may flip where the exact rotation sits on a rounding tie, and a zero point on a tie moves the
    extreme element's code into the clamp: each dequantized element in the rotated domain,
    (n - zero point) * scale, must be within 1.5 quanta of the oracle's; untouched slots (NaN or finite
    canary scales) must stay untouched. A wrong sign vector, nibble order, zero point or scale moves
    elements by many quanta."""
    from reference import int4

    def quanta_off(want_codes, got_codes, want_stored, got_stored, which):
        w, g = int4.dequantize(want_codes, want_stored), int4.dequantize(got_codes, got_stored)
        quantum = torch.maximum(int4.split_scale(want_stored)[0], int4.split_scale(got_stored)[0]).double()
        quanta = (w - g).abs() / quantum[..., None]
        touched = ~torch.isnan(w) | ~torch.isnan(g)
        return touched & ~(quanta <= TIE_QUANTA), quanta  # NaN on one side only is bad too

    return _judge_elements(expected_cache, written, quanta_off,
                           lambda n, first, worst: f"the written int4 cache decodes more than {TIE_QUANTA} quanta from "
                                                   f"the oracle's at {n} elements (first at {first}, worst {worst:.3g} quanta)")


def _judge_elements(expected_cache, written, compare, describe, scales=("k_token_scales", "v_token_scales")) -> list[Symptom]:
    """A cache write judged element by element: `compare(want codes, got codes, want scales, got scales, 0 for the
    keys or 1 for the values) -> (bad mask, distance)` over both with the scales named in `scales` (per-token-head
    scale caches, or the per-tensor `k_scale` / `v_scale`); one cache-write symptom worded by
    `describe(bad elements, first bad index, worst distance)`."""
    bad_total, first, worst = 0, None, 0.0
    pairs = ((expected_cache.paged.key_view(), written.paged.key_view(), scales[0]),
             (expected_cache.paged.value_view(), written.paged.value_view(), scales[1]))
    for which, (want_codes, got_codes, name) in enumerate(pairs):
        want_scales = getattr(expected_cache, name).detach().cpu()
        got_scales = getattr(written, name).detach().cpu()
        if want_codes.shape != got_codes.shape or want_scales.shape != got_scales.shape:
            return [Symptom(Verdict.CONTRACT, "cache-write", f"written cache shape {tuple(got_codes.shape)}, "
                                                             f"expected {tuple(want_codes.shape)}")]
        bad, distance = compare(want_codes.detach().cpu(), got_codes.detach().cpu(), want_scales, got_scales, which)
        if bool(bad.any()):
            bad_total += int(bad.sum())
            worst = max(worst, float(distance[bad].nan_to_num(float("inf")).max()))
            first = first or tuple(int(x) for x in bad.nonzero()[0])
    return [Symptom(Verdict.CONTRACT, "cache-write", describe(bad_total, first, worst))] if bad_total else []


# One fp8 code step at code c (in code units), subnormal steps at the bottom: e4m3 2^(floor(log2|c|) - 3), e5m2
# 2^(floor(log2|c|) - 2).
FP8_STEP = {
    KVCacheDType.FP8_E4M3: lambda c: torch.ldexp(torch.ones_like(c), torch.frexp(c)[1] - 4).clamp(min=2.0 ** -9),
    KVCacheDType.FP8_E5M2: lambda c: torch.ldexp(torch.ones_like(c), torch.frexp(c)[1] - 3).clamp(min=2.0 ** -16),
}


# One code step of a per-token-head format at code c (in code units): int8 1; fp8 as e4m3.
TOKEN_HEAD_STEP = {
    KVCacheDType.INT8_PER_TOKEN_HEAD: lambda c: torch.ones_like(c),
    KVCacheDType.FP8_PER_TOKEN_HEAD: FP8_STEP[KVCacheDType.FP8_E4M3],
}
SCALE_RTOL = 2.0 ** -20  # a float32 scale computed another way (a reciprocal, fused multiply): a few ulps
# A code that differs from the oracle's is a tie flipped by those ulps only where the exact quotient x / scale sits
# that close to the midpoint between the two codes. On an H100 3 of 2,297 fp8 writes had 3-6 such flips in 256-768
# codes (bf16 inputs land on fp8 midpoints often), which a 1 % share bound had failed
# (benchmarks/results/campaigns/vllm-flashinfer-10k-h100-2026-11-24.md).
TIE_RTOL = 2.0 ** -19


def judge_token_head_write(expected_cache, written, raw: RawValues | None = None) -> list[Symptom]:
    """fp8 / int8 per-token-head writers compute scale = amax / QMAX in float32 their own way (vLLM's is a few
    ulps off the correctly rounded quotient: 3,886 of 4,317 fp8 writes failed a byte-for-byte check on an H100,
    campaigns/flashinfer-fa3-cascade-h100-2026-11-24.md), so a code may flip where x / scale sits on a rounding tie.
    Where bytes differ, each scale
    must be within SCALE_RTOL of the oracle's and each dequantized element, code * scale, within one code step;
    a different code must sit on a tie: the exact quotient of its unquantized value (`raw()`, called once and only
    when a code differs: `raw_by_slot`; no `raw`: no code may differ) within TIE_RTOL of the midpoint between the
    two codes. Slots the oracle left untouched (canaries, NaN scales) must stay byte-identical. A wrong scale rule
    or slot moves elements by many steps, a wrong rounding rule (truncation) moves codes whose quotient is nowhere
    near a tie."""
    step_of = TOKEN_HEAD_STEP[expected_cache.kv_cache_dtype]
    unquantized = functools.cache(raw or (lambda: None))  # a long context's float64 copy is built only when needed

    def steps_off(want_codes, got_codes, want_scale, got_scale, which):
        # [..., D] per scale (the V0 key view splits D in two)
        want_codes, got_codes = (c.reshape(*want_scale.shape, -1) for c in (want_codes, got_codes))
        want_scale, got_scale = want_scale.double(), got_scale.double()
        wc, gc = want_codes.double(), got_codes.double()
        steps = torch.maximum(step_of(wc), step_of(gc)) * torch.maximum(want_scale, got_scale)[..., None]
        off = (wc * want_scale[..., None] - gc * got_scale[..., None]).abs() / steps
        scale_ok = (want_scale - got_scale).abs() <= SCALE_RTOL * want_scale.abs()
        same = want_codes.view(torch.uint8) == got_codes.view(torch.uint8)
        same &= (want_scale == got_scale)[..., None] | (want_scale.isnan() & got_scale.isnan())[..., None]
        bad = ~same & ~((off <= 1.0 + 1e-9) & scale_ok[..., None])  # NaN in a changed element is bad
        moved = ~same & (wc != gc)  # another code (the rest: the scale's last bits, or the sign of a zero)
        if bool(moved.any()):
            tie = torch.zeros_like(moved)
            if unquantized() is not None:
                quotient = unquantized()[which].reshape(want_codes.shape) / want_scale[..., None]
                midpoint = (wc + gc) / 2
                tie = (quotient - midpoint).abs() <= TIE_RTOL * midpoint.abs()  # NaN (no raw value): not a tie
            bad |= moved & ~tie
        return bad, off

    return _judge_elements(expected_cache, written, steps_off,
                           lambda n, first, worst: f"the written cache differs from the oracle's at {n} elements by "
                                                   f"more than a rounding tie (a scale more than {SCALE_RTOL:.2g} "
                                                   f"relative, or a code whose exact quotient is not within "
                                                   f"{TIE_RTOL:.2g} of the midpoint; first at {first}, worst {worst:.3g} "
                                                   f"steps)")


def tie_flips(want: Tensor, got: Tensor, quotient: Tensor, fmt: KVCacheDType) -> tuple[Tensor, Tensor]:
    """Per element of two fp8 code tensors: (bad, steps apart). A code may differ from the oracle's only by one step
    and only where the exact quotient x / scale sits within TIE_RTOL of the midpoint between the two codes: a scale
    computed in float32 (amax / range) is no power of two, and its last bit (vLLM's layer divides by a scalar range
    tensor, which CUDA does through the reciprocal: one ulp below the oracle's in tools/probe-layer-scales.py) or a
    writer that divides approximately decides a tie. calc_kv_scales puts each tensor's largest element on a tie by
    construction: amax / (amax / 200) is 200, the midpoint of e4m3's 192 and 208 (100: 96 and 104)."""
    same = want.view(torch.uint8) == got.view(torch.uint8)
    wc, gc = want.double(), got.double()
    off = (wc - gc).abs() / torch.maximum(FP8_STEP[fmt](wc), FP8_STEP[fmt](gc))
    midpoint = (wc + gc) / 2
    tie = (quotient - midpoint).abs() <= TIE_RTOL * midpoint.abs()  # NaN (an untouched slot, a canary): no tie
    return ~same & ~((off <= 1.0 + 1e-9) & tie), off


def per_tensor_scale_symptoms(expected_cache, written) -> list[Symptom]:
    """The per-tensor (or per-kv-head) scales a library computed itself (calc_kv_scales: amax / range in float32)
    against the oracle's: within SCALE_RTOL (a written cache that keeps the oracle's scales passes)."""
    out = []
    for name in ("k_scale", "v_scale"):
        want, got = getattr(expected_cache, name), getattr(written, name)
        if want is None or got is None:
            continue
        want, got = want.detach().cpu().double().flatten(), got.detach().cpu().double().flatten()
        if want.shape != got.shape or not bool(((want - got).abs() <= SCALE_RTOL * want.abs()).all()):
            out.append(Symptom(Verdict.CONTRACT, "cache-write", f"the cache's {name} is {got.tolist()}, the oracle's "
                                                               f"{want.tolist()} (more than {SCALE_RTOL:.2g} apart)"))
    return out


def judge_fp8_tensor_write(expected_cache, written, unquantized: tuple[Tensor, Tensor]) -> list[Symptom]:
    """An fp8 per-tensor (or per-kv-head) cache whose scales were computed (calc_kv_scales): element by element,
    each differing code a tie flip (`tie_flips`); untouched slots byte-identical. Measured on the H200: 76 of 157
    one-key rows of vllm-layer-triton's dynamic scales were one code step at the largest |v| or |k|
    (vllm/mla-layers-flashinfer-h200-2026-11-26.md)."""
    fmt = expected_cache.kv_cache_dtype

    def flips(want_codes, got_codes, want_scale, got_scale, which):
        per_head = want_scale.double().reshape(1, 1, -1, *[1] * (want_codes.dim() - 3))
        return tie_flips(want_codes, got_codes, unquantized[which].reshape(want_codes.shape) / per_head, fmt)

    return _judge_elements(expected_cache, written, flips,
                           lambda n, first, worst: f"the written cache differs from the oracle's at {n} elements by "
                                                   f"more than a rounding tie (a code whose exact quotient is not within "
                                                   f"{TIE_RTOL:.2g} of the midpoint; first at {first}, worst {worst:.3g} "
                                                   f"steps)", scales=("k_scale", "v_scale"))


def judge_query_quant(inputs: Inputs, query_fp8: Tensor) -> list[Symptom]:
    """The fp8 query a library quantized itself (vLLM's Attention layer, QuantFP8 with its q scale) against the
    oracle's `query_fp8`: equal, or one code step at a tie of query / q_scale (`tie_flips`)."""
    want = inputs.query_fp8.cpu()
    got = query_fp8.detach().cpu().reshape(want.shape) if query_fp8.numel() == want.numel() else None
    if got is None or got.dtype != want.dtype:
        shape = tuple(query_fp8.shape)
        return [Symptom(Verdict.CONTRACT, "query-quant", f"quantized query {shape} {query_fp8.dtype}, expected "
                                                         f"{tuple(want.shape)} {want.dtype}")]
    quotient = inputs.query.detach().cpu().double() / inputs.q_scale.cpu().double()
    bad, off = tie_flips(want, got, quotient, KVCacheDType.FP8_E4M3)
    if not bool(bad.any()):
        return []
    first = tuple(int(x) for x in bad.nonzero()[0])
    return [Symptom(Verdict.CONTRACT, "query-quant", f"the library's fp8 query differs from query / q_scale rounded "
                                                     f"at {int(bad.sum())} elements by more than a rounding tie (first "
                                                     f"at {first}, worst {float(off[bad].nan_to_num(float('inf')).max()):.3g} steps)")]


def scales_computed(case) -> bool:
    """Whether the case's cache writer computes its own scales (per-token-head formats; fp8 with calc_kv_scales'
    dynamic scales): its codes may then differ from the oracle's at ties, and the attention is judged over them."""
    kvd = case.kv_cache_dtype
    return kvd.is_per_token_head or (kvd.is_fp8 and case.cache is not None and case.cache.quant.dynamic_scales)


def raw_by_slot(inputs: Inputs) -> tuple[Tensor, Tensor] | None:
    """Every cached token's key and value before quantization (float64) at its cache slot, [nb, bs, H_kv, D]
    (NaN where no token is cached): what a writer that computes its scales divides by them (per-token-head
    formats, fp8 with calc_kv_scales' dynamic scales). None for other caches, whose writes are judged byte for byte."""
    cache, case = inputs.cache, inputs.case
    if cache is None or inputs.block_table is None or not scales_computed(case):
        return None
    nb, bs = cache.paged.num_blocks, cache.paged.block_size
    k = torch.full((nb, bs, case.num_kv_heads, case.head_size), float("nan"), dtype=torch.float64)
    v = torch.full((nb, bs, case.num_kv_heads, case.value_size), float("nan"), dtype=torch.float64)
    table = inputs.block_table.cpu()
    for i, (keys, values) in enumerate(zip(inputs.keys, inputs.values)):
        slots = slots_for(table[i], torch.arange(keys.shape[0]), bs)
        k[slots // bs, slots % bs] = keys.detach().cpu().double()
        v[slots // bs, slots % bs] = values.detach().cpu().double()
    return k, v
