"""How backends split a batch: decodes first, prefills after, each part run on its own.

`reorder_decodes_first` is vLLM's reorder (fewest swaps: a decode found past the decode region
swaps with the earliest prefill); `split_decodes_and_prefills` finds the boundary of a reordered
batch; `select_sequences` cuts the canonical inputs down to some sequences (same cache).
"""
from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from .inputs import Inputs


def reorder_decodes_first(query_lens: list[int], decode_threshold: int = 1) -> list[int]:
    """A permutation of the batch putting every sequence with query_len <= threshold first."""
    order = list(range(len(query_lens)))
    decodes = [i for i, n in enumerate(query_lens) if n <= decode_threshold]
    prefills = [i for i, n in enumerate(query_lens) if n > decode_threshold]
    for i in range(1, min(len(decodes), len(prefills)) + 1):
        decode_at = decodes[len(decodes) - i]
        if decode_at < len(decodes):  # the remaining decodes already sit in the decode region
            break
        prefill_at = prefills[i - 1]
        order[prefill_at], order[decode_at] = order[decode_at], order[prefill_at]
    return order


def split_decodes_and_prefills(query_lens: list[int], decode_threshold: int = 1) -> tuple[int, int, int, int]:
    """(num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens) of a decodes-first batch."""
    is_prefill = [n > decode_threshold for n in query_lens]
    first = is_prefill.index(True) if any(is_prefill) else len(query_lens)
    if any(not p for p in is_prefill[first:]):
        raise ValueError(f"query_lens={query_lens}: not reordered (a decode follows a prefill)")
    return first, len(query_lens) - first, sum(query_lens[:first]), sum(query_lens[first:])


def _starts(lens: list[int]) -> Tensor:
    return torch.nn.functional.pad(torch.cumsum(torch.tensor(lens, dtype=torch.int32), 0), (1, 0)).to(torch.int32)


def select_sequences(inputs: Inputs, order: list[int]) -> Inputs:
    """The inputs of a batch made of sequences `order` of `inputs` (in that order), same cache."""
    case = inputs.case
    sub = case.select(order)

    def rows(x: Tensor | None, starts: Tensor) -> Tensor | None:
        if x is None:
            return None
        parts = [x[int(starts[i]):int(starts[i + 1])] for i in order]
        return torch.cat(parts) if parts else x[:0]

    new_starts = inputs.key_start_loc
    slot_mapping = None
    if inputs.slot_mapping is not None:
        real = inputs.slot_mapping[: int(new_starts[-1])]
        slot_mapping = rows(real, new_starts)
    pick = torch.tensor(order, dtype=torch.int64)
    return dataclasses.replace(
        inputs, case=sub,
        query=rows(inputs.query, inputs.query_start_loc),
        query_fp8=rows(inputs.query_fp8, inputs.query_start_loc),
        key=rows(inputs.key, new_starts), value=rows(inputs.value, new_starts),
        keys=tuple(inputs.keys[i] for i in order), values=tuple(inputs.values[i] for i in order),
        query_start_loc=_starts(sub.query_lens),
        key_start_loc=_starts([int(new_starts[i + 1] - new_starts[i]) for i in order]),
        seq_lens=inputs.seq_lens[pick], context_lens=inputs.context_lens[pick],
        block_table=None if inputs.block_table is None else inputs.block_table[pick],
        slot_mapping=slot_mapping)
