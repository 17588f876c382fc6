"""vLLM 0.26's int4 per-(token, head) cache as a kernel writes and reads it: float32, written apart from
reference/int4.py (the oracle's float64 matrix form), so that one mistake cannot hide in both.

Write: r = fwht(signs * x) cast to x's dtype; scale = max((max r - min r) / 15, 1e-6); zero point and
codes rounded half away from zero and clamped to [0, 15]; codes packed low nibble first; the zero point
replaces the fp32 scale's low 4 bits. Read: ((codes - zero point) * masked scale), rotated back.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._convert import round_half_away

_SEED = 0x9E3779B9  # vLLM's _get_rht_signs(d, round_idx=0)


def _signs(d: int, device) -> Tensor:
    gen = torch.Generator().manual_seed(_SEED)
    return (torch.bernoulli(torch.full((d,), 0.5), generator=gen) * 2 - 1).to(device)


def fwht(x: Tensor) -> Tensor:
    """Unnormalized fast Walsh-Hadamard transform of the last dimension (a power of two), in place of H x."""
    d, span = x.shape[-1], 1
    while span < d:
        pairs = x.reshape(*x.shape[:-1], d // (2 * span), 2, span)
        lo, hi = pairs.unbind(-2)
        x = torch.stack((lo + hi, lo - hi), dim=-2).reshape(x.shape)
        span *= 2
    return x


def store(x: Tensor) -> tuple[Tensor, Tensor]:
    """(packed uint8 [..., D / 2], fp32 scales carrying the zero points [...]) of x [..., D]."""
    r = fwht(x.float() * _signs(x.shape[-1], x.device)).to(x.dtype).float()
    lo, hi = r.amin(-1), r.amax(-1)
    scale = ((hi - lo) / torch.full_like(hi, 15.0)).clamp(min=1e-6)
    zero = round_half_away(-lo / scale).clamp(0, 15)
    codes = round_half_away(r * (1.0 / scale)[..., None] + zero[..., None]).clamp(0, 15).to(torch.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    carried = (scale.view(torch.int32) & -16) | zero.to(torch.int32)
    return packed, carried.view(torch.float32)


def load(packed: Tensor, carried: Tensor, descale: bool = True) -> Tensor:
    """float32 vectors [..., D] back from the packed codes and the scales carrying zero points."""
    bits = carried.float().contiguous().view(torch.int32)
    zero, scale = (bits & 15).float(), (bits & -16).view(torch.float32)
    codes = torch.stack((packed & 15, packed >> 4), dim=-1).flatten(-2).float()
    r = (codes - zero[..., None]) * (scale[..., None] if descale else 1.0)
    d = r.shape[-1]
    return fwht(r) * _signs(d, r.device) / d
