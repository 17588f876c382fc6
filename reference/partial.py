"""Partial attention states: one sequence's queries over a subset of its keys, mergeable by LSE.

The composites (cascade, context parallelism, batch splits) are built from these. A partial state
never includes the sink: the sink joins the softmax once, after every partial state is merged.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .attention import Expected, add_sink, alibi_terms, attend_sequence, new_token_bias, query_for_oracle
from .inputs import Inputs
from .merge import merge_attn_states


def sequence_queries(inputs: Inputs, i: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Query rows [query_len, H, D] of sequence i, as the kernel sees them (fp8-dequantized if so)."""
    start, end = inputs.case.query_starts[i], inputs.case.query_starts[i + 1]
    return query_for_oracle(inputs, dtype)[start:end]


def partial_state(inputs: Inputs, i: int, k: Tensor, v: Tensor, visible: Tensor, q_pos: Tensor,
                  k_pos: Tensor) -> tuple[Tensor, Tensor]:
    """(output, lse) of sequence i's queries over keys k/v at positions k_pos, under mask `visible`."""
    case = inputs.case
    alibi = alibi_terms(inputs, torch.float64)
    bias = None
    if inputs.qq_bias is not None:  # the sequence's bias over all its keys, then the columns of these keys
        seq = case.sequences[i]
        bias = new_token_bias(inputs.qq_bias.to(torch.float64), seq.query_len, case.kv_lens[i])[:, k_pos.cpu()]
    return attend_sequence(sequence_queries(inputs, i), k.to(torch.float64), v.to(torch.float64), visible,
                           scale=case.softmax_scale, q_pos=q_pos, k_pos=k_pos, alibi=alibi,
                           soft_cap=case.soft_cap, sink=None, bias=None if bias is None else bias.to(k.device))


def merge_all(states: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Fold merge_attn_states over partial states of the same rows."""
    out, lse = states[0]
    for other_out, other_lse in states[1:]:
        out, lse = merge_attn_states(out, lse, other_out, other_lse)
    return out, lse


def empty_state(num_q: int, num_heads: int, dv: int) -> tuple[Tensor, Tensor]:
    """The state over no keys: output 0, LSE -inf."""
    return (torch.zeros(num_q, num_heads, dv, dtype=torch.float64),
            torch.full((num_q, num_heads), -math.inf, dtype=torch.float64))


def finish(inputs: Inputs, outs: list[Tensor], lses: list[Tensor]) -> Expected:
    """Concatenate per-sequence merged states and let the sink join once (it is in no partial state)."""
    out, lse = torch.cat(outs), torch.cat(lses)
    if inputs.sinks is not None:
        out, lse = add_sink(out, lse, inputs.sinks.to(torch.float64))
    return Expected(out, lse)
