"""The oracle's second formulation: every sequence of a Case in one padded batch, the scores shared.

`reference.attention.attention` loops over sequences, chunks and heads, a few dozen small tensor ops per
sequence and pass; for the small and mid-sized cases a campaign draws most, those ops, not the arithmetic,
were the oracle's cost (benchmarks/results/throughput/). Here the sequences are padded to one
[B, H, max_query_len, max_kv_len] score tensor: one q.k product, one softmax and one p.v product for the
whole case, and the scores (everything before the mask) are kept, so a second mask over the same case
(the blind check's one-key shift) costs a softmax and a p.v product, not another pass.

Padded queries and keys are masked out and dropped; the math per row is `attend_sequence`'s, which stays
the readable definition: tests/reference/test_packed.py holds the two to 1e-12 in float64 on drawn cases.
Cases too large for one score tensor (`packable`) keep the chunked path.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .attention import (CHUNK_ELEMENTS, KEY_CHUNK, Expected, add_sink, alibi_terms, gemm_operand, new_token_bias,
                        query_for_oracle, sequence_kv, spread_matters)
from . import transfer
from .inputs import Inputs
from .scores import alibi_bias, apply_soft_cap, logit_spread
from .softmax import ProbabilityRounding, logsumexp_with_sink, probabilities, rounded_probabilities
from .visibility import visible_padded
from .widening import fast_source, widen

# Padded score elements (B x H x max_q x max_k) up to which a case is packed: a quarter of one chunk of the
# chunked path, so the few tensors the packed pass holds at once stay near its memory.
PACKED_ELEMENTS = CHUNK_ELEMENTS // 4
# Padding a case may add: past about twice its real score elements the padded products cost more than the
# per-sequence loop saves (one CPU thread, 300 drawn torch-sdpa-math cases: equal at 1.5-2x, 1.5x slower at 4x,
# a 1,024-key decode beside two 1-key ones 7x slower); after the padded-once operands, 4-8x and unbounded still
# 0.92-1.08x at the small tier and 1.10-1.20x at the tile tier (benchmarks/max_padding.py,
# benchmarks/results/throughput/max-padding-cpu-2026-12-02.md).
MAX_PADDING = 2.0
SMALL_ELEMENTS = 4096  # below this, any padding is cheaper than a second sequence's loop
# On a GPU the padded arithmetic is cheap and each operation is a launch that the campaign's workers queue for: a case
# whose oracle runs there is packed up to this many padded elements (64 MiB of float64 scores) whatever its padding.
# A tile-tier GPU case's oracle and blind check are 280 + 60 operations packed against 620 + 360 chunked
# (aten-flash-varlen's declaration, 23 drawn cases the CPU rule leaves chunked).
PACKED_ELEMENTS_GPU = 1 << 23
PAD_ONCE_TOKENS = 64  # parts up to this long are padded once for both passes on the host (`padded_once`)


def padded_elements(inputs: Inputs) -> int:
    case = inputs.case
    return len(case.sequences) * case.num_heads * case.max_query_len * case.max_kv_len


def real_elements(inputs: Inputs) -> int:
    case = inputs.case
    return case.num_heads * sum(q * k for q, k in zip(case.query_lens, case.kv_lens))


def packable(inputs: Inputs, max_elements: int = PACKED_ELEMENTS) -> bool:
    """Whether the case fits one padded score tensor (and one key chunk, as the chunked path would cut it) without
    padding it past MAX_PADDING times its real score elements; on a GPU, up to PACKED_ELEMENTS_GPU however padded."""
    padded = padded_elements(inputs)
    if inputs.case.max_kv_len > KEY_CHUNK:
        return False
    if inputs.query.device.type == "cuda":
        return padded <= PACKED_ELEMENTS_GPU
    return padded <= max_elements and padded <= MAX_PADDING * real_elements(inputs) + SMALL_ELEMENTS


def real_positions(lengths: list[int], length: int) -> Tensor:
    """[len(lengths), length] bool, True at position j of row b where j < lengths[b]: a padded batch's real queries or
    keys."""
    return torch.arange(length).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def _heads_first(parts: list[Tensor], at: tuple[Tensor, Tensor] | None, length: int,
                 dtype: torch.dtype) -> Tensor:
    """[len(parts), heads, length, dim] in `dtype`: each part [tokens, heads, dim] transposed and zero-padded to `length`
    tokens (a padded key's weight is 0 and 0 * NaN is NaN: the padding must be 0, not garbage). Heads first, so that the
    products below read their operands as they lie. `at`: each token's (part, position), [N] each, in the parts' order,
    read on a GPU only. On a GPU one scatter, where a copy and a fill a part are launches; on the CPU a copy a part,
    which converts as it goes (the scatter's indexed copy cost 2-4x as much once a part has hundreds of tokens:
    513 x 8 x 128 bfloat16 keys 1.5 ms against 0.75 on one CPU thread)."""
    if parts[0].device.type == "cuda":
        return scattered(parts, at, length, dtype)
    first = parts[0]
    out = torch.empty((len(parts), first.shape[1], length, first.shape[2]), dtype=dtype, device=first.device)
    for i, p in enumerate(parts):
        out[i, :, : p.shape[0]] = fast_source(p, dtype).transpose(0, 1)
        if p.shape[0] < length:
            out[i, :, p.shape[0]:] = 0
    return out


def padded_once(parts: list[Tensor], at: tuple[Tensor, Tensor] | None, length: int) -> Tensor | None:
    """`_heads_first` in the parts' own dtype, for each pass to widen to its own (a cast commutes with zero padding: the
    same bits), or None where padding per pass is cheaper. On a GPU one scatter; on the host one `pad_sequence` and one
    transposing copy where no part is longer than PAD_ONCE_TOKENS. Against a copy a part and pass, on one CPU thread:
    0.35-0.7x the time for parts of up to 64 tokens, 1.1-1.35x for parts of 200-2,049 (float64 and 16-bit passes:
    benchmarks/padding.py, results/throughput/padded-once-cpu-2026-12-02.md)."""
    if parts[0].device.type == "cuda":
        return scattered(parts, at, length, parts[0].dtype)
    if length > PAD_ONCE_TOKENS or max(p.shape[0] for p in parts) != length:
        return None
    return torch.nn.utils.rnn.pad_sequence(parts, batch_first=True).transpose(1, 2).contiguous()


def scattered(parts: list[Tensor], at: tuple[Tensor, Tensor], length: int, dtype: torch.dtype) -> Tensor:
    """`_heads_first` in one scatter of all parts' tokens (tests/reference/test_packed.py holds the two alike)."""
    tokens = parts[0] if len(parts) == 1 else torch.cat(parts)
    out = torch.zeros((len(parts), tokens.shape[1], length, tokens.shape[2]), dtype=dtype, device=tokens.device)
    out[at[0], :, at[1]] = widen(tokens, dtype)
    return out


