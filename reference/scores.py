"""Logit transforms applied between q.k and the softmax: soft-cap and ALiBi biases."""
from __future__ import annotations

import torch
from torch import Tensor

from .case import AlibiConvention


def apply_soft_cap(scores: Tensor, soft_cap: float | None) -> Tensor:
    """cap * tanh(scores / cap): squashes logits into (-cap, cap). Applied before any mask or bias."""
    if soft_cap is None:
        return scores
    return soft_cap * torch.tanh(scores / soft_cap)


def alibi_bias(slopes: Tensor, q_pos: Tensor, k_pos: Tensor, convention: AlibiConvention) -> Tensor:
    """Bias [num_heads, q, k] = slope_h * (k_pos - q_pos) (SIGNED), -slope_h * |k_pos - q_pos|
    (SYMMETRIC), or -slope_h * sqrt(q_pos - k_pos) for k_pos <= q_pos and 0 after (SQRT).

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
    return slopes[:, None, None] * distance[None]
