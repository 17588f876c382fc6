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
    """Bias [num_heads, q, k] = slope_h * (k_pos - q_pos) (SIGNED) or -slope_h * |k_pos - q_pos|.

    Under a causal mask k_pos <= q_pos and both conventions agree. Slope 0.5, q at 2:
        k:      0    1    2
        bias: -1.0 -0.5  0.0
    """
    distance = (k_pos - q_pos).to(slopes.dtype)
    if convention == AlibiConvention.SYMMETRIC:
        distance = -distance.abs()
    return slopes[:, None, None] * distance[None]
