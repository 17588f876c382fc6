"""A worker's freed memory kept for its next case instead of handed back to the kernel (glibc's malloc settings).

An evaluation allocates a few hundred tensors and frees them all before the next case. glibc serves allocations over
its mmap threshold (128 KiB, raised by each freed mapping up to 32 MiB) with fresh mappings, and trims the heap's free
top past twice that: the next case's tensors of the same sizes then fault their pages in again, each page zeroed by
the kernel. `keep_freed_memory` sets the mmap threshold to its largest value and the trim threshold high, so such
tensors come from the heap the last case left; a worker holds at most TRIM_BYTES of free heap beyond its peak.

Measured (benchmarks/allocator.py, benchmarks/results/throughput/allocator-cpu-h200-2026-11-28.md): on the 2-core CPU
box a small-tier case of torch-sdpa-math took 366 minor page faults with glibc's defaults and 83 kept, in 0.92x the
time; on an H200's host, campaigns of its GPU backends made 0.89-1.03x the examples/s, no gain. So a campaign sets it
on a host without GPUs only (campaign.engine).
"""
from __future__ import annotations

import ctypes
import ctypes.util

# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MMAP_BYTES = 32 << 20  # glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_BYTES = 1 << 30  # free heap top a worker keeps before it trims
TOP_PAD_BYTES = 64 << 20  # the heap grows by this much more than asked: fewer brk calls as a worker's cases grow

SETTINGS = ((M_MMAP_THRESHOLD, MMAP_BYTES), (M_TRIM_THRESHOLD, TRIM_BYTES), (M_TOP_PAD, TOP_PAD_BYTES))


def keep_freed_memory() -> str:
    """Set this process's malloc to keep freed memory (SETTINGS). Returns what it did, or why nothing: a C library
    without mallopt (macOS, musl) keeps its own behaviour, and the campaign runs as before."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as e:
        return f"malloc settings unchanged: no mallopt in the C library ({e})"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    refused = [param for param, value in SETTINGS if mallopt(param, value) != 1]
    if refused:
        return f"malloc settings partly unchanged: mallopt refused parameters {refused}"
    return f"malloc keeps freed memory: mmap threshold {MMAP_BYTES >> 20} MiB, trim threshold {TRIM_BYTES >> 20} MiB"
