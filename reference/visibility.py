"""Which keys a query may see: one small predicate per rule, combined by `visible`.

Positions are logical: the index of a token within its own sequence (context first, then the new
tokens). Every predicate takes broadcastable `q_pos` [q, 1] and `k_pos` [1, k] and returns bool.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .block_sparse import head_offset
from .case import BlockSparse, Case, SequenceSpec, kv_len


def query_positions(case: Case, seq: SequenceSpec) -> Tensor:
    """Logical position of each new token among the sequence's keys (`Case.query_offset` + j).

    A decoder query j sits at context_len + j (bottom-right alignment): with context_len=2,
    query_len=2 the queries are at positions 2 and 3 of keys 0..3. A kernel case aligned
    bottom-right with more queries than keys has negative positions: those rows see no key.
    """
    return torch.arange(seq.query_len, dtype=torch.int64) + case.query_offset(seq)


def causal_visible(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """True where the key is at or before the query.

        k:    0 1 2 3
        q=2:  x x x .
        q=3:  x x x x
    """
    return k_pos <= q_pos


def window_visible(q_pos: Tensor, k_pos: Tensor, left: int | None, right: int | None) -> Tensor:
    """True where the key is at most `left` positions before and `right` after the query.

    None is unbounded. vLLM's sliding_window W is (W-1, 0) for decoders, (W-1, W-1) for encoder_only:
    W keys including the query's own. left=1, right=0:
        k:    0 1 2 3
        q=2:  . x x .
        q=3:  . . x x
    """
    distance = q_pos - k_pos  # how far the key lies before the query (negative: after it)
    ok = torch.ones_like(distance, dtype=torch.bool)
    if left is not None:
        ok &= distance <= left
    if right is not None:
        ok &= -distance <= right
    return ok


def chunk_visible(q_pos: Tensor, k_pos: Tensor, chunk_size: int) -> Tensor:
    """True where query and key fall in the same chunk of `chunk_size` positions (local attention).

    chunk_size=2:
        k:    0 1 2 3
        q=2:  . . x x
        q=3:  . . x x      (combined with causal_visible, q=2 sees only key 2)
    """
    return torch.div(q_pos, chunk_size, rounding_mode="floor") == torch.div(k_pos, chunk_size, rounding_mode="floor")


def lookback_visible(q_pos: Tensor, k_pos: Tensor, chunk_size: int, lookback: int) -> Tensor:
    """True where the key's chunk is the query's own or one of the `lookback` chunks before it.

    chunk_size=2, lookback=1 (with causal_visible):
        k:    0 1 2 3 4 5
        q=4:  . . x x x .
        q=5:  . . x x x x
    """
    qc = torch.div(q_pos, chunk_size, rounding_mode="floor")
    kc = torch.div(k_pos, chunk_size, rounding_mode="floor")
    return qc - kc <= lookback


def global_prefix_visible(q_pos: Tensor, k_pos: Tensor, prefix_len: int, window: int) -> Tensor:
    """True where the key is one of the first `prefix_len` (the prompt) or within the last `window`
    positions up to the query (R-SWA). prefix_len=1, window=2:
        k:    0 1 2 3
        q=3:  x . x x
    """
    return (k_pos < prefix_len) | (q_pos - k_pos < window)


def ranges_visible(q_pos: Tensor, k_pos: Tensor, ranges: tuple[tuple[int, int], ...]) -> Tensor:
    """True where query and key lie in one inclusive (start, end) range (PrefixLM: an image's tokens see
    each other both ways). A range with start >= end adds nothing beyond a token seeing itself.
    Range (1, 2):
        k:    0 1 2 3
        q=1:  . x x .      (OR-ed with the causal mask: q=1 also sees k=0)
    """
    ok = torch.zeros(torch.broadcast_shapes(q_pos.shape, k_pos.shape), dtype=torch.bool)
    for start, end in ranges:
        ok |= (q_pos >= start) & (q_pos <= end) & (k_pos >= start) & (k_pos <= end)
    return ok


def block_sparse_visible(q_pos: Tensor, k_pos: Tensor, sparse: BlockSparse, offset: int) -> Tensor:
    """True where the key's block is one of the `local_blocks` latest, or a vertical-stride block.

    Blocks are `sparse.block_size` positions wide; a head's vertical blocks are those kb with
    (kb + offset) % vert_stride == 0, offset from `block_sparse.head_offset` (global head, TP rank).
    """
    qb = torch.div(q_pos, sparse.block_size, rounding_mode="floor")
    kb = torch.div(k_pos, sparse.block_size, rounding_mode="floor")
    return ((qb - kb) < sparse.local_blocks) | ((kb + offset) % sparse.vert_stride == 0)


def _index_of(case: Case, seq: SequenceSpec) -> int:
    """Which sequence `seq` is (per-sequence rules are indexed; equal specs may differ in their ranges)."""
    same = [i for i, s in enumerate(case.sequences) if s is seq] or [i for i, s in enumerate(case.sequences) if s == seq]
    if len(same) != 1:
        raise ValueError(f"{seq!r}: pass the SequenceSpec object from case.sequences (per-sequence rules are indexed)")
    return same[0]


def visible(case: Case, seq: SequenceSpec, index: int | None = None) -> Tensor:
    """Mask [num_heads or 1, query_len, kv_len] of the keys each query of `seq` may see.

    `index` (seq's place in case.sequences) picks its per-sequence rules; found from `seq` when omitted."""
    q_pos = query_positions(case, seq)[:, None]
    k_pos = torch.arange(kv_len(case.attn_type, seq), dtype=torch.int64)[None, :]
    mask = torch.ones(q_pos.shape[0], k_pos.shape[1], dtype=torch.bool)
    if case.is_causal:
        mask &= causal_visible(q_pos, k_pos)
    if case.chunk_lookback is not None:  # vLLM: the window sets the chunk size and is not applied itself
        mask &= lookback_visible(q_pos, k_pos, case.sliding_window // (case.chunk_lookback + 1), case.chunk_lookback)
    else:
        left, right = case.window_bounds
        if left is not None or right is not None:
            mask &= window_visible(q_pos, k_pos, left, right)
    if index is None and (case.global_prefix is not None or case.bidirectional_ranges is not None):
        index = _index_of(case, seq)
    if case.global_prefix is not None:
        mask &= global_prefix_visible(q_pos, k_pos, case.global_prefix.prefix_lens[index], case.global_prefix.window)
    if case.bidirectional_ranges is not None:  # (causal AND window) OR range, as vLLM and FlexAttention order it
        mask |= ranges_visible(q_pos, k_pos, case.bidirectional_ranges[index])
    if case.attn_chunk_size is not None:
        mask &= chunk_visible(q_pos, k_pos, case.attn_chunk_size)
    mask = mask[None]
    if case.block_sparse is not None:
        offsets = [head_offset(case.block_sparse, h, case.num_heads, case.num_kv_heads) for h in range(case.num_heads)]
        heads = [block_sparse_visible(q_pos, k_pos, case.block_sparse, o) for o in offsets]
        mask = mask & torch.stack(heads)
    return mask


def visible_padded(case: Case, max_q: int, max_k: int) -> Tensor:
    """`visible` of every sequence at once, padded: [B, num_heads or 1, max_q, max_k], False on padded queries and keys.

    The rules are predicates of positions, so they take every sequence's positions broadcast together ([B, max_q, 1]
    queries, [1, 1, max_k] keys) in `visible`'s order; only the bidirectional ranges, a list per sequence, are drawn
    sequence by sequence. The packed oracle's masks in some twenty operations however many sequences a case has,
    where `visible` and its padding are about ten a sequence (tests/reference/test_packed.py holds the two alike on drawn
    cases)."""
    seqs = case.sequences
    # (shaped with view, one operation each: a [:, None, None] index is three)
    rows = torch.arange(max_q, dtype=torch.int64).view(1, -1, 1)
    q_pos = rows + torch.tensor([case.query_offset(s) for s in seqs], dtype=torch.int64).view(-1, 1, 1)
    k_pos = torch.arange(max_k, dtype=torch.int64).view(1, 1, -1)
    mask = torch.ones(len(seqs), max_q, max_k, dtype=torch.bool)
    if case.is_causal:
        mask &= causal_visible(q_pos, k_pos)
    if case.chunk_lookback is not None:
        mask &= lookback_visible(q_pos, k_pos, case.sliding_window // (case.chunk_lookback + 1), case.chunk_lookback)
    else:
        left, right = case.window_bounds
        if left is not None or right is not None:
            mask &= window_visible(q_pos, k_pos, left, right)
    if case.global_prefix is not None:
        prefix = torch.tensor(case.global_prefix.prefix_lens, dtype=torch.int64).view(-1, 1, 1)
        mask &= global_prefix_visible(q_pos, k_pos, prefix, case.global_prefix.window)
    if case.bidirectional_ranges is not None:
        mask |= torch.stack([ranges_visible(q_pos[i], k_pos[0], r) for i, r in enumerate(case.bidirectional_ranges)])
    if case.attn_chunk_size is not None:
        mask &= chunk_visible(q_pos, k_pos, case.attn_chunk_size)
    real = (rows < torch.tensor(case.query_lens).view(-1, 1, 1)) & (k_pos < torch.tensor(case.kv_lens).view(-1, 1, 1))
    mask = (mask & real).unsqueeze(1)
    if case.block_sparse is not None:
        offsets = [head_offset(case.block_sparse, h, case.num_heads, case.num_kv_heads) for h in range(case.num_heads)]
        heads = torch.tensor(offsets, dtype=torch.int64).view(1, -1, 1, 1)
        mask = mask & block_sparse_visible(q_pos.unsqueeze(1), k_pos.unsqueeze(1), case.block_sparse, heads)
    return mask
