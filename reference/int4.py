"""vLLM 0.26's int4 per-(token, head) KV cache (`kv_cache_dtype="int4_per_token_head"`).

Each (token, head) vector x of D values (D a power of two) is stored as follows:

1. rotated by the randomized Hadamard transform  r = H (s * x), where H is the unnormalized
   Sylvester-Hadamard matrix (H H = D I) and s a fixed vector of +-1 signs; the rotated vector
   is rounded to the model dtype (vLLM rotates in fp32, then casts back);
2. quantized asymmetrically in fp32: scale = max((max r - min r) / 15, 1e-6),
   zero point z = clamp(round(-min r / scale), 0, 15), code n = clamp(round(r / scale + z), 0, 15),
   rounding half away from zero;
3. packed two codes per byte (element 2i in the low nibble, 2i + 1 in the high one), and the zero
   point hidden in the low 4 mantissa bits of the fp32 scale kept in the scale cache.

A reader takes the scale with those bits cleared, so the stored vector is
x' = s * H ((n - z) * scale') / D: the inverse rotation of the dequantized codes. This module is
the format, computed in float64 where it is arithmetic; the signs are the format's constant
(torch's CPU generator, seeded as vLLM's `_get_rht_signs` seeds it).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from .case import is_power_of_two
from .quant import round_half_away

SIGN_SEED = 0x9E3779B9  # vLLM's seed for the one rotation round int4 uses
LEVELS = 15  # codes 0..15
MIN_SCALE = 1e-6  # the writer's floor
ZERO_POINT_BITS = 0xF  # the scale's low mantissa bits that carry the zero point


@functools.lru_cache(maxsize=None)
def rotation_signs(d: int) -> Tensor:
    """The format's +-1 signs s [d], float64: 2 * bernoulli(0.5) - 1 from a CPU generator seeded SIGN_SEED."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(SIGN_SEED)
    return (2.0 * torch.bernoulli(torch.full((d,), 0.5), generator=gen) - 1.0).to(torch.float64)


@functools.lru_cache(maxsize=None)
def sylvester(d: int) -> Tensor:
    """The unnormalized Hadamard matrix H [d, d] of Sylvester's construction: H_2k = [[H, H], [H, -H]]."""
    if not is_power_of_two(d):
        raise ValueError(f"head size {d}: the Hadamard rotation needs a power of two")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rotate(x: Tensor) -> Tensor:
    """H (s * x) along the last dimension, in float64 (H is symmetric, so x @ H is H x per vector)."""
    d = x.shape[-1]
    return (x.to(torch.float64) * rotation_signs(d).to(x.device)) @ sylvester(d).to(x.device)


def unrotate(r: Tensor) -> Tensor:
    """The inverse of `rotate`: s * H r / d, in float64."""
    d = r.shape[-1]
    return (r.to(torch.float64) @ sylvester(d).to(r.device)) * rotation_signs(d).to(r.device) / d


def scale_and_zero_point(r: Tensor) -> tuple[Tensor, Tensor]:
    """fp32 scale [...] = max((max - min) / 15, 1e-6) and int zero point [...] of each vector's last dim."""
    r = r.to(torch.float32)
    lo, hi = r.amin(-1), r.amax(-1)
    scale = torch.clamp((hi - lo) / torch.full_like(hi, LEVELS), min=MIN_SCALE)
    zero = round_half_away(-lo / scale).clamp(0, LEVELS)
    return scale, zero.to(torch.int32)


def codes(r: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
    """uint8 codes clamp(round(r * (1 / scale) + z), 0, 15); the writer multiplies by the fp32 reciprocal."""
    inv = (1.0 / scale.to(torch.float32))[..., None]
    y = r.to(torch.float32) * inv + zero.to(torch.float32)[..., None]
    return round_half_away(y).clamp(0, LEVELS).to(torch.uint8)


def pack_nibbles(n: Tensor) -> Tensor:
    """[..., D] codes -> [..., D / 2] bytes: element 2i in the low nibble, 2i + 1 in the high one."""
    return n[..., 0::2] | (n[..., 1::2] << 4)


def unpack_nibbles(b: Tensor) -> Tensor:
    """The inverse of `pack_nibbles`: [..., D / 2] bytes -> [..., D] codes."""
    return torch.stack([b & ZERO_POINT_BITS, b >> 4], dim=-1).flatten(-2)


def hide_zero_point(scale: Tensor, zero: Tensor) -> Tensor:
    """The fp32 scale with its low 4 mantissa bits replaced by the zero point (what the scale cache holds)."""
    bits = scale.to(torch.float32).contiguous().view(torch.int32)
    return ((bits & ~ZERO_POINT_BITS) | zero.to(torch.int32)).view(torch.float32)


def split_scale(stored: Tensor) -> tuple[Tensor, Tensor]:
    """(scale with the zero-point bits cleared, zero point) of stored scales."""
    bits = stored.to(torch.float32).contiguous().view(torch.int32)
    return (bits & ~ZERO_POINT_BITS).view(torch.float32), bits & ZERO_POINT_BITS


def encode(x: Tensor) -> tuple[Tensor, Tensor]:
    """(packed bytes [..., D / 2], stored scales [...]) of vectors x [..., D] given in the model dtype."""
    r = rotate(x).to(x.dtype)
    scale, zero = scale_and_zero_point(r)
    return pack_nibbles(codes(r, scale, zero)), hide_zero_point(scale, zero)


def dequantize(packed: Tensor, stored: Tensor) -> Tensor:
    """The rotated vectors the codes stand for, float64 [..., D]: (n - z) * scale, the scale's zero-point
    bits cleared."""
    scale, zero = split_scale(stored)
    n = unpack_nibbles(packed).to(torch.float64)
    return (n - zero.to(torch.float64)[..., None]) * scale.to(torch.float64)[..., None]


def decode(packed: Tensor, stored: Tensor) -> Tensor:
    """The vectors a reader attends to, float64 [..., D]: unrotate((n - z) * scale)."""
    return unrotate(dequantize(packed, stored))
