"""Softmax with an optional sink column, returning the natural-log log-sum-exp beside it."""
from __future__ import annotations

import math

import torch
from torch import Tensor


def logsumexp_with_sink(scores: Tensor, sink: Tensor | None) -> Tensor:
    """Natural-log LSE over the last dim, the sink logit (one per head) joining the sum.

    scores: [heads, q, k] with -inf at invisible keys; sink: [heads] or None.
    A row with no visible key and no sink has LSE -inf.
    """
    if sink is not None:
        column = sink.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, column], dim=-1)
    if scores.shape[-1] == 0:
        return torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype, device=scores.device)
    return torch.logsumexp(scores, dim=-1)


def all_finite(t: Tensor) -> bool:
    """Whether every element of `t` is finite, in one reduction: a sum is finite only if every term is (a NaN or
    an infinity carries through, +inf + -inf is NaN); a sum that overflows says False, so callers take their
    elementwise path then. torch.isfinite is several elementwise kernels, the judge's largest cost on small cases
    (benchmarks/results/throughput/harness-batched-h100-2026-11-25.md)."""
    return t.numel() == 0 or math.isfinite(float(t.sum()))


def probabilities(scores: Tensor, lse: Tensor) -> Tensor:
    """exp(scores - lse): softmax weights; rows with LSE -inf give weight 0 everywhere (never NaN).
    The check for an empty row is taken on the CPU only: on a GPU it is a synchronisation, and the masked path is
    right everywhere."""
    if lse.device.type == "cpu" and all_finite(lse):
        return torch.exp(scores - lse[..., None])
    finite = torch.isfinite(lse)
    safe_lse = torch.where(finite, lse, torch.zeros_like(lse))
    p = torch.exp(scores - safe_lse[..., None])
    return torch.where(finite[..., None], p, torch.zeros_like(p))
