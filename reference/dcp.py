"""Decode-context parallelism: the cached context spread over R ranks, attended per rank, merged.

Context token at position p lives on rank (p // I) % R, at local index (p // (R I)) I + p % I, for
interleave size I (vLLM's cp_kv_cache_interleave_size). Two compositions, both equal to attention:
- `dcp_attention` (vLLM's FlashAttention `_forward_with_dcp`): each rank attends every query over its
  local context keys; the new tokens' own keys form one more partial state; all merge by LSE.
- `cp_attention` (FA3's `cp_world_size` / `cp_rank` / `cp_tot_seqused_k`, as vLLM's MLA decode calls
  it): every key of the sequence, new tokens included, lives on the ranks; each rank masks its local
  keys at their sequence positions; the ranks' states merge by LSE.
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


def rank_positions(length: int, world: int, rank: int, interleave: int) -> Tensor:
    """Sequence positions of the keys rank `rank` stores, in its local order, for a sequence of `length` keys."""
    n_local = int(dcp_local_seq_lens(torch.tensor([length]), world, rank, interleave)[0])
    return dcp_global_position(torch.arange(n_local), rank, world, interleave)


def _ranks_merged(inputs: Inputs, world: int, interleave: int, spread: str) -> Expected:
    """Each sequence's keys on `world` ranks (the `spread` ones; the rest as one local state), merged by LSE."""
    case = inputs.case
    if world < 1 or interleave < 1:
        raise ValueError(f"world={world}, interleave={interleave}: both must be >= 1")
    outs, lses = [], []
    for i, seq in enumerate(case.sequences):
        k_all, v_all = sequence_kv(inputs, i, torch.float64)
        mask = visible(case, seq, i)
        q_pos = query_positions(case, seq)
        on_ranks = seq.context_len if spread == "context" else k_all.shape[0]
        groups = [rank_positions(on_ranks, world, rank, interleave) for rank in range(world)]
        groups.append(torch.arange(on_ranks, k_all.shape[0]))  # the new tokens, when only the context is spread
        # Each group's keys are attended at their sequence positions (mask columns, ALiBi, bias), in local order.
        states = [partial_state(inputs, i, k_all[pos], v_all[pos], mask[:, :, pos], q_pos, pos) for pos in groups]
        out, lse = merge_all(states)
        outs.append(out)
        lses.append(lse)
    return finish(inputs, outs, lses)


def dcp_attention(inputs: Inputs, world: int, interleave: int = 1) -> Expected:
    """Attention of a decoder batch with its cached context split over `world` simulated ranks."""
    if inputs.case.attn_type != AttentionType.DECODER:
        raise ValueError(f"attn_type={inputs.case.attn_type.value}: DCP splits a decoder's cached context")
    return _ranks_merged(inputs, world, interleave, "context")


def cp_attention(inputs: Inputs, world: int, interleave: int = 1) -> Expected:
    """Attention with every key of each sequence (new tokens included) spread over `world` simulated ranks."""
    return _ranks_merged(inputs, world, interleave, "all")
