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


ALIGN = 256  # bytes: every view starts where cudaMalloc would start a tensor (kernels' alignment assumptions)
MAX_BYTES = 64 << 20  # larger batches move tensor by tensor: the extra host copy would cost more than it saves


def _dense(t: Tensor) -> bool:
    """Whether t's elements fill one block of memory without gaps or overlaps, in whatever order its strides say (read
    off its sizes and strides: no tensor operation). Such a tensor is its block's bytes, and comes back as a view of
    them with its own strides."""
    span = 1
    for size, stride in sorted((d for d in zip(t.shape, t.stride()) if d[0] != 1), key=lambda d: d[1]):
        if stride != span:
            return False
        span *= size
    return True


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
    they fit). Each dense tensor is copied into, and comes back as, one `as_strided` view of the buffer read as its
    dtype, one operation each way: a small case's dozen tensors took some 110 operations, 60 of them views."""
    plans, total = [], 0
    for t in tensors:
        if t.numel() and not _dense(t):
            plans.append(None)
            continue
        plans.append(total)  # an empty tensor is a view of no bytes
        total += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
    if total > MAX_BYTES or total == 0:
        return [t.to(device) for t in tensors]
    source = tensors[0].device  # the staging buffer lives beside the tensors: from a GPU its fills are kernels
    staging = torch.empty(total, dtype=torch.uint8, device=source, pin_memory=_page_locked(source, device))
    views = _Views(staging)
    for t, start in zip(tensors, plans):
        if start is not None and t.numel():
            views.of(t, start).copy_(t)
    buffer = _Views(staging.to(device, non_blocking=_page_locked(source, device)))  # the host's buffer: this call's own
    return [move(t, device) if start is None else buffer.of(t, start) for t, start in zip(tensors, plans)]


class _Views:
    """A byte buffer read as each dtype once (every start is ALIGN-aligned, so every dtype's elements tile it)."""

    def __init__(self, buffer: Tensor) -> None:
        self.buffer, self.typed = buffer, {}

    def of(self, t: Tensor, start: int) -> Tensor:
        """The view from byte `start` with t's dtype, shape and strides: t's elements at the same places of its block."""
        typed = self.typed.get(t.dtype)
        if typed is None:
            typed = self.typed[t.dtype] = self.buffer.view(t.dtype)
        return typed.as_strided(t.shape, t.stride(), start // t.element_size())
