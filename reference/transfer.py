"""Moves of many small tensors between the host and a device in one copy.

A case's inputs are a dozen to a few dozen small tensors (the query, each sequence's keys and values, offsets,
the cache and its scales). Moved one by one, each is a synchronous copy; on a GPU time-sliced between a
campaign's 16 worker processes each such copy can wait for the other processes' turn, and materialization was a
quarter of worker time there against a tenth on the CPU alone (benchmarks/results/throughput/). Here every
tensor's bytes go into one host buffer, cross in one copy, and come back as views with the same shapes,
strides and dtypes. The same holds the other way: a case judged on the host after its oracle ran on the GPU
brings its outputs back in one copy.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .layouts import inverse_permutation

ALIGN = 256  # bytes: every view starts where cudaMalloc would start a tensor (kernels' alignment assumptions)
MAX_BYTES = 64 << 20  # larger batches move tensor by tensor: the extra host copy would cost more than it saves


def _memory_order(t: Tensor) -> tuple[int, ...] | None:
    """The permutation under which `t` is contiguous (its memory order), or None when it is not dense."""
    order = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.shape[d])))
    return order if t.permute(order).is_contiguous() else None


def move_all(tensors: list[Tensor], device: torch.device) -> list[Tensor]:
    """The tensors (all on one device) on `device`, each with its shape, strides and dtype (views of one buffer where
    they fit)."""
    plans, total = [], 0
    for t in tensors:
        order = _memory_order(t) if t.numel() else tuple(range(t.dim()))
        if order is None:
            plans.append(None)
            continue
        nbytes = t.numel() * t.element_size()
        plans.append((order, total, nbytes))
        total += -(-nbytes // ALIGN) * ALIGN
    if total > MAX_BYTES or total == 0:
        return [t.to(device) for t in tensors]
    source = tensors[0].device  # the staging buffer lives beside the tensors: from a GPU its fills are kernels
    staging = torch.empty(total, dtype=torch.uint8, device=source)
    for t, plan in zip(tensors, plans):
        if plan is not None and plan[2]:
            order, start, nbytes = plan
            staging[start:start + nbytes].copy_(t.permute(order).reshape(-1).view(torch.uint8))
    buffer = staging.to(device)
    moved = []
    for t, plan in zip(tensors, plans):
        if plan is None:
            moved.append(t.to(device))
            continue
        order, start, nbytes = plan
        shape = tuple(t.shape[d] for d in order)
        view = buffer[start:start + nbytes].view(t.dtype).view(shape)
        moved.append(view.permute(inverse_permutation(order)))
    return moved
