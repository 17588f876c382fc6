"""The oracle: attention output and natural-log LSE for every token of a Case, in float64.

Slow and obvious on purpose: one loop over sequences, each a dense score matrix, chunked over
queries and keys only where the matrix would not fit (the chunks are merged by LSE, the same math).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from . import quant, transfer
from .case import Case, DType
from .inputs import Inputs, read_kv
from .merge import merge_attn_states
from .scores import alibi_bias, apply_soft_cap, logit_spread
from .softmax import ProbabilityRounding, logsumexp_with_sink, probabilities, rounded_probabilities
from .visibility import query_positions, visible
from .widening import widen

# Score-matrix elements one chunk may hold (2**22 float64 = 32 MiB), and keys per chunk.
CHUNK_ELEMENTS = 2**22
KEY_CHUNK = 4096
# A sequence's widened keys and values kept for the next reader up to this size (a 16,384-key long-tier sequence's
# float64 ones are 256 MiB: read again rather than held).
KEPT_BYTES = 64 << 20


@dataclass(frozen=True)
class Expected:
    """Oracle result: output [num_tokens, num_heads, head_size_v] and natural-log lse [num_tokens, num_heads]."""

    output: Tensor
    lse: Tensor
    num_visible: Tensor | None = None  # [num_tokens, num_heads]: keys each row sees (0: an empty row)
    logit_spread: Tensor | None = None  # 0-dim: the largest `scores.logit_spread` over visible scores (the oracle's pass)


def attention(inputs: Inputs, *, dtype: torch.dtype = torch.float64, reorder: bool = False,
              chunk_elements: int = CHUNK_ELEMENTS, key_chunk: int = KEY_CHUNK,
              mask_transform: Callable[[Tensor], Tensor] | None = None,
              rounding: ProbabilityRounding | None = None) -> Expected:
    """Attention of every query token over the keys the Case lets it see.

    dtype=float64 is the oracle; dtype=case.dtype with reorder=True is the tolerance rule's
    baseline (the same math rounded like a plain low-precision implementation).
    A query row with no visible key gives output 0 and LSE -inf (a sink alone gives its logit).
    `mask_transform` edits each sequence's visibility mask first (the fuzzer's blind-case probe).
    `rounding`: the baseline of a kernel that holds its probabilities in fp8 for P.V (ProbabilityRounding).
    The float64 pass over the case's own masks also reports the logits' rounding spread (Expected.logit_spread).
    """
    case = inputs.case
    outputs, lses, counts, spreads = [], [], [], []
    with_spread = dtype == torch.float64 and mask_transform is None and spread_matters(case)
    query = query_for_oracle(inputs, dtype)
    masks, positions = sequence_masks(case, query.device)
    for i, seq in enumerate(case.sequences):
        start, end = case.query_starts[i], case.query_starts[i + 1]
        k, v = sequence_kv(inputs, i, dtype)
        mask = masks[i] if mask_transform is None else mask_transform(masks[i])
        out, lse = attend_sequence(
            query[start:end], k, v, mask,
            scale=case.softmax_scale, q_pos=positions[i],
            alibi=alibi_terms(inputs, dtype),
            soft_cap=case.soft_cap, sink=None if inputs.sinks is None else inputs.sinks.to(dtype),
            bias=None if inputs.qq_bias is None else new_token_bias(inputs.qq_bias, seq.query_len, k.shape[0]).to(
                device=query.device, dtype=dtype),
            dtype=dtype, reorder=reorder, chunk_elements=chunk_elements, key_chunk=key_chunk, rounding=rounding)
        outputs.append(out)
        lses.append(lse)
        counts.append(mask.sum(-1).expand(case.num_heads, -1).transpose(0, 1))
        if with_spread:
            spreads.append(sequence_spread(query[start:end], k, mask, scale=case.softmax_scale, soft_cap=case.soft_cap,
                                           chunk_elements=chunk_elements, key_chunk=key_chunk))
    spread = torch.stack(spreads).amax() if spreads else None
    return Expected(torch.cat(outputs), torch.cat(lses), torch.cat(counts), spread)


def spread_matters(case: Case) -> bool:
    """Whether the tolerance rule reads Expected.logit_spread: for float32 cases. In 16-bit cases the rule's own floors
    (2e-4 / 2e-3, and twice the output's rounding) are several times the term it sets, 2 * eps_fp32 * spread * max|out|,
    at the logit scales drawn for them, and the spread costs a product as large as the scores (0.3-0.8 ms of a small
    case's oracle on an H200 host: benchmarks/results/throughput/)."""
    return case.dtype == DType.FLOAT32


def sequence_spread(q: Tensor, k: Tensor, visible: Tensor, *, scale: float, soft_cap: float | None,
                    chunk_elements: int = CHUNK_ELEMENTS, key_chunk: int = KEY_CHUNK) -> Tensor:
    """The largest `scores.logit_spread` over the scores of one sequence that `visible` [H|1, q, k] keeps (0-dim;
    0 where none is), of q [q, H, D] against k [k, H_kv, D], chunked as `attend_sequence` chunks."""
    num_q, num_heads, head_size = q.shape
    kv_heads = k.shape[1]
    worst = torch.zeros((), dtype=q.dtype, device=q.device)
    for rows, keys in blocks(num_q, k.shape[0], num_heads, chunk_elements, key_chunk):
        qg = q[rows].reshape(-1, kv_heads, num_heads // kv_heads, head_size)
        kc = k[keys]
        squares = product("qngd,knd->ngqk", qg * qg, kc * kc).reshape(num_heads, qg.shape[0], kc.shape[0])
        logits = None if soft_cap is None else product("qngd,knd->ngqk", qg * scale, kc).reshape(squares.shape)
        spread = logit_spread(squares, logits, scale, soft_cap)
        worst = torch.maximum(worst, torch.where(visible[:, rows, keys], spread, 0.0).amax())
    return worst


def blocks(num_q: int, num_k: int, num_heads: int, chunk_elements: int = CHUNK_ELEMENTS,
           key_chunk: int = KEY_CHUNK) -> Iterator[tuple[slice, slice]]:
    """(query rows, keys) of each block of one sequence's scores the oracle holds at once: at most `key_chunk` keys,
    and as many queries as keep the block near `chunk_elements` scores. None without a query or a key."""
    k_chunk = max(1, min(num_k, key_chunk)) if num_k else 1
    q_chunk = max(1, min(num_q, chunk_elements // (num_heads * k_chunk)))
    for qs in range(0, num_q, q_chunk):
        for ks in range(0, num_k, k_chunk):
            yield slice(qs, min(num_q, qs + q_chunk)), slice(ks, min(num_k, ks + k_chunk))


def sequence_masks(case: Case, device: torch.device) -> tuple[list[Tensor], list[Tensor]]:
    """Each sequence's visibility mask and query positions on `device`: built on the host and moved in one copy
    (each .to() of its own was a synchronisation of a GPU the campaign's workers share)."""
    masks = [visible(case, seq, i) for i, seq in enumerate(case.sequences)]
    positions = [query_positions(case, seq) for seq in case.sequences]
    if device.type == "cpu":
        return masks, positions
    moved = transfer.move_all(masks + positions, device)
    return moved[:len(masks)], moved[len(masks):]


def new_token_bias(qq_bias: Tensor, query_len: int, num_keys: int) -> Tensor:
    """Score bias [query_len, num_keys]: qq_bias[i, j] on the sequence's j-th new token (key context_len + j)."""
    bias = torch.zeros(query_len, num_keys, dtype=qq_bias.dtype, device=qq_bias.device)
    bias[:, num_keys - query_len:] = qq_bias[:query_len, :query_len]
    return bias


def query_for_oracle(inputs: Inputs, dtype: torch.dtype) -> Tensor:
    """The query as the kernel sees it: dequantized from fp8 when the case quantizes it."""
    if inputs.query_fp8 is not None:
        return quant.dequantize(inputs.query_fp8, inputs.q_scale, dtype)
    return widen(inputs.query, dtype)


def sequence_kv(inputs: Inputs, i: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Keys and values [kv_len, H_kv, D] of sequence i: from the paged cache when there is one. Kept on `inputs`
    up to KEPT_BYTES (callers read them, never write them): the blind check read again what the oracle had read,
    3.6 % of an evaluation's time on the CPU without a cache and 7.5 % with one (an evaluation of torch-naive-paged
    37.7 -> 36.4 ms: benchmarks/results/throughput/harness-async-copies-h200-2026-11-27.md)."""
    kept = inputs.widened.get((i, dtype))
    if kept is not None:
        return kept
    n = inputs.case.kv_lens[i]
    if inputs.cache is not None:
        kv = read_kv(inputs.cache, inputs.block_table[i], n, dtype)
    else:
        kv = widen(inputs.keys[i], dtype), widen(inputs.values[i], dtype)
    if sum(t.numel() * t.element_size() for t in kv) <= KEPT_BYTES:
        inputs.widened[(i, dtype)] = kv
    return kv


def attend_sequence(q: Tensor, k: Tensor, v: Tensor, visible: Tensor, *, scale: float,
                    q_pos: Tensor | None = None, k_pos: Tensor | None = None,
                    alibi: tuple[Tensor, object] | None = None,
                    soft_cap: float | None = None, sink: Tensor | None = None, bias: Tensor | None = None,
                    dtype: torch.dtype = torch.float64, reorder: bool = False,
                    chunk_elements: int = CHUNK_ELEMENTS, key_chunk: int = KEY_CHUNK,
                    rounding: ProbabilityRounding | None = None) -> tuple[Tensor, Tensor]:
    """Output [q, H, D_v] and LSE [q, H] of one sequence: q [q, H, D], k/v [kv, H_kv, D], visible [H|1, q, kv].

    `bias` [q, kv] is added to every head's scores after the soft-cap (as ALiBi is).

    Query head h reads kv head h // (H / H_kv). Chunks over keys (and queries) are merged by LSE.
    `k_pos` are the keys' positions (for ALiBi) when k/v are a subset of the sequence's keys.
    """
    num_q, num_heads = q.shape[0], q.shape[1]
    num_k = k.shape[0]
    if q_pos is None:
        q_pos = torch.arange(num_q, device=q.device) + (num_k - num_q)
    if k_pos is None:
        k_pos = torch.arange(num_k, device=q.device)
    def attend_block(rows: slice, keys: slice) -> tuple[Tensor, Tensor]:
        return _attend_block(
            q[rows].to(dtype), k[keys].to(dtype), v[keys].to(dtype), visible[:, rows, keys],
            scale=scale, q_pos=q_pos[rows], k_pos=k_pos[keys],
            alibi=alibi, soft_cap=soft_cap, reorder=reorder,
            bias=None if bias is None else bias[rows, keys], rounding=rounding,
            sink=None if sink is None or rounding is None else sink.to(dtype))

    parts = list(blocks(num_q, num_k, num_heads, chunk_elements, key_chunk))
    if len(parts) == 1:
        # a sequence held in one block is its own state: merging it into the empty one is the identity
        # (reference.merge's contract), and was a fifth of the oracle's time on the small tier's
        # multi-sequence cases (benchmarks/results/throughput/one-block-cpu-2026-12-03.md)
        out, lse = attend_block(*parts[0])
    else:
        out = torch.zeros(num_q, num_heads, v.shape[-1], dtype=dtype, device=q.device)
        lse = torch.full((num_q, num_heads), -math.inf, dtype=dtype, device=q.device)
        for rows, keys in parts:
            out[rows], lse[rows] = merge_attn_states(out[rows], lse[rows], *attend_block(rows, keys))
    if sink is not None:
        out, lse = add_sink(out, lse, sink)
    return out, lse


def product(equation: str, a: Tensor, b: Tensor) -> Tensor:
    """torch.einsum(equation, a, b) as a plain kernel computes it in a's dtype: float16 products summed in float32,
    the result rounded once to float16 (a GPU GEMM's accumulator). Written out for the 16-bit dtypes because the CPU's
    GEMMs for them are slow: float16's einsum was 3-7x slower than this and equal to it in 99.9 % of elements (1 ulp
    apart elsewhere); bfloat16's accumulates in float32 too, but without the CPU's bfloat16 instructions (AVX512-BF16,
    AMX) it took 9-10x this one's time on a small case's products and 16-21x on a tile case's, the same bits in 99.99 %
    of elements (the 2-core CI box: benchmarks/results/oracle/bf16-products-cpu-2026-12-07.md). float32 / float64 are as
    they are."""
    return torch.einsum(equation, gemm_operand(a), gemm_operand(b)).to(a.dtype)


def _cpu_has_bf16_gemm() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (AVX512-BF16 or AMX), which torch's bfloat16 GEMM uses
    (torch.cpu's private probes; False where they are missing)."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


# The 16-bit dtypes `product` widens on the CPU: float16 always, bfloat16 where the CPU has no bfloat16 GEMM of its own
# (where it has one, torch's bfloat16 GEMM is kept as it was measured in the GPU hosts' campaigns)
_WIDENED_FOR_GEMM = frozenset({torch.float16} | (set() if _cpu_has_bf16_gemm() else {torch.bfloat16}))


def gemm_operand(t: Tensor) -> Tensor:
    """t as `product` hands it to a GEMM: a 16-bit float on the CPU as float32 where the CPU's own GEMM of it is slow
    (_WIDENED_FOR_GEMM; the caller rounds the result back)."""
    return t.float() if t.dtype in _WIDENED_FOR_GEMM and t.device.type == "cpu" else t


def alibi_terms(inputs: Inputs, dtype: torch.dtype) -> tuple | None:
    """What `block_scores` adds ALiBi from: (slopes in `dtype`, convention, the dtype its bias is held in or None); None
    without ALiBi."""
    if inputs.alibi_slopes is None:
        return None
    return inputs.alibi_slopes.to(dtype), inputs.case.alibi.convention, inputs.case.alibi_held_in


def block_scores(q: Tensor, k: Tensor, visible: Tensor, *, scale: float, q_pos: Tensor, k_pos: Tensor, alibi,
                 soft_cap: float | None, reorder: bool = False, bias: Tensor | None = None) -> Tensor:
    """Scores [H, q, k] of q [q, H, D] over keys k [k, H_kv, D], in q's dtype: q.k x scale, soft-capped, then ALiBi
    and `bias` added, -inf where `visible` [H|1, q, k] is False. Query head h = n * G + g reads kv head n (G = H / H_kv
    query heads per kv head): the heads are grouped in the einsum rather than copying each kv head G times."""
    num_q, num_heads, _ = q.shape
    kv_heads = k.shape[1]
    qg = q.reshape(num_q, kv_heads, num_heads // kv_heads, q.shape[-1])
    if reorder:  # scale the keys instead of the queries (a different rounding, same math)
        scores = product("qngd,knd->ngqk", qg, k * scale)
    else:
        scores = product("qngd,knd->ngqk", qg * scale, k)
    scores = scores.reshape(num_heads, num_q, k.shape[0])
    scores = apply_soft_cap(scores, soft_cap)  # soft-cap comes before biases and masks
    if alibi is not None:
        slopes, convention, held_in = alibi
        scores = scores + alibi_bias(slopes, q_pos[:, None], k_pos[None, :], convention, held_in).to(scores.dtype)
    if bias is not None:
        scores = scores + bias[None].to(scores.dtype)
    return scores.masked_fill(~visible, -math.inf)


def _attend_block(q: Tensor, k: Tensor, v: Tensor, visible: Tensor, *, scale: float, q_pos: Tensor,
                  k_pos: Tensor, alibi, soft_cap: float | None, reorder: bool,
                  bias: Tensor | None = None, rounding: ProbabilityRounding | None = None,
                  sink: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(output [q, H, D_v], lse [q, H]) of q over one block of keys k/v [k, H_kv, D], in q's dtype.

    Query head h = n * G + g reads kv head n (G = H / H_kv query heads per kv head): the heads are
    grouped in the einsum rather than copying each kv head G times. `sink` [H]: where a rounding kernel's running max
    starts (rounded_probabilities); the sink itself joins the result later (add_sink)."""
    num_q, num_heads, _ = q.shape
    kv_heads = k.shape[1]
    scores = block_scores(q, k, visible, scale=scale, q_pos=q_pos, k_pos=k_pos, alibi=alibi, soft_cap=soft_cap,
                          reorder=reorder, bias=bias)
    lse = logsumexp_with_sink(scores, None)  # [H, q]
    p = probabilities(scores, lse) if rounding is None else rounded_probabilities(
        scores, lse, rounding, None if sink is None else sink[:, None, None])
    p = p.reshape(kv_heads, num_heads // kv_heads, num_q, k.shape[0])
    out = product("ngqk,knd->qngd", p, v).reshape(num_q, num_heads, v.shape[-1])
    return out, lse.transpose(0, 1)


def add_sink(out: Tensor, lse: Tensor, sink: Tensor) -> tuple[Tensor, Tensor]:
    """Fold a per-head sink logit into a finished state: an extra softmax column with no value.

    lse' = log(e^lse + e^sink); out' = out * e^(lse - lse').
    """
    sink = sink.to(lse.dtype)[None, :].expand_as(lse)
    new_lse = torch.logaddexp(lse, sink)
    weight = torch.where(torch.isneginf(lse), torch.zeros_like(lse), torch.exp(lse - new_lse))
    return out * weight[..., None], new_lse
