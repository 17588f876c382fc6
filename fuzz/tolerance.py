"""The tolerance rule: a backend may be at most `factor` times as far from float64 as the baseline.

    limit = factor * max|baseline - expected| + floor
    floor = max(2 * max|(expected + 0.3 - 0.3) - expected| in the output dtype, abs_floor)
            + 2 * eps_fp32 * max(|LSE|, spread) * max|expected|  (logit rounding, see logit_rounding_floor)
            + 2 * e * min(cap, |LSE| + ln keys) * max|expected|  (a soft-cap's approximate tanh, see soft_cap_shift)

`baseline` is the oracle recomputed in the case's dtype over the same (quantized) cache, with the
scale applied to the keys instead of the queries (flash-attn's `upcast=False, reorder_ops=True`):
an honest estimate of the error any correct low-precision kernel makes. The floor is never 0, so a
baseline that happens to be exact (one key, say) does not demand an exact kernel (flash-attn #1231).
A mean check rides beside the max check: mean|actual - expected| <= mean_factor * mean|baseline -
expected| + floor / 4, catching a broad shift that stays under the max limit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from reference.case import Case, DType, KVCacheDType
from reference.quant import FP8_DTYPES
from reference.softmax import ProbabilityRounding, all_finite
from reference.widening import widen


@dataclass(frozen=True)
class ToleranceRule:
    factor: float
    mean_factor: float
    abs_floor: float
    lse_factor: float
    lse_floor: float
    why: str


# One table, calibrated on correct backends (README "The tolerance rule and verdicts").
RULES: dict[DType, ToleranceRule] = {
    DType.FLOAT32: ToleranceRule(4.0, 3.0, 1e-6, 4.0, 1e-5,
                                 "fp32 kernels reorder sums (online softmax, split-K): a few ulps above a plain fp32 pass"),
    DType.FLOAT16: ToleranceRule(2.0, 1.5, 2e-4, 2.0, 1e-3,
                                 "fp16 kernels accumulate in fp32: no worse than twice a plain fp16 pass"),
    DType.BFLOAT16: ToleranceRule(2.0, 1.5, 2e-3, 2.0, 1e-2,
                                  "bf16 keeps 8 mantissa bits; fp32 accumulation: twice a plain bf16 pass"),
}
# Quantized caches: the baseline already reads the same quantized values; kernels differ from it in
# where they dequantize and round P (fp8 kernels may round P to fp8), so allow more.
QUANT_FACTOR = {KVCacheDType.FP8_E4M3: 4.0, KVCacheDType.FP8_E5M2: 4.0, KVCacheDType.INT8_KV: 4.0,
                KVCacheDType.INT8_K_FP16_V: 4.0, KVCacheDType.INT8_PER_TOKEN_HEAD: 4.0,
                KVCacheDType.FP8_PER_TOKEN_HEAD: 4.0, KVCacheDType.INT4_PER_TOKEN_HEAD: 4.0}


def baseline_dtype(dtype: DType, kv_cache_dtype: KVCacheDType = KVCacheDType.AUTO) -> torch.dtype:
    """The dtype of the baseline pass: the case's, except over an int4 cache, whose kernels rotate the
    queries and the output through bfloat16 (vLLM's Hadamard kernel: "fp32 -> bf16 round-trip"; measured on
    an H100: float16 cases 2-8x a float16 baseline's limit, no worse than a bfloat16 one), so a plain
    bfloat16 pass is the honest yardstick there."""
    if kv_cache_dtype == KVCacheDType.INT4_PER_TOKEN_HEAD and dtype != DType.BFLOAT16:
        return torch.bfloat16
    return dtype.torch


def probability_rounding(case: Case, fp8_probabilities: float | None) -> ProbabilityRounding | None:
    """How the baseline holds its probabilities for `case` under a backend's declared fp8 P.V
    (Capabilities.fp8_probabilities): rounded to the cache's fp8 dtype where the case reads an fp8 query over an fp8
    per-tensor cache (the kernel's P.V operands are then both fp8), else not at all. Without it 3 of 1,085 such
    generated rows of vLLM's FLASHINFER layer (16 cases with their shrinks) and 41 of 152 of its TRITON_ATTN layer
    failed at 1.0-3.4x a limit the P rounding alone exceeds (results/tolerance/fp8-probabilities-2026-11-26.md)."""
    quant = case.cache.quant if case.cache is not None else None
    if fp8_probabilities is None or quant is None or quant.q_fp8_scale is None or not quant.kv_cache_dtype.is_fp8:
        return None
    return ProbabilityRounding(FP8_DTYPES[quant.kv_cache_dtype], fp8_probabilities)


def rule_for(dtype: DType, kv_cache_dtype: KVCacheDType = KVCacheDType.AUTO) -> ToleranceRule:
    rule = RULES[dtype]
    factor = QUANT_FACTOR.get(kv_cache_dtype)
    if factor is None:
        return rule
    return ToleranceRule(max(rule.factor, factor), max(rule.mean_factor, factor), rule.abs_floor,
                         rule.lse_factor, rule.lse_floor, rule.why + "; quantized cache: factor 4")


def rounding_error(expected: Tensor, dtype: torch.dtype) -> Tensor:
    """The error of doing any arithmetic on `expected` in `dtype` (flash-attn's 0.3 trick), 0-dim, where it lives."""
    e = expected.to(dtype)
    return widen(e + 0.3 - 0.3).sub_(expected).abs_().amax()  # (in place: each pass is as long as the output)


def rounding_floor(expected: Tensor, dtype: torch.dtype) -> float:
    """2 * rounding_error()."""
    return 2.0 * float(rounding_error(expected, dtype)) if expected.numel() else 0.0


@dataclass(frozen=True)
class Limits:
    max_limit: float
    mean_limit: float
    floor: float
    baseline_max: float = 0.0  # max / mean |baseline - expected| over the finite elements
    baseline_mean: float = 0.0


FP32_EPS = 2.0**-23


def logit_rounding_floor(expected: Tensor, lse: Tensor, spread: float = 0.0) -> float:
    """What two correct fp32 softmaxes may disagree by when logits are large or sum large terms.

    Kernels fold scale * log2(e) into the logits and use exp2, or subtract a running max at another
    point: each rounds a logit of size |s| with error eps * |s|; and each sums q.k's terms in its own order,
    rounding by about eps * `spread` (`reference.scores.logit_spread`: the terms' size, which exceeds |s| where
    they cancel). A logit's error moves its probability by that relative amount, so a plain pass (the baseline)
    and a kernel differ by up to about 2 * eps_fp32 * max(|s|, spread) * max|out|; max|s| <= max LSE. Logits
    live in fp32 in every kernel, so the fp32 eps applies to all dtypes (negligible beside the fp16 / bf16
    floors). Without the spread, one float32 case (terms of size 250 cancelling to a logit of 0.5, under a
    soft-cap) failed a correct kernel at 1.04x the limit when the baseline's own sum happened to round 6x less
    (benchmarks/results/oracle/packed-equivalence-harness-batched-cpu-2026-11-25.md).
    """
    finite = lse if all_finite(lse) else lse[torch.isfinite(lse)]
    if expected.numel() == 0 or finite.numel() == 0:
        return 0.0
    return logit_floor(float(expected.abs().max()), float(finite.abs().max()), spread)


def logit_floor(expected_max: float, lse_max: float, spread: float) -> float:
    """logit_rounding_floor() from max|expected|, max|finite LSE| and the spread."""
    return 2.0 * FP32_EPS * max(1.0, lse_max, spread) * expected_max


def finite_abs_max(t: Tensor) -> float:
    """max |t| over its finite elements (0 when there is none): an LSE's, whose rows without keys are -inf."""
    finite = t if all_finite(t) else t[torch.isfinite(t)]
    return float(finite.abs().max()) if finite.numel() else 0.0


def soft_cap_floor(shift: float, expected_max: float) -> float:
    """The output floor's term for an approximate soft-cap's logit shift (soft_cap_shift), in logit_floor's form."""
    return 2.0 * shift * expected_max


def soft_cap_shift(case: Case, tanh_error: float, lse_max: float) -> float:
    """How far a kernel whose soft-cap tanh is off by a relative `tanh_error` (Capabilities.soft_cap_tanh_error) may
    move a row's logits on average under its softmax, sum_j p_j |delta c_j|, beyond a plain pass: each capped logit
    c = cap * tanh(s / cap) moves by up to tanh_error * |c|. sum_j p_j |c_j| is at most the cap and, with no bias beside
    the cap, at most max|LSE| + ln(keys): |c_j| <= |LSE| + (LSE - c_j), and sum_j p_j (LSE - c_j) is the softmax's
    entropy. The LSE moves by up to this shift; the output, as a logit's error moves its probability by that relative
    amount, by up to 2 x shift x max|out| (the form of logit_floor). FA3 under vLLM's layer was 1.17x the limit without
    it on a float16 case over 16,383 keys at cap 50, where a relative noise of 2^-11 on the capped logits alone moves
    the oracle by 0.014-0.035 against its 0.030 (results/tolerance/soft-cap-tanh-2026-11-26.md). 0 without a cap or
    a declared error."""
    if case.soft_cap is None or not tanh_error:
        return 0.0
    mass = case.soft_cap
    if case.alibi is None and not case.qq_bias:
        mass = min(mass, max(1.0, lse_max) + math.log(max(case.max_kv_len, 1)))
    return tanh_error * mass


def limits(rule: ToleranceRule, expected: Tensor, baseline: Tensor, dtype: torch.dtype,
           lse: Tensor | None = None, spread: float = 0.0, shift: float = 0.0) -> Limits:
    """The max and mean error limits for one comparison (`spread`: the oracle's Expected.logit_spread; `shift`: an
    approximate soft-cap's, soft_cap_shift)."""
    if not (all_finite(expected) and all_finite(baseline)):  # (a copy only where something is not finite)
        finite = torch.isfinite(expected) & torch.isfinite(baseline)
        expected, baseline = expected[finite], baseline[finite]
    diff = (baseline - expected).abs()
    base_max = float(diff.max()) if diff.numel() else 0.0
    base_mean = float(diff.mean()) if diff.numel() else 0.0
    logit = logit_rounding_floor(expected, lse, spread) if lse is not None else 0.0
    if shift and expected.numel():
        logit += soft_cap_floor(shift, float(expected.abs().max()))
    return limits_from(rule, base_max, base_mean, rounding_floor(expected, dtype), logit)


def limits_from(rule: ToleranceRule, base_max: float, base_mean: float, rounding: float, logit: float) -> Limits:
    """The limits from the baseline's max / mean error and the floor's two terms, the output dtype's rounding
    (rounding_floor) and the logits' (logit_rounding_floor): limits() measures them, and so does the judge's device
    summary (fuzz.summary)."""
    floor = max(rounding, rule.abs_floor) + logit
    return Limits(rule.factor * base_max + floor, rule.mean_factor * base_mean + floor / 4, floor, base_max, base_mean)
