"""Merging partial attention states by their log-sum-exp, and LSE base conversion.

A state is (output [tokens, heads, D], lse [tokens, heads]) over some subset of the keys. The
contract: an empty subset has output 0 and LSE -inf; merging with an empty state returns the other
unchanged; merging two empty states gives output 0 and LSE -inf, never NaN.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

LOG2_E = 1.0 / math.log(2.0)


def merge_attn_states(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """(output, lse) of attention over the union of two disjoint key sets.

    lse = log(e^lse_a + e^lse_b); output = w_a * out_a + w_b * out_b with w_x = e^(lse_x - lse).
    vLLM's merge treats an LSE of +inf as -inf (a kernel's marker for an empty split); so do we.
    """
    lse_a = torch.where(lse_a == math.inf, -math.inf, lse_a)
    lse_b = torch.where(lse_b == math.inf, -math.inf, lse_b)
    lse = torch.logaddexp(lse_a, lse_b)
    empty = torch.isneginf(lse)
    safe = torch.where(empty, torch.zeros_like(lse), lse)
    w_a = torch.where(empty, torch.zeros_like(lse), torch.exp(lse_a - safe))
    w_b = torch.where(empty, torch.zeros_like(lse), torch.exp(lse_b - safe))
    out = w_a[..., None] * out_a + w_b[..., None] * out_b
    return out, lse


def lse_to_base2(lse: Tensor) -> Tensor:
    """log2(sum e^s) = ln(sum e^s) * log2(e). -inf stays -inf."""
    return lse * LOG2_E


def lse_from_base2(lse2: Tensor) -> Tensor:
    """ln(sum e^s) from log2(sum e^s) (FlashInfer's LSE base). -inf stays -inf."""
    return lse2 / LOG2_E
