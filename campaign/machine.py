"""How many workers this machine runs: its GPUs, the cores this process may use, GPU memory."""
from __future__ import annotations

import subprocess

from .tasks import cores as available_cores


def default_workers(gpus: int, cores: int | None = None, gpu_mem_gib: float | None = None) -> int:
    """Workers per GPU (or in all, without a GPU) for --workers auto.

    The oracle runs on CPU cores, so workers follow cores: all of them spread over the GPUs; each
    worker holds a CUDA context and its kernels' workspaces, so at most one per 4 GiB of GPU memory.
    """
    cores = cores or available_cores()
    if gpus == 0:
        return max(1, cores)
    per_gpu = max(1, cores // gpus)
    if gpu_mem_gib:
        per_gpu = min(per_gpu, max(1, int(gpu_mem_gib // 4)))
    return per_gpu


def visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def gpu_mem_gib() -> float | None:
    """GPU 0's memory from nvidia-smi (asking torch would open a CUDA context in the driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout.split()
        return float(out[0]) / 1024 if out else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
