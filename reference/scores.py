"""Logit transforms applied between q.k and the softmax: soft-cap and ALiBi biases."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .case import AlibiConvention


def apply_soft_cap(scores: Tensor, soft_cap: float | None) -> Tensor:
    """cap * tanh(scores / cap): squashes logits into (-cap, cap). Applied before any mask or bias."""
    if soft_cap is None:
        return scores
    return soft_cap * torch.tanh(scores / soft_cap)


def logit_spread(square_sums: Tensor, logits: Tensor | None, scale: float, soft_cap: float | None) -> Tensor:
    """scale * sqrt(sum_d q_d^2 k_d^2) per score, times the soft-cap's slope at its logit: how far apart, in units
    of one fp32 rounding, two correct fp32 kernels' logits may lie because they sum q.k's D terms in different
    orders (a random walk of roundings, each the size of a term, not of the sum: the terms may cancel to a small
    logit). tanh passes a logit's difference on at its slope, 1 - tanh(x / cap)^2.

    `square_sums`: (q*q).(k*k) summed over d; `logits`: q.k x scale before the cap (read only with a soft-cap)."""
    spread = scale * square_sums.sqrt()
    if soft_cap is not None:
        spread = spread * (1 - torch.tanh(logits / soft_cap) ** 2)
    return spread


def alibi_bias(slopes: Tensor, q_pos: Tensor, k_pos: Tensor, convention: AlibiConvention,
               held_in: torch.dtype | None = None) -> Tensor:
    """Bias [num_heads, q, k] = slope_h * (k_pos - q_pos) (SIGNED), -slope_h * |k_pos - q_pos|
    (SYMMETRIC), or -slope_h * sqrt(q_pos - k_pos) for k_pos <= q_pos and 0 after (SQRT); rounded to `held_in`
    where the bias reaches the kernel in that dtype (`Alibi.in_model_dtype`), in slopes' dtype either way.

    Under a causal mask k_pos <= q_pos and SIGNED and SYMMETRIC agree. Slope 0.5, q at 2:
        k:               0      1     2
        SIGNED:       -1.0   -0.5   0.0
        SQRT:       -0.707   -0.5   0.0
    """
    distance = (k_pos - q_pos).to(slopes.dtype)
    if convention == AlibiConvention.SYMMETRIC:
        distance = -distance.abs()
    elif convention == AlibiConvention.SQRT:
        distance = -torch.sqrt((-distance).clamp(min=0))  # only earlier keys are pushed down
    return held(slopes[:, None, None] * distance[None], held_in)


def held(bias: Tensor, dtype: torch.dtype | None) -> Tensor:
    """`bias` rounded to `dtype` and back (None: as it is)."""
    return bias if dtype is None else bias.to(dtype).to(bias.dtype)


def standard_alibi_slopes(num_heads: int) -> tuple[float, ...]:
    """ALiBi slopes as the models vLLM serves compute them (`_get_alibi_slopes` in its BLOOM / MPT code;
    FlashInfer's `get_alibi_slopes` computes the same when a kernel takes pos_encoding_mode="ALIBI").

    For a power of two n: 2^(-8 i / n), i = 1..n (the paper's geometric series). Otherwise the slopes of
    the closest lower power of two p, followed by the odd powers 1, 3, 5, ... of the base of 2p.
    """
    p = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(p) - 3)))
    slopes = [base ** i for i in range(1, p + 1)]
    if p != num_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * p) - 3)))
        slopes += [extra ** i for i in range(1, 2 * min(p, num_heads - p), 2)]
    return tuple(slopes)
