"""vLLM's block-sparse pattern: which key blocks each head of each query block may read.

Two formulations that must agree: `visibility.block_sparse_visible` (a predicate on token positions,
what the paged decode kernel evaluates per key block) and `block_layout` here (a dense per-head
[query blocks, key blocks] table expanded to tokens, as vLLM's prefill kernel builds it).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .case import BlockSparse


def default_sliding_step(num_heads: int, vert_stride: int) -> int:
    """vLLM's get_head_sliding_step: rotate the vertical blocks across heads when they fit."""
    return max(1, int(vert_stride / num_heads))


def sliding_step(sparse: BlockSparse, num_heads: int, num_kv_heads: int) -> int:
    """The signed step: 0 for homo_head, negative (slide over kv heads) for homo_head_group."""
    if sparse.head_sliding_step is not None:
        return sparse.head_sliding_step
    if sparse.homo_head:
        return 0
    if sparse.homo_head_group:
        return -default_sliding_step(sparse.tp_size * num_kv_heads, sparse.vert_stride)
    return default_sliding_step(sparse.tp_size * num_heads, sparse.vert_stride)


def head_offset(sparse: BlockSparse, head: int, num_heads: int, num_kv_heads: int) -> int:
    """Vertical-stride offset of local query head `head` on TP rank `sparse.tp_rank`.

    Key block kb is a vertical block of the head when (kb + offset) % vert_stride == 0.
    """
    step = sliding_step(sparse, num_heads, num_kv_heads)
    if step >= 0:
        return (sparse.tp_rank * num_heads + head) * step + 1
    kv_head = head // (num_heads // num_kv_heads)
    return (sparse.tp_rank * num_kv_heads + kv_head) * -step + 1


def block_layout(sparse: BlockSparse, num_heads: int, num_kv_heads: int, num_blocks: int) -> Tensor:
    """Dense bool [num_heads, num_blocks, num_blocks]: query block qb may read key block kb.

    Built by explicit loops (causal at block level: kb <= qb), the way a layout table is written.
    """
    layout = torch.zeros(num_heads, num_blocks, num_blocks, dtype=torch.bool)
    for h in range(num_heads):
        offset = head_offset(sparse, h, num_heads, num_kv_heads)
        for qb in range(num_blocks):
            for kb in range(qb + 1):
                local = qb - kb < sparse.local_blocks
                vertical = (kb + offset) % sparse.vert_stride == 0
                layout[h, qb, kb] = local or vertical
    return layout


def token_mask_from_layout(layout: Tensor, block_size: int, q_pos: Tensor, kv_len: int) -> Tensor:
    """[num_heads, len(q_pos), kv_len]: the block layout expanded to tokens, then causal per token."""
    k_pos = torch.arange(kv_len)
    qb, kb = q_pos // block_size, k_pos // block_size
    mask = layout[:, qb][:, :, kb]
    return mask & (k_pos[None, None, :] <= q_pos[None, :, None])