def score_product(q: Tensor, k: Tensor) -> Tensor:
    """einsum("bngqd,bnkd->bngqk", q, k) as one batched matmul: q [B, H, Q, D] (h = n * G + g), k [B, H_kv, K, D] ->
    [B, H, Q, K]. The same sums as `reference.attention.product`'s einsum (both are one bmm over d); written out because
    einsum's planning was the largest single cost of a small case (100 us a call on one CPU thread: benchmarks/results/throughput/)."""
    b, h, q_len, d = q.shape
    kv_heads = k.shape[1]
    s = torch.matmul(gemm_operand(q).reshape(b, kv_heads, h // kv_heads * q_len, d), gemm_operand(k).transpose(-1, -2))
    return s.to(q.dtype).reshape(b, h, q_len, k.shape[2])


def value_product(p: Tensor, v: Tensor) -> Tensor:
    """einsum("bngqk,bnkd->bngqd", p, v) as one batched matmul: p [B, H, Q, K], v [B, H_kv, K, D_v] -> [B, H, Q, D_v],
    in the GEMM's dtype (the caller rounds what it keeps of it to p's)."""
    b, h, q_len, k_len = p.shape
    kv_heads = v.shape[1]
    o = torch.matmul(gemm_operand(p).reshape(b, kv_heads, h // kv_heads * q_len, k_len), gemm_operand(v))
    return o.reshape(b, h, q_len, v.shape[-1])


@dataclass(frozen=True)
class PackedLayout:
    """What the padded passes of one case share whatever their dtype: the mask [B, H|1, Q, K] (False on padding),
    the real rows [B, Q] and the (sequence, query) index pair [N] of each in token order, on a GPU the (sequence, key)
    pair of each real key in the same order (None on the host, where nothing reads it), each sequence's key count [B],
    the query positions [B, Q] (0 on padding; None without ALiBi, their one reader), the qq_bias scores [B, Q, K] or
    None, and the query, keys and values padded in their own dtype (`padded_once`; None for an operand each pass pads
    itself: a query dequantized from fp8, keys and values read from a cache, long host parts)."""

    mask: Tensor
    rows: Tensor
    token_rows: tuple[Tensor, Tensor]
    key_rows: tuple[Tensor, Tensor] | None
    num_keys: Tensor
    q_pos: Tensor | None
    bias: Tensor | None
    operands: tuple[Tensor | None, Tensor | None, Tensor | None] = (None, None, None)

    @staticmethod
    def of(inputs: Inputs) -> "PackedLayout":
        case = inputs.case
        dev = inputs.query.device
        max_q, max_k = case.max_query_len, case.max_kv_len
        biases = []
        if inputs.qq_bias is not None:
            for i, seq in enumerate(case.sequences):
                bias = new_token_bias(inputs.qq_bias, seq.query_len, case.kv_lens[i])
                biases.append(torch.nn.functional.pad(bias, (0, max_k - bias.shape[-1], 0, max_q - bias.shape[-2])))
        rows = real_positions(case.query_lens, max_q)
        seq_of, query_of = rows.nonzero().unbind(1)  # (sequence, query) of each real row, row-major: in token order
        host = [visible_padded(case, max_q, max_k), rows, seq_of, query_of, torch.tensor(case.kv_lens)]
        if inputs.alibi_slopes is not None:  # the query positions, padded with 0: only ALiBi reads them
            offsets = torch.tensor([case.query_offset(seq) for seq in case.sequences]).unsqueeze(1)
            host.append(torch.where(rows, torch.arange(max_q).unsqueeze(0) + offsets, 0))
        key_rows = None
        if dev.type != "cpu":  # built on the host, moved in one copy: each .to() of its own was a synchronisation of a
            # shared GPU; with the keys' (sequence, key) rows, which only the GPU's one-scatter padding reads
            host = transfer.move_all(host + list(real_positions(case.kv_lens, max_k).nonzero().unbind(1)), dev)
            key_rows = (host[-2], host[-1])
        mask, rows, seq_of, query_of, num_keys = host[:5]
        positions = host[5] if inputs.alibi_slopes is not None else None
        query = None if inputs.query_fp8 is not None else padded_once(
            list(inputs.query.split(case.query_lens)), (seq_of, query_of), max_q)
        keys = values = None
        if inputs.cache is None:
            keys = padded_once(list(inputs.keys), key_rows, max_k)
            values = None if keys is None else padded_once(list(inputs.values), key_rows, max_k)
        return PackedLayout(mask, rows, (seq_of, query_of), key_rows, num_keys, positions,
                            torch.stack(biases) if biases else None, (query, keys, values))


@dataclass(frozen=True)
class PackedScores:
    """The scores of every sequence of a case, padded: q.k x scale, soft-capped, ALiBi and qq_bias added, not
    yet masked. scores [B, H, Q, K]; mask [B, H|1, Q, K] (False on padding); rows [B, Q] (True on real
    queries, in token order when read row-major); num_keys [B] (each sequence's keys)."""

    scores: Tensor
    mask: Tensor
    values: Tensor  # [B, H_kv, K, D_v]
    rows: Tensor
    token_rows: tuple[Tensor, Tensor]  # [N] each: each real query row's (sequence, query), in token order
    num_keys: Tensor
    sink: Tensor | None
    spread: Tensor | None = None  # 0-dim: Expected.logit_spread under the case's own mask (the float64 pass)

    def attend(self, mask: Tensor | None = None, counts: bool = True,
               rounding: ProbabilityRounding | None = None) -> Expected:
        """Output [N, H, D_v], LSE [N, H] and (`counts`) visible-key counts of every real query row under `mask`
        (default: the case's own, which also carries the logits' rounding spread), in token order."""
        spread = self.spread if mask is None else None
        mask = self.mask if mask is None else mask
        b, h, q, _ = self.scores.shape
        masked = self.scores.masked_fill(~mask, -math.inf)
        lse = logsumexp_with_sink(masked, None)  # [B, H, Q]
        p = probabilities(masked, lse) if rounding is None else rounded_probabilities(
            masked, lse, rounding, None if self.sink is None else self.sink[None, :, None, None])
        # the real rows in token order, each taken in one gather (integer indexing: a boolean index would read its count
        # back from the device), the product rounded to p's dtype after it, on the rows kept
        seq_of, query_of = self.token_rows
        out = value_product(p, self.values).transpose(1, 2)[seq_of, query_of].to(p.dtype)  # [N, H, D_v]
        lse = lse.transpose(1, 2)[seq_of, query_of]  # [N, H]
        visible = mask.sum(-1).expand(b, h, q).transpose(1, 2)[seq_of, query_of] if counts else None
        if self.sink is not None:
            out, lse = add_sink(out, lse, self.sink)
        return Expected(out, lse, visible, spread)

    def attend_transformed(self, transform: Callable[[Tensor, Tensor], Tensor]) -> tuple[Expected, bool]:
        """attend() under transform(mask, num_keys [B, 1, 1]) -> mask, and whether it changed a real row. The transform
        sees the padded mask and each sequence's key count, and must add no key at or past that count (as
        `fuzz.blind.shift_by_one_key` never does): nothing here masks padded keys out again."""
        expected, changed = self.shifted(transform, counts=True)
        return expected, bool(changed)

    def shifted(self, transform: Callable[[Tensor, Tensor], Tensor], counts: bool = False) -> tuple[Expected, Tensor]:
        """attend_transformed() with the yes / no left on the scores' device (a 0-dim bool tensor): the caller reads it
        back with the rest."""
        moved = transform(self.mask, self.num_keys[:, None, None])
        changed = ((moved != self.mask) & self.rows[:, None, :, None]).any()
        return self.attend(moved, counts), changed


def pack_scores(inputs: Inputs, *, dtype: torch.dtype = torch.float64, reorder: bool = False,
                layout: PackedLayout | None = None) -> PackedScores:
    """PackedScores of `inputs` in `dtype` (reorder: the scale goes on the keys, as in `block_scores`).
    `layout`: PackedLayout.of(inputs) when the caller packs the case in more than one dtype."""
    case = inputs.case
    layout = PackedLayout.of(inputs) if layout is None else layout
    # the query as it is (widened as it is padded) unless the case dequantizes it from fp8
    query = inputs.query if inputs.query_fp8 is None else query_for_oracle(inputs, dtype)
    dev = query.device
    n_seq, max_q, max_k = len(case.sequences), case.max_query_len, case.max_kv_len
    once_q, once_k, once_v = layout.operands
    if once_q is not None:
        q = widen(once_q, dtype)  # [B, H, Q, D]
    else:
        q = _heads_first(list(query.split(case.query_lens)), layout.token_rows, max_q, dtype)
    if once_k is not None:
        k, v = widen(once_k, dtype), widen(once_v, dtype)  # [B, H_kv, K, D], [B, H_kv, K, D_v]
    else:
        if inputs.cache is None:  # widened as they are padded (the packed passes read them once each)
            ks, vs = inputs.keys, inputs.values
        else:
            ks, vs = zip(*(sequence_kv(inputs, i, dtype) for i in range(n_seq)))
        k = _heads_first(list(ks), layout.key_rows, max_k, dtype)
        v = _heads_first(list(vs), layout.key_rows, max_k, dtype)
    if reorder:
        scores = score_product(q, k * case.softmax_scale)
    else:
        scores = score_product(q * case.softmax_scale, k)
    spread = None
    if dtype == torch.float64 and not reorder and spread_matters(case):  # as `reference.attention.sequence_spread`
        spreads = logit_spread(score_product(q * q, k * k), scores, case.softmax_scale, case.soft_cap)
        spread = torch.where(layout.mask, spreads, 0.0).amax() if spreads.numel() else spreads.new_zeros(())
    scores = apply_soft_cap(scores, case.soft_cap)
    alibi = alibi_terms(inputs, dtype)
    if alibi is not None:
        positions = layout.q_pos.reshape(n_seq * max_q, 1)
        bias = alibi_bias(alibi[0], positions, torch.arange(max_k, device=dev)[None], *alibi[1:])  # [H, B * Q, K]
        scores = scores + bias.reshape(case.num_heads, n_seq, max_q, max_k).transpose(0, 1).to(scores.dtype)
    if layout.bias is not None:
        scores = scores + layout.bias[:, None].to(scores.dtype)
    return PackedScores(scores, layout.mask, v, layout.rows, layout.token_rows, layout.num_keys,
                        None if inputs.sinks is None else inputs.sinks.to(dtype), spread)


def packed_attention(inputs: Inputs, *, dtype: torch.dtype = torch.float64, reorder: bool = False) -> Expected:
    """`reference.attention.attention` of a packable case, in one padded pass."""
    return pack_scores(inputs, dtype=dtype, reorder=reorder).attend()


def packed_baseline(inputs: Inputs, dtype: torch.dtype, layout: PackedLayout,
                    rounding: ProbabilityRounding | None = None) -> Expected:
    """The tolerance rule's baseline of a packable case (scale on the keys, in `dtype`, the probabilities held as
    `rounding` says): output and LSE only."""
    return pack_scores(inputs, dtype=dtype, reorder=True, layout=layout).attend(counts=False, rounding=rounding)
