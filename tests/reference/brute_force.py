"""An independent formulation of attention: explicit Python loops over numpy float64 scalars.

It shares no code with reference/: masks, biases, soft-cap and the sink column are re-derived from
the Case's documented semantics, one (token, head, key) at a time. Only for tiny cases.
"""
from __future__ import annotations

import math

import numpy as np

from reference.case import AlibiConvention, AttentionType, Case


def brute_force_attention(case: Case, query: np.ndarray, keys: list[np.ndarray], values: list[np.ndarray],
                          qq_bias: np.ndarray | None = None):
    """(output [N, H, Dv], lse [N, H]) by loops; keys/values are per-sequence float64 arrays."""
    h_per_kv = case.num_heads // case.num_kv_heads
    out = np.zeros((case.num_tokens, case.num_heads, case.value_size))
    lse = np.full((case.num_tokens, case.num_heads), -math.inf)
    row = 0
    for s, seq in enumerate(case.sequences):
        k, v = keys[s], values[s]
        n_keys = k.shape[0]
        for j in range(seq.query_len):
            if case.attn_type == AttentionType.KERNEL:  # bottom-right: the last query at the last key
                bottom_right = case.causal_alignment.value == "bottom_right"
                p = (n_keys - seq.query_len + j) if bottom_right else j
            else:
                p = seq.context_len + j if case.attn_type == AttentionType.DECODER else j
            for h in range(case.num_heads):
                logits, vals = [], []
                for t in range(n_keys):
                    if not _sees(case, p, t, h, s):
                        continue
                    x = case.softmax_scale * float(np.dot(query[row, h], k[t, h // h_per_kv]))
                    if case.soft_cap is not None:
                        x = case.soft_cap * math.tanh(x / case.soft_cap)
                    if case.alibi is not None:
                        slope = float(np.float32(case.alibi.slopes[h]))  # materialized as float32
                        x += {AlibiConvention.SIGNED: slope * (t - p), AlibiConvention.SYMMETRIC: -slope * abs(t - p),
                              AlibiConvention.SQRT: -slope * math.sqrt(p - t) if t <= p else 0.0}[case.alibi.convention]
                    if qq_bias is not None and t >= seq.context_len:  # new token t - context_len
                        x += float(qq_bias[j, t - seq.context_len])
                    logits.append(x)
                    vals.append(v[t, h // h_per_kv])
                if case.sinks is not None:  # the sink: one more logit whose value vector is zero
                    logits.append(float(np.float32(case.sinks[h])))  # materialized as float32
                    vals.append(np.zeros(case.value_size))
                if not logits:
                    continue
                m = max(logits)
                weights = [math.exp(x - m) for x in logits]
                total = sum(weights)
                lse[row, h] = m + math.log(total)
                out[row, h] = sum(w * vec for w, vec in zip(weights, vals)) / total
            row += 1
    return out, lse


def _sees(case: Case, p: int, t: int, h: int, s: int) -> bool:
    """Whether query position p of sequence s sees key t on head h; a PrefixLM range overrides the rest."""
    ranges = case.bidirectional_ranges[s] if case.bidirectional_ranges is not None else ()
    if any(a <= p <= b and a <= t <= b for a, b in ranges):
        return True
    return _sees_without_ranges(case, p, t, h, s)


def _sees_without_ranges(case: Case, p: int, t: int, h: int, s: int) -> bool:
    h_per_kv = case.num_heads // case.num_kv_heads
    if (case.attn_type == AttentionType.DECODER or (case.attn_type == AttentionType.KERNEL and case.causal)) and t > p:
        return False
    if case.attn_type == AttentionType.KERNEL and case.window is not None:
        left, right = case.window
        if (left is not None and p - t > left) or (right is not None and t - p > right):
            return False
    if case.chunk_lookback is not None:  # chunks of W // (lookback + 1); the window itself is not applied
        c = case.sliding_window // (case.chunk_lookback + 1)
        return p // c - t // c <= case.chunk_lookback
    if case.global_prefix is not None and t >= case.global_prefix.prefix_lens[s] and p - t >= case.global_prefix.window:
        return False
    if case.sliding_window is not None:
        w = case.sliding_window
        if p - t >= w:
            return False
        # vLLM: encoder_only windows are symmetric (W-1, W-1); every other type gets (W-1, 0).
        reach_right = w - 1 if case.attn_type == AttentionType.ENCODER_ONLY else 0
        if t - p > reach_right:
            return False
    if case.attn_chunk_size is not None and p // case.attn_chunk_size != t // case.attn_chunk_size:
        return False
    if case.block_sparse is not None:
        bs = case.block_sparse
        qb, kb = p // bs.block_size, t // bs.block_size
        # vLLM's BlocksparseParams: the step is derived from the global head count unless given;
        # negative steps slide over (global) kv heads instead of query heads.
        if bs.head_sliding_step is not None:
            step = bs.head_sliding_step
        elif bs.homo_head:
            step = 0
        elif bs.homo_head_group:
            step = -max(1, int(bs.vert_stride / (bs.tp_size * case.num_kv_heads)))
        else:
            step = max(1, int(bs.vert_stride / (bs.tp_size * case.num_heads)))
        if step >= 0:
            offset = (bs.tp_rank * case.num_heads + h) * step + 1
        else:
            offset = (bs.tp_rank * case.num_kv_heads + h // h_per_kv) * -step + 1
        if not (qb - kb < bs.local_blocks or (kb + offset) % bs.vert_stride == 0):
            return False
    return True
