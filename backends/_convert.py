"""Translation shared by adapters: per-sequence slicing, dense masks and biases, LSE bases.

Written apart from reference/ on purpose: an adapter states the Case to its library in the
library's terms, and a mistake here must not be hidden by the same mistake in the oracle.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from reference.case import AlibiConvention, AttentionType, Case
from reference.inputs import Inputs

LOG2_E = 1.0 / math.log(2.0)


def key_offset(case: Case, i: int) -> int:
    """Position of sequence i's first query among its keys: a decoder's context_len (bottom-right),
    0 for encoders, and for kernel cases key_len - query_len (bottom-right) or 0 (top-left)."""
    s = case.sequences[i]
    if case.attn_type == AttentionType.KERNEL:
        return (s.key_len or 0) - s.query_len if case.causal_alignment.value == "bottom_right" else 0
    return s.context_len if case.attn_type == AttentionType.DECODER else 0


def allowed(case: Case, i: int, device) -> Tensor:
    """Bool [H|1, query_len, kv_len]: which keys each query may see, from the Case's fields."""
    s = case.sequences[i]
    n_k = case.kv_lens[i]
    qp = torch.arange(s.query_len, device=device)[:, None] + key_offset(case, i)
    kp = torch.arange(n_k, device=device)[None, :]
    ok = torch.ones(s.query_len, n_k, dtype=torch.bool, device=device)
    if case.attn_type == AttentionType.DECODER or (case.attn_type == AttentionType.KERNEL and case.causal):
        ok &= kp <= qp
    if case.attn_type == AttentionType.KERNEL and case.window is not None:
        left, right = case.window
        if left is not None:
            ok &= qp - kp <= left
        if right is not None:
            ok &= kp - qp <= right
    if case.sliding_window is not None:
        ok &= qp - kp < case.sliding_window
        if case.attn_type == AttentionType.ENCODER_ONLY:
            ok &= kp - qp < case.sliding_window
        else:
            ok &= kp <= qp
    if case.attn_chunk_size is not None:
        ok &= (qp // case.attn_chunk_size) == (kp // case.attn_chunk_size)
    return ok[None]


def alibi_additive(case: Case, i: int, slopes: Tensor) -> Tensor:
    """Float [H, query_len, kv_len] ALiBi bias in the Case's convention."""
    s = case.sequences[i]
    qp = torch.arange(s.query_len, device=slopes.device)[:, None] + key_offset(case, i)
    kp = torch.arange(case.kv_lens[i], device=slopes.device)[None, :]
    d = (kp - qp).float()
    if case.alibi.convention == AlibiConvention.SYMMETRIC:
        d = -d.abs()
    return slopes.float()[:, None, None] * d[None]


def per_sequence(inputs: Inputs, run_one: Callable[[int, Tensor, Tensor, Tensor], tuple[Tensor, Tensor | None]]
                 ) -> tuple[Tensor, Tensor | None]:
    """Call run_one(i, q [H, q, D], k [H_kv, kv, D], v) per sequence; concatenate [tokens, H, ...]."""
    outs, lses = [], []
    for i in range(len(inputs.case.sequences)):
        a, b = int(inputs.query_start_loc[i]), int(inputs.query_start_loc[i + 1])
        q = inputs.query[a:b].transpose(0, 1)
        k = inputs.keys[i].transpose(0, 1)
        v = inputs.values[i].transpose(0, 1)
        out, lse = run_one(i, q, k, v)
        outs.append(out.transpose(0, 1))
        lses.append(None if lse is None else lse.transpose(0, 1))
    lse = None if any(x is None for x in lses) else torch.cat(lses)
    return torch.cat(outs), lse


def lse_natural(lse: Tensor, base_two: bool) -> Tensor:
    """Convert a kernel's LSE to natural log (FlashInfer returns log2)."""
    return lse.float() / LOG2_E if base_two else lse.float()


def cu_seqlens(lengths: list[int], device) -> Tensor:
    return torch.nn.functional.pad(torch.tensor(lengths, device=device).cumsum(0), (1, 0)).to(torch.int32)
