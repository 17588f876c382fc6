"""What autograd's bookkeeping costs an evaluation: `fuzz.compare.evaluate` runs under `torch.inference_mode()`; this
times the same drawn cases evaluated inside it and outside it, in alternating rounds of one process, and prints the
ratio of process time per pair (the 2-core CPU box is noisy: read the median, not one round).

Usage: python benchmarks/grad_mode.py [--backend torch-sdpa-math] [--examples 150] [--tiers small] [--rounds 12]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

from backends.registry import get
from benchmarks.profile_evaluate import draw
from fuzz.compare import ORACLE_CPU_MAX, _evaluate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="torch-sdpa-math")
    ap.add_argument("--examples", type=int, default=150)
    ap.add_argument("--tiers", default="small")
    ap.add_argument("--rounds", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(1)
    backend = get(a.backend)
    drawn = draw(backend, a.examples, a.tiers.split(","))

    def per_example(mode) -> float:
        started = time.process_time()
        with mode():
            for case in drawn:
                _evaluate(backend, case, None, True, ORACLE_CPU_MAX, None, True)
        return (time.process_time() - started) / len(drawn) * 1e3

    per_example(contextlib.nullcontext), per_example(torch.inference_mode)  # first-call costs out of the figures
    pairs = [(per_example(torch.inference_mode), per_example(contextlib.nullcontext)) for _ in range(a.rounds)]
    ratios = [inside / outside for inside, outside in pairs]
    print(f"| {a.backend} | {a.tiers} | {len(drawn)} | {statistics.median(p[0] for p in pairs):.2f} | "
          f"{statistics.median(p[1] for p in pairs):.2f} | {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f}) |")


if __name__ == "__main__":
    main()
