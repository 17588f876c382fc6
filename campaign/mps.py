"""CUDA MPS for a campaign whose workers share one GPU (`attnref fuzz --mps`).

Each worker is its own process with its own CUDA context; without MPS the GPU time-slices between the contexts,
so a worker's small copies and syncs wait for the others' slices. Under MPS their kernels share the GPU at once:
16 workers on an H100, small tier, 1.03-1.26x the examples/s in two runs (352 -> 444 with materialize, which holds
the host-to-device copy and its sync, from 22 % to 11 % of worker time; 426 -> 465 on another machine;
benchmarks/results/throughput/harness-h100-2026-11-25.md).

Opt-in: an MPS server serves the user who started it, and CUDA programs of other users on the machine cannot use
the GPU while it runs. A daemon that is already running is used and left running; one this module starts is
stopped when the campaign ends.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from collections.abc import Iterator

CONTROL = "nvidia-cuda-mps-control"


def pipe_directory() -> str:
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")


def running() -> bool:
    """Whether an MPS control daemon answers on this user's pipe directory."""
    return os.path.exists(os.path.join(pipe_directory(), "control"))


@contextmanager
def mps_daemon(say=print) -> Iterator[str]:
    """Run the body under an MPS daemon; yields what was done ('started', 'running already' or why none)."""
    if running():
        yield "running already"
        return
    if shutil.which(CONTROL) is None:
        say(f"--mps: {CONTROL} is not on the PATH; the campaign runs without MPS")
        yield f"{CONTROL} not found"
        return
    started = subprocess.run([CONTROL, "-d"], capture_output=True, text=True, timeout=30)
    if started.returncode != 0:
        why = (started.stderr or started.stdout).strip().splitlines()[-1:] or [f"exit {started.returncode}"]
        say(f"--mps: {CONTROL} -d failed ({why[0]}); the campaign runs without MPS")
        yield f"start failed: {why[0]}"
        return
    try:
        yield "started"
    finally:
        subprocess.run([CONTROL], input="quit\n", capture_output=True, text=True, timeout=30)
