"""Softmax with an optional sink column, returning the natural-log log-sum-exp beside it."""
from __future__ import annotations

import math
from dataclasses import dataclass

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
    p = torch.exp(scores - lse.where(finite, 0.0)[..., None])
    return p.masked_fill_(~finite[..., None], 0.0)


@dataclass(frozen=True)
class ProbabilityRounding:
    """How a kernel that runs its P.V product in fp8 holds the softmax weights: the online softmax's unnormalized
    weights exp(s - running max), in (0, 1], times `scale`, rounded to `dtype` (FlashInfer's sm90 fp8 prefill scales
    by the format's largest value, 448 for e4m3; vLLM's Triton attention by 1, so weights under e4m3's smallest
    subnormal 2^-9 / 2 become 0). The normalizer sums the unrounded weights."""

    dtype: torch.dtype
    scale: float


def rounded_probabilities(scores: Tensor, lse: Tensor, rounding: ProbabilityRounding,
                          sink: Tensor | None = None) -> Tensor:
    """probabilities(scores, lse) as held by a kernel that rounds them so (ProbabilityRounding): the weights relative
    to the row's largest score (a tile's running max in the kernel: the same relative rounding), scaled, rounded to
    the fp8 dtype and scaled back, times exp(max - lse). `sink` (one logit per head, broadcast against the scores'
    head dimension): the running max starts there (vLLM's init_softmax_M), so the weights are relative to the larger
    of the two. Rows without a visible key give 0."""
    if scores.shape[-1] == 0:
        return scores.clone()
    top = scores.amax(-1, keepdim=True)
    if sink is not None:
        top = torch.maximum(top, sink.to(scores.dtype))
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(scores - top)
    held = (weights * rounding.scale).to(rounding.dtype).to(scores.dtype) / rounding.scale
    finite = torch.isfinite(lse)[..., None]
    return torch.where(finite, held * torch.exp(top - torch.where(finite, lse[..., None], top)), torch.zeros_like(held))
