"""Where should the oracle run? Its cost on one CPU thread (what a worker has) vs on the GPU, by size.

Usage: python benchmarks/oracle_device.py [--workers 14]

For decode and prefill cases of growing size (score elements = heads x queries x keys), times the
oracle's work per example (float64 expected + the dtype baseline + the blind-check pass) on the CPU
with one thread, and on the GPU with `--workers` processes sharing it (the GPU time per example is
multiplied by nothing: concurrent processes serialise there, so one process's latency under load is
what a worker sees; measured with --workers processes busy). The crossover is the score-element
count above which fuzz.compare.ORACLE_CPU_MAX should send the oracle to the GPU.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import reference as r  # noqa: E402
from fuzz.blind import shift_by_one_key  # noqa: E402
from fuzz.compare import score_elements  # noqa: E402
from reference.attention import attention  # noqa: E402

SIZES = [(1, 64), (1, 1024), (1, 4096), (1, 16384), (16, 128), (64, 256), (128, 1024), (256, 2048), (512, 4096)]


def _case(queries: int, keys: int) -> r.Case:
    seq = r.SequenceSpec(query_len=queries, context_len=keys - queries)
    return r.Case(sequences=(seq,), num_heads=16, num_kv_heads=4, head_size=128, dtype=r.DType.BFLOAT16, seed=1)


def oracle_seconds(case: r.Case, device: str, repeat: int = 3) -> float:
    inputs = r.materialize(case, device)
    times = []
    for _ in range(repeat):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        attention(inputs)
        attention(inputs, dtype=case.dtype.torch, reorder=True)
        attention(inputs, dtype=torch.float32, mask_transform=shift_by_one_key)  # as fuzz.compare does
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _gpu_load(stop) -> None:
    """A competing worker: keeps running oracle work on the GPU until told to stop."""
    case = _case(16, 1024)
    while not stop.is_set():
        oracle_seconds(case, "cuda", repeat=1)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=14, help="processes sharing the GPU while timing it")
    a = p.parse_args()
    torch.set_num_threads(1)
    has_gpu = torch.cuda.is_available()
    stop = mp.get_context("spawn").Event()
    load = []
    if has_gpu:
        load = [mp.get_context("spawn").Process(target=_gpu_load, args=(stop,)) for _ in range(a.workers - 1)]
        for proc in load:
            proc.start()
        time.sleep(10)  # let them initialise CUDA and start
    print(f"# oracle cost per example: CPU 1 thread vs GPU shared by {a.workers} workers "
          f"({torch.cuda.get_device_name() if has_gpu else 'no GPU'}, torch {torch.__version__})")
    print("| queries x keys | score elements | CPU 1 thread (ms) | GPU, shared (ms) | cheaper |")
    print("|---|---|---|---|---|")
    try:
        for q, k in SIZES:
            case = _case(q, k)
            cpu = oracle_seconds(case, "cpu") * 1e3
            gpu = oracle_seconds(case, "cuda") * 1e3 if has_gpu else float("nan")
            print(f"| {q} x {k} | {score_elements(case):,} | {cpu:.1f} | {gpu:.1f} | "
                  f"{'CPU' if not has_gpu or cpu <= gpu else 'GPU'} |", flush=True)
    finally:
        stop.set()
        for proc in load:
            proc.join(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
