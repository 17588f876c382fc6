"""Decode-context parallelism: the cached context spread over R ranks, attended per rank, merged.

Context token at position p lives on rank (p // I) % R, at local index (p // (R I)) I + p % I, for
interleave size I (vLLM's cp_kv_cache_interleave_size). Each rank attends every query over its
local context keys; the new tokens' own keys form one more partial state; all merge by LSE.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .attention import Expected, sequence_kv
from .case import AttentionType
from .inputs import Inputs
from .partial import finish, merge_all, partial_state
from .visibility import query_positions, visible


def dcp_owner(position: Tensor, world: int, interleave: int) -> Tensor:
    """Rank that stores each context position."""
    return torch.div(position, interleave, rounding_mode="floor") % world


def dcp_global_position(local: Tensor, rank: int, world: int, interleave: int) -> Tensor:
    """Sequence position of a rank's local index: whole rounds of R*I tokens, then this rank's slot."""
    rounds = torch.div(local, interleave, rounding_mode="floor")
    return rounds * world * interleave + rank * interleave + local % interleave


def dcp_local_seq_lens(seq_lens: Tensor, world: int, rank: int, interleave: int) -> Tensor:
    """Context tokens rank `rank` holds for each length (vLLM's get_dcp_local_seq_lens arithmetic):
    every full round of R*I tokens gives each rank I; the remainder fills ranks in order, I at a time."""
    per_round = world * interleave
    base = torch.div(seq_lens, per_round, rounding_mode="floor") * interleave
    remainder = seq_lens - base * world
    return base + (remainder - rank * interleave).clamp(0, interleave)


def dcp_attention(inputs: Inputs, world: int, interleave: int = 1) -> Expected:
    """Attention of a decoder batch with its context split over `world` simulated ranks."""
    case = inputs.case
    if case.attn_type != AttentionType.DECODER:
        raise ValueError(f"attn_type={case.attn_type.value}: DCP splits a decoder's cached context")
    if world < 1 or interleave < 1:
        raise ValueError(f"world={world}, interleave={interleave}: both must be >= 1")
    context_lens = inputs.context_lens.to(torch.int64)
    outs, lses = [], []
    for i, seq in enumerate(case.sequences):
        k_all, v_all = sequence_kv(inputs, i, torch.float64)
        mask = visible(case, seq, i)
        q_pos = query_positions(case, seq)
        states = []
        for rank in range(world):
            n_local = int(dcp_local_seq_lens(context_lens[i:i + 1], world, rank, interleave)[0])
            pos = dcp_global_position(torch.arange(n_local), rank, world, interleave)
            # The rank's local cache holds exactly these keys, in local order.
            states.append(partial_state(inputs, i, k_all[pos], v_all[pos], mask[:, :, pos], q_pos, pos))
        new = torch.arange(seq.context_len, seq.context_len + seq.query_len)
        states.append(partial_state(inputs, i, k_all[new], v_all[new], mask[:, :, new], q_pos, new))
        out, lse = merge_all(states)
        outs.append(out)
        lses.append(lse)
    return finish(inputs, outs, lses)
