"""A worker keeps the memory its cases free (campaign/allocator.py): the next case's tensors do not fault their pages in
again. Measured: 366 minor page faults a small-tier case with glibc's defaults, 83 kept, 0.92x the time on the CPU
(benchmarks/results/throughput/allocator-cpu-h200-2026-11-28.md)."""
from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.allocator import keep_freed_memory

ROOT = Path(__file__).resolve().parents[2]
GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c")

# A case's pattern: tensors of sizes its shape sets, alive together, all freed before the next case.
CASES = """
import random, resource, sys, torch
if sys.argv[1] == "kept":
    from campaign.allocator import keep_freed_memory
    keep_freed_memory()
rng = random.Random(0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    tensors = [torch.ones(rng.randrange(1 << 15, 1 << 20)) for _ in range(10)]
    del tensors
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(malloc: str) -> int:
    out = subprocess.run([sys.executable, "-c", CASES, malloc], capture_output=True, text=True, check=True, cwd=ROOT)
    return int(out.stdout.strip())


@pytest.mark.skipif(not GLIBC, reason="mallopt's thresholds are glibc's; another C library keeps its own behaviour")
def test_cases_of_freed_tensors_fault_their_pages_in_once_not_per_case():
    default, kept = faults("default"), faults("kept")
    # 100 cases of up to 10 MiB each: with the defaults the heap's top is trimmed and refaulted case after case
    assert kept * 2 < default, (kept, default)


@pytest.mark.skipif(not GLIBC, reason="mallopt's thresholds are glibc's; another C library keeps its own behaviour")
def test_it_says_what_it_set():
    assert keep_freed_memory().startswith("malloc keeps freed memory: mmap threshold 32 MiB")


def test_the_setting_travels_to_the_workers():
    from campaign.tasks import WorkerConfig

    assert WorkerConfig.from_dict(WorkerConfig(keep_freed_memory=True).to_dict()).keep_freed_memory
    assert not WorkerConfig.from_dict(WorkerConfig().to_dict()).keep_freed_memory
