"""Chunked local attention as virtual batches (vLLM's make_local_attention_virtual_batches).

A sequence whose queries span several attention chunks becomes one virtual sequence per chunk:
its queries are the ones in that chunk, its keys run from the chunk start to min(chunk end, seq_len),
and its block table starts at the chunk's first block. Plain causal (bottom-right) attention over
the virtual batches then equals the chunked-local mask on the original batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .attention import Expected, alibi_terms, attend_sequence, query_for_oracle, sequence_kv
from .case import AttentionType
from .inputs import Inputs, read_kv
from .visibility import causal_visible, window_visible


@dataclass(frozen=True)
class VirtualBatches:
    seqlens_q: Tensor  # [V] int32
    cu_seqlens_q: Tensor  # [V + 1] int32
    seqlens_k: Tensor  # [V] int32
    block_table: Tensor  # [V, attn_chunk_size // block_size]
    source: Tensor  # [V] the original sequence of each virtual one
    key_start: Tensor  # [V] position of the virtual sequence's first key in the original


def make_local_attention_virtual_batches(attn_chunk_size: int, query_start_loc: Tensor, seq_lens: Tensor,
                                         block_table: Tensor, block_size: int) -> VirtualBatches:
    """Split every sequence at attention-chunk boundaries (queries assumed non-empty, as in vLLM).

    Block-table rows are clipped to the table's last column, as vLLM does for the final chunk.
    """
    if attn_chunk_size % block_size:
        raise ValueError(f"attn_chunk_size={attn_chunk_size} must be a multiple of block_size={block_size}")
    pages = attn_chunk_size // block_size
    q_lens, rows = [], []
    k_lens, source, starts = [], [], []
    for b in range(seq_lens.shape[0]):
        seq_len = int(seq_lens[b])
        q_len = int(query_start_loc[b + 1] - query_start_loc[b])
        first = seq_len - q_len  # position of the first query
        chunk = first // attn_chunk_size
        while chunk * attn_chunk_size < seq_len:
            start, end = chunk * attn_chunk_size, min(seq_len, (chunk + 1) * attn_chunk_size)
            q_lens.append(end - max(first, start))
            k_lens.append(end - start)
            cols = (torch.arange(pages) + start // block_size).clamp(max=block_table.shape[1] - 1)
            rows.append(block_table[b, cols])
            source.append(b)
            starts.append(start)
            chunk += 1
    seqlens_q = torch.tensor(q_lens, dtype=torch.int32)
    return VirtualBatches(
        seqlens_q=seqlens_q,
        cu_seqlens_q=torch.nn.functional.pad(torch.cumsum(seqlens_q, 0), (1, 0)).to(torch.int32),
        seqlens_k=torch.tensor(k_lens, dtype=torch.int32),
        block_table=torch.stack(rows) if rows else block_table[:0, :pages],
        source=torch.tensor(source, dtype=torch.int64), key_start=torch.tensor(starts, dtype=torch.int64))


def local_attention_via_virtual_batches(inputs: Inputs) -> Expected:
    """Chunked local attention computed as causal attention over virtual batches.

    Windows and ALiBi depend only on q - k, so they carry over to the shifted virtual positions.
    """
    case = inputs.case
    if case.attn_type != AttentionType.DECODER or case.attn_chunk_size is None:
        raise ValueError("virtual batches implement a decoder case's attn_chunk_size")
    if case.block_sparse is not None:
        raise ValueError("block_sparse depends on absolute block positions: not defined on virtual batches")
    if any(s.query_len == 0 for s in case.sequences):
        raise ValueError("vLLM's virtual batches assume every sequence has at least one query")
    block_size = case.cache.block_size if inputs.cache is not None else case.attn_chunk_size
    table = inputs.block_table if inputs.block_table is not None else torch.zeros(len(case.sequences), 1, dtype=torch.int32)
    vb = make_local_attention_virtual_batches(case.attn_chunk_size, inputs.query_start_loc.cpu(), inputs.seq_lens.cpu(),
                                              table, block_size)
    query = query_for_oracle(inputs, torch.float64)
    left, right = case.window_bounds
    alibi = alibi_terms(inputs, torch.float64)
    outs, lses = [], []
    for j in range(vb.seqlens_q.shape[0]):
        b, start, n, q = int(vb.source[j]), int(vb.key_start[j]), int(vb.seqlens_k[j]), int(vb.seqlens_q[j])
        if inputs.cache is not None:
            k, v = read_kv(inputs.cache, vb.block_table[j], n)
        else:
            k_all, v_all = sequence_kv(inputs, b, torch.float64)
            k, v = k_all[start:start + n], v_all[start:start + n]
        q_pos, k_pos = torch.arange(n - q, n), torch.arange(n)  # bottom-right inside the virtual batch
        mask = causal_visible(q_pos[:, None], k_pos[None, :]) & window_visible(q_pos[:, None], k_pos[None, :], left, right)
        first = int(inputs.query_start_loc[b]) + (start + n - q) - int(inputs.context_lens[b])
        out, lse = attend_sequence(query[first:first + q], k, v, mask[None], scale=case.softmax_scale, q_pos=q_pos,
                                   k_pos=k_pos, alibi=alibi, soft_cap=case.soft_cap,
                                   sink=None if inputs.sinks is None else inputs.sinks.to(torch.float64))
        outs.append(out)
        lses.append(lse)
    return Expected(torch.cat(outs), torch.cat(lses))
