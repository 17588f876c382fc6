"""Cascade attention: a prefix shared by every sequence, attended once, merged with per-sequence suffixes.

The flash-attn backend's split: all queries of the batch attend the common prefix (whole blocks,
the same physical blocks in every table) non-causally; each sequence's queries attend their own
suffix causally (bottom-right); the two states merge by LSE and the sink joins once at the end.
It equals direct attention when every query comes after the prefix (context_len >= prefix).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .attention import Expected
from .case import AttentionType
from .inputs import Inputs, read_kv
from .merge import merge_attn_states
from .partial import finish, partial_state

PREFIX_THRESHOLD = 256  # tokens: shorter common prefixes are not worth a second kernel launch
MIN_REQUESTS = 8
TILE = 128  # flash-attn's default q and kv tile sizes, used by the performance model


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def use_cascade_attention(common_prefix_len: int, query_lens: np.ndarray, num_query_heads: int,
                          num_kv_heads: int, use_alibi: bool, use_sliding_window: bool,
                          use_local_attention: bool, num_sms: int, dcp_world_size: int = 1) -> bool:
    """vLLM's decision (a heuristic): cascade only for long shared prefixes, many requests, and no
    ALiBi / window / local attention / DCP; then only if a rough CTA-count model says it beats
    FlashDecoding (which is used for all-decode GQA batches)."""
    if common_prefix_len < PREFIX_THRESHOLD:
        return False
    if use_alibi or use_sliding_window or use_local_attention:
        return False
    num_reqs = len(query_lens)
    if num_reqs < MIN_REQUESTS or dcp_world_size > 1:
        return False
    group = num_query_heads // num_kv_heads
    flash_decoding = group > 1 and bool(np.all(np.asarray(query_lens) == 1))
    if not flash_decoding:
        return True
    prefix_tiles = _cdiv(common_prefix_len, TILE)
    cascade_time = _cdiv(num_query_heads * _cdiv(num_reqs, TILE), num_sms) * prefix_tiles
    flash_decoding_time = _cdiv(num_reqs * num_kv_heads * _cdiv(group, TILE) * prefix_tiles, num_sms)
    return cascade_time < flash_decoding_time


@dataclass(frozen=True)
class CascadeMetadata:
    """What the backend passes its two kernel calls (in token counts and block tables)."""

    common_prefix_len: int
    prefix_block_table: Tensor  # [1, prefix_blocks]: the shared blocks (row 0's)
    suffix_block_table: Tensor  # [B, max_blocks - prefix_blocks]
    suffix_kv_lens: Tensor  # [B]
    cu_prefix_query_lens: Tensor  # [0, num_tokens]: the whole batch is one "sequence" for the prefix


def cascade_metadata(inputs: Inputs, common_prefix_len: int) -> CascadeMetadata:
    """Split the batch's metadata at `common_prefix_len`; raise ValueError where cascade is undefined."""
    case = inputs.case
    problems = []
    if case.attn_type != AttentionType.DECODER or inputs.cache is None:
        problems.append("cascade needs a decoder case with a paged cache")
    else:
        bs = case.cache.block_size
        n = common_prefix_len // bs
        if common_prefix_len <= 0 or common_prefix_len % bs:
            problems.append(f"common_prefix_len={common_prefix_len} must be a positive multiple of block_size={bs}")
        elif not bool((inputs.block_table[:, :n] == inputs.block_table[:1, :n]).all()):
            problems.append(f"the first {n} blocks are not the same physical blocks in every table")
        if any(s.context_len < common_prefix_len for s in case.sequences):
            problems.append("every sequence needs context_len >= common_prefix_len (queries after the prefix)")
    for name in ("alibi", "sliding_window", "attn_chunk_size", "block_sparse", "bidirectional_ranges", "global_prefix",
                 "chunk_lookback"):
        if getattr(case, name) is not None:
            problems.append(f"{name} is not defined for cascade attention (vLLM asserts it off)")
    if case.qq_bias:
        problems.append("qq_bias is not defined for cascade attention (a unified-attention argument)")
    if problems:
        raise ValueError("; ".join(problems))
    n = common_prefix_len // case.cache.block_size
    return CascadeMetadata(
        common_prefix_len=common_prefix_len,
        prefix_block_table=inputs.block_table[:1, :n],
        suffix_block_table=inputs.block_table[:, n:],
        suffix_kv_lens=inputs.seq_lens - common_prefix_len,
        cu_prefix_query_lens=torch.tensor([0, case.num_tokens], dtype=torch.int32))


def cascade_attention(inputs: Inputs, common_prefix_len: int) -> Expected:
    """Attention of the whole batch computed as prefix state ⊕ suffix state per query."""
    case = inputs.case
    meta = cascade_metadata(inputs, common_prefix_len)
    p = meta.common_prefix_len
    prefix_k, prefix_v = read_kv(inputs.cache, meta.prefix_block_table[0], p)
    outs, lses = [], []
    for i, seq in enumerate(case.sequences):
        q = seq.query_len
        every_key = torch.ones(1, q, p, dtype=torch.bool)  # all prefix keys precede every query
        prefix_state = partial_state(inputs, i, prefix_k, prefix_v, every_key, q_pos=torch.arange(q) + seq.context_len,
                                     k_pos=torch.arange(p))
        n = int(meta.suffix_kv_lens[i])
        suffix_k, suffix_v = read_kv(inputs.cache, meta.suffix_block_table[i], n)
        # Causal, bottom-right over the suffix: query j sits at suffix position n - q + j.
        causal = torch.arange(n)[None, :] <= (torch.arange(q) + n - q)[:, None]
        suffix_state = partial_state(inputs, i, suffix_k, suffix_v, causal[None], q_pos=torch.arange(q) + n - q,
                                     k_pos=torch.arange(n))
        out, lse = merge_attn_states(*prefix_state, *suffix_state)
        outs.append(out)
        lses.append(lse)
    return finish(inputs, outs, lses)
