"""A row's output when one key joins or leaves its mask, from the row's finished output and LSE.

A second formulation of attention under a mask that differs from the case's by at most one key per row (the
blind check's one-key shift): for a row with output O and LSE L (its sink included), adding key j with score s
and value v_j gives

    O' = (e^L O + e^s v_j) / (e^L + e^s)      so  O' - O = sigmoid(s - L) (v_j - O),

and dropping a visible key j gives O' - O = -(w / (1 - w)) (v_j - O) with w = e^(s - L). A row costs one dot
product instead of a pass over its keys: on a GPU shared by a campaign's workers the blind check's full pass was
most of a large case's time (30-100 ms: benchmarks/results/throughput/). Where the dropped key held all but a
1e-6 part of its row's weight, 1 - w has lost its digits; those queries are attended again over their keys
(`reference.attention.attend_sequence`). tests/reference/test_one_key.py holds this to a fresh pass.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from . import transfer
from .attention import (Expected, alibi_terms, attend_sequence, new_token_bias, query_for_oracle, sequence_kv,
                        sequence_masks)
from .inputs import Inputs
from .scores import alibi_bias, apply_soft_cap, held
from .widening import widen

EXACT_BELOW = 1e-6  # 1 - w under this: the dropped key's row is attended again


def pair_scores(inputs: Inputs, i: int, q: Tensor, k: Tensor, key: Tensor, q_pos: Tensor) -> Tensor:
    """Scores [H, q] of each query of sequence i (q [H, q, D], positions q_pos [q]) with one key each: `key` [H, q]
    indexes the sequence's keys, k [H, q, D] holds them. The same steps as `reference.attention.block_scores`:
    q.k x scale, soft-cap, then ALiBi and qq_bias added."""
    case = inputs.case
    scores = apply_soft_cap((q * k).sum(-1) * case.softmax_scale, case.soft_cap)
    alibi = alibi_terms(inputs, scores.dtype)
    if alibi is not None:
        slopes, convention, held_in = alibi
        unit = alibi_bias(torch.ones_like(slopes[:1]), q_pos[None, :], key, convention)[0]  # [H, q]
        scores = scores + held(slopes[:, None] * unit, held_in)
    if inputs.qq_bias is not None:
        bias = new_token_bias(inputs.qq_bias, q.shape[1], case.kv_lens[i]).to(device=q.device, dtype=scores.dtype)
        scores = scores + bias.expand(key.shape[0], -1, -1).gather(-1, key[..., None])[..., 0]
    return scores


def keys_at(inputs: Inputs, i: int, key: Tensor, kv_head: Tensor) -> tuple[Tensor, Tensor]:
    """Sequence i's keys and values at (key, kv_head) index pairs, in float64: picked before widening where the
    sequence's keys are not in a cache (widening the whole sequence to pick one key a row cost a quarter of the check:
    key_changes over 85 drawn unpacked cases, one CPU thread, 1.38 -> 1.03 s)."""
    if inputs.cache is None:
        return widen(inputs.keys[i][key, kv_head]), widen(inputs.values[i][key, kv_head])
    k, v = sequence_kv(inputs, i, torch.float64)
    return k[key, kv_head], v[key, kv_head]


def key_changes(inputs: Inputs, expected: Expected,
                transform: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    """(max |O' - O| over every row and element, whether any row's mask changed), both 0-dim on the oracle's device,
    where O' is attention under transform(mask) (at most one key added or dropped per row) and O = expected."""
    case = inputs.case
    dev = expected.output.device
    query = query_for_oracle(inputs, torch.float64)
    masks, positions = sequence_masks(case, dev)
    heads = case.num_heads
    kv_head = torch.arange(heads, device=dev) // (heads // case.num_kv_heads)
    worst = torch.zeros((), dtype=torch.float64, device=dev)
    changed = torch.zeros((), dtype=torch.bool, device=dev)
    redo: list[tuple[int, Tensor, Tensor]] = []  # (sequence, its moved mask, rows to attend again [H, q])
    for i, seq in enumerate(case.sequences):
        start, end = case.query_starts[i], case.query_starts[i + 1]
        mask = masks[i]
        moved = transform(mask)
        if mask.numel() == 0:
            continue
        flip = (moved != mask).expand(heads, -1, -1)  # [H, q, k]: at most one key per row
        rows = flip.any(-1)
        key = flip.to(torch.uint8).argmax(-1)  # [H, q]: the key that changed (0 where none did)
        added = moved.expand(heads, -1, -1).gather(-1, key[..., None])[..., 0] & rows
        k_j, v_j = keys_at(inputs, i, key, kv_head[:, None])  # [H, q, D], [H, q, D_v]
        s = pair_scores(inputs, i, query[start:end].transpose(0, 1), k_j, key, positions[i])
        out, lse = expected.output[start:end].transpose(0, 1), expected.lse[start:end].transpose(0, 1)
        w = torch.exp(s - lse)
        factor = torch.where(added, torch.sigmoid(s - lse), -w / (1 - w))
        exact = rows & ~added & (1 - w < EXACT_BELOW)
        delta = (factor[..., None] * (v_j - out)).abs().amax(-1) if out.shape[-1] else torch.zeros_like(s)
        seen = rows & ~exact
        worst = torch.maximum(worst, torch.where(seen, delta, 0.0).amax())
        changed |= rows.any()
        redo.append((i, moved, exact))
    if redo:
        flags = torch.stack([exact.any() for _, _, exact in redo]).cpu()  # one read for the whole case
        for (i, moved, exact), again in zip(redo, flags.tolist()):
            if again:
                worst = torch.maximum(worst, _attend_again(inputs, expected, query, i, moved, exact.any(0).cpu(),
                                                           positions[i]))
    return worst, changed


def _attend_again(inputs: Inputs, expected: Expected, query: Tensor, i: int, moved: Tensor, queries: Tensor,
                  q_pos: Tensor) -> Tensor:
    """max |O' - O| over the chosen queries of sequence i (`queries` [q] bool, on the host), attended again under the
    moved mask by the oracle's own per-sequence pass."""
    case = inputs.case
    start = case.query_starts[i]
    picked = transfer.move(queries.nonzero().flatten(), query.device)
    k, v = sequence_kv(inputs, i, torch.float64)
    bias = None
    if inputs.qq_bias is not None:
        bias = new_token_bias(inputs.qq_bias, case.sequences[i].query_len, k.shape[0]).to(query.device, torch.float64)
        bias = bias[picked]
    out, _ = attend_sequence(
        query[start:][picked], k, v, moved[:, picked], scale=case.softmax_scale, q_pos=q_pos[picked],
        alibi=alibi_terms(inputs, torch.float64),
        soft_cap=case.soft_cap, sink=None if inputs.sinks is None else inputs.sinks.to(torch.float64), bias=bias)
    return (out - expected.output[start:][picked]).abs().amax() if out.numel() else out.new_zeros(())
