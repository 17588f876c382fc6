"""Quantize and dequantize KV-cache values: fp8 (e4m3, e5m2), the int8 fork's modes and vLLM's
dynamic per-(token, head) int8 / fp8 modes.

Scales are dequantization multipliers: stored = quantize(value / scale), value ~= stored * scale.

Rounding and saturation (the oracle follows vLLM's CUDA kernels, not torch's CPU cast):
- fp8: round to nearest even, *saturating* to the largest finite value (CUDA's __NV_SATFINITE in
  vLLM's scaled_fp8_conversion). torch's plain `.to(float8_e5m2)` overflows to inf instead and
  e4m3fn has no inf, so we clamp before casting.
- int8: round half to even (vLLM's float_to_int8_rn uses nearbyint), saturating to [-128, 127].
- per-token-head int8 (vLLM 0.26's Triton writer): round half *away from zero*, saturating.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .case import KVCacheDType
from .widening import widen

FP8_DTYPES = {KVCacheDType.FP8_E4M3: torch.float8_e4m3fn, KVCacheDType.FP8_E5M2: torch.float8_e5m2}
FP8_MAX = {KVCacheDType.FP8_E4M3: 448.0, KVCacheDType.FP8_E5M2: 57344.0}
INT8_MAX = 127.0

# vLLM's defaults for calc_kv_scales (envs Q_SCALE_CONSTANT, K_SCALE_CONSTANT, V_SCALE_CONSTANT).
Q_RANGE, K_RANGE, V_RANGE = 200.0, 200.0, 100.0


def quantize_fp8(x: Tensor, scale: Tensor | float, fmt: KVCacheDType) -> Tensor:
    """fp8 tensor of x / scale, saturated to the format's finite range."""
    limit = FP8_MAX[fmt]
    return (x.to(torch.float32) / scale).clamp(-limit, limit).to(FP8_DTYPES[fmt])


def quantize_int8(x: Tensor, scale: Tensor | float) -> Tensor:
    """int8 tensor of round_half_even(x / scale), saturated to [-128, 127]."""
    return torch.round(x.to(torch.float32) / scale).clamp(-128, 127).to(torch.int8)


def dequantize(stored: Tensor, scale: Tensor | float, dtype: torch.dtype = torch.float64) -> Tensor:
    """stored * scale, computed in `dtype`."""
    scale = scale.to(dtype) if isinstance(scale, Tensor) else scale
    return widen(stored, dtype) * scale


def per_token_head_int8_scale(x: Tensor) -> Tensor:
    """Dynamic int8 scale [..., heads] = amax over the last dim / 127 (0 rows get scale 1)."""
    amax = x.abs().to(torch.float32).amax(dim=-1)
    return torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))


TOKEN_HEAD_MAX = {KVCacheDType.INT8_PER_TOKEN_HEAD: INT8_MAX, KVCacheDType.FP8_PER_TOKEN_HEAD: 448.0}
TOKEN_HEAD_MIN_SCALE = 1e-6  # the writer's floor: an all-zero (token, head) keeps a tiny, finite scale


def per_token_head_scale(x: Tensor, fmt: KVCacheDType) -> Tensor:
    """Dynamic scale [..., heads] = max(amax over the last dim / QMAX, 1e-6), float32."""
    amax = x.abs().to(torch.float32).amax(dim=-1)
    # tensor / tensor: correctly rounded on every device (CUDA divides by a Python scalar via its reciprocal)
    return torch.clamp(amax / torch.full_like(amax, TOKEN_HEAD_MAX[fmt]), min=TOKEN_HEAD_MIN_SCALE)


def round_half_away(x: Tensor) -> Tensor:
    """Round to the nearest integer, ties away from zero (vLLM's Triton writers: +-0.5, then truncate)."""
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def quantize_per_token_head(x: Tensor, scale: Tensor, fmt: KVCacheDType) -> Tensor:
    """x / scale[..., None] stored as int8 (round half away from zero) or fp8 e4m3 (nearest even),
    saturated to the format's range."""
    y = x.to(torch.float32) / scale[..., None]
    if fmt == KVCacheDType.INT8_PER_TOKEN_HEAD:
        return round_half_away(y).clamp(-128, 127).to(torch.int8)
    return y.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def per_channel_int8_scale(x: Tensor) -> Tensor:
    """Static int8 value scale [heads, dim] = amax over tokens / 127 (the fork loads it from file)."""
    if x.shape[0] == 0:
        return torch.ones(x.shape[1:], dtype=torch.float32)
    amax = x.abs().to(torch.float32).amax(dim=0)
    return torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))


def dynamic_scale(x: Tensor, value_range: float) -> float:
    """calc_kv_scales' rule: amax(|x|) / range (one scalar for the whole tensor), divided in float32 as the layer
    divides its float32 range tensor: the scale is a model parameter, the quantization it drives is exact."""
    amax = x.abs().max().to(torch.float32) if x.numel() else torch.zeros((), dtype=torch.float32)
    return float(amax / torch.tensor(value_range, dtype=torch.float32)) if amax > 0 else 1.0
