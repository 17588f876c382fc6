"""Moves of many small tensors between the host and a device in one copy.

A case's inputs are a dozen to a few dozen small tensors (the query, each sequence's keys and values, offsets,
the cache and its scales). Moved one by one, each is a synchronous copy; on a GPU time-sliced between a
campaign's 16 worker processes each such copy can wait for the other processes' turn, and materialization was a
quarter of worker time there against a tenth on the CPU alone (benchmarks/results/throughput/). Here every
tensor's bytes go into one host buffer, cross in one copy, and come back as views with the same shapes,
strides and dtypes. The same holds the other way: a case judged on the host after its oracle ran on the GPU
brings its outputs back in one copy.

From the host to a GPU the copy leaves from page-locked memory and the host does not wait for it: a copy from
pageable memory is a synchronisation, 3.5-3.9 of the 10.7-13.6 a case whose oracle ran on the GPU made (6.1-8.7
without them, the examples/s within the machine's spread:
benchmarks/results/throughput/harness-async-copies-h200-2026-11-27.md). Work queued after it on the same stream (the
oracle, the kernel) runs after it; `fuzz.compare.evaluate` waits for an event recorded after it before the kernel's
call, so a kernel on a stream of its own reads whole inputs too, and a host oracle computes while it crosses.
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


def _page_locked(source: torch.device, device: torch.device) -> bool:
    return source.type == "cpu" and device.type == "cuda"


def move(t: Tensor, device: torch.device) -> Tensor:
    """t on `device`; from the host to a GPU through page-locked memory, without waiting (up to MAX_BYTES)."""
    device = torch.device(device)
    if _page_locked(t.device, device) and t.is_contiguous() and t.numel() * t.element_size() <= MAX_BYTES:
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


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
    staging = torch.empty(total, dtype=torch.uint8, device=source, pin_memory=_page_locked(source, device))
    for t, plan in zip(tensors, plans):
        if plan is not None and plan[2]:
            order, start, nbytes = plan
            staging[start:start + nbytes].copy_(t.permute(order).reshape(-1).view(torch.uint8))
    buffer = staging.to(device, non_blocking=_page_locked(source, device))  # the host's buffer is this call's own
    moved = []
    for t, plan in zip(tensors, plans):
        if plan is None:
            moved.append(move(t, device))
            continue
        order, start, nbytes = plan
        shape = tuple(t.shape[d] for d in order)
        view = buffer[start:start + nbytes].view(t.dtype).view(shape)
        moved.append(view.permute(inverse_permutation(order)))
    return moved
