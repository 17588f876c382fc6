"""A batch as vLLM's model runner hands it to a metadata builder (vllm 0.26.0): the order of its requests, its
token rows in that order, and the CommonAttentionMetadata the builders read."""
from __future__ import annotations

import itertools
from dataclasses import replace

import torch

from reference.inputs import Inputs


def runner_order(case, threshold: int) -> list[int]:
    """The sequence order vLLM's model runner hands a builder that splits decodes from prefills
    (`reorder_batch_to_split_decodes_and_prefills`): requests with context and at most `threshold` new tokens
    (decodes), then those with context and more (extends), then those without context (first chunks), each group
    in the case's order. The MLA builder counts on it: the chunked context's merge covers the first
    `prefill_tokens_with_context` prefill tokens only (`build_mla_chunked_context_metadata`)."""
    def region(s) -> int:
        return 2 if s.context_len == 0 else 0 if s.query_len <= threshold else 1

    return sorted(range(len(case.sequences)), key=lambda i: region(case.sequences[i]))


def token_order(case, order: list[int]) -> torch.Tensor:
    """The flat token indices of the case's sequences taken in `order` (a reordered batch's query rows)."""
    starts = case.query_starts
    return torch.cat([torch.arange(starts[i], starts[i + 1]) for i in order] or [torch.zeros(0, dtype=torch.int64)])


def common_metadata(inputs: Inputs, order: list[int] | None = None):
    """vLLM's CommonAttentionMetadata of the case's batch, its sequences in `order` (None: as drawn; the model
    runner reorders a batch for backends that split decodes from prefills)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    case, dev = inputs.case, inputs.device
    order = list(range(len(case.sequences))) if order is None else order
    seqs = [case.sequences[i] for i in order]
    pick = torch.tensor(order, dtype=torch.int64)
    qsl = torch.tensor([0, *itertools.accumulate(s.query_len for s in seqs)], dtype=torch.int32)
    seq_lens = inputs.seq_lens.to(torch.int32).cpu()[pick]
    slots = inputs.slot_mapping[: case.num_tokens]
    slots = slots[token_order(case, order).to(slots.device)]
    ranges = None if case.bidirectional_ranges is None else {
        j: list(case.bidirectional_ranges[i]) for j, i in enumerate(order) if case.bidirectional_ranges[i]}
    return CommonAttentionMetadata(
        query_start_loc=qsl.to(dev), query_start_loc_cpu=qsl, seq_lens=seq_lens.to(dev),
        num_reqs=len(seqs), num_actual_tokens=case.num_tokens,
        max_query_len=max(case.max_query_len, 1), max_seq_len=max(case.max_kv_len, 1),
        block_table_tensor=inputs.block_table[pick.to(inputs.block_table.device)].to(dev, torch.int32),
        slot_mapping=slots.to(dev), causal=True,
        seq_lens_cpu_upper_bound=seq_lens, _seq_lens_cpu=seq_lens,
        _num_computed_tokens_cpu=inputs.context_lens.to(torch.int32).cpu()[pick],
        is_prefilling=torch.tensor([s.query_len > 1 for s in seqs], device=dev),
        mm_req_doc_ranges=ranges)


def in_runner_order(inputs: Inputs, order: list[int]) -> tuple[Inputs, torch.Tensor]:
    """The step's token rows (query, new keys and values, their slots; padding rows stay last) with the sequences in
    `order`, and the flat token indices that took each row (`from_runner_order` puts a result back)."""
    case, n = inputs.case, inputs.case.num_tokens
    tokens = token_order(case, order)

    def rows(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        at = tokens.to(t.device)
        return torch.cat([t[:n][at], t[n:]])

    return replace(inputs, query=rows(inputs.query), key=rows(inputs.key), value=rows(inputs.value),
                   slot_mapping=rows(inputs.slot_mapping), query_fp8=rows(inputs.query_fp8)), tokens


def from_runner_order(t: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor | None:
    """Rows computed in runner order (the first len(tokens)) put back in the case's order; later rows kept."""
    if t is None:
        return None
    out = t.clone()
    out[tokens.to(t.device)] = t[: len(tokens)]
    return out
