"""Torch operations per evaluated case, by part: on a GPU each is a launch the campaign's workers queue for, on the CPU
each costs a few microseconds of dispatch however small its tensors.

Usage: python benchmarks/op_count.py [--cases-of aten-flash-varlen] [--tiers small] [--examples 300] [--top 8]

Draws `--cases-of`'s declared cases (`fuzz.sampling.sample_cases`), evaluates them on the CPU under a stand-in kernel
(`benchmarks/evaluate_ab.standin`: the chunked oracle in the case's dtype) and counts every operator call that reaches
torch's dispatcher (views included) while the case's inputs are materialized and moved, while the oracle and its
baseline run, and while the judge and the blind check run. Prints the mean count a case per part, views apart, and the
source lines with the most calls.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import fuzz.compare as compare  # noqa: E402
from backends.registry import get  # noqa: E402
from benchmarks.evaluate_ab import standin  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402

ROOT = str(Path(__file__).resolve().parent.parent) + "/"
PARTS = {"materialize": ("materialize", "to_device"), "oracle": ("oracle_and_baseline",),
         "compare": ("judge_in_one_read",)}


class Counting(TorchDispatchMode):
    """Counts each operator call under the part now running, by the project's source line that made it."""

    def __init__(self) -> None:
        super().__init__()
        self.part: str | None = None
        self.calls: Counter = Counter()  # (part, is a view, file:line)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.part is not None:
            frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(ROOT) and "site-packages" not in f.filename]
            where = f"{frames[-1].filename[len(ROOT):]}:{frames[-1].lineno}" if frames else "?"
            self.calls[self.part, func.is_view, where] += 1
        return func(*args, **(kwargs or {}))


def _counted(mode: Counting, part: str, fn):
    def run(*args, **kwargs):
        outer, mode.part = mode.part, part
        try:
            return fn(*args, **kwargs)
        finally:
            mode.part = outer
    return run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases-of", default="aten-flash-varlen")
    ap.add_argument("--tiers", default="small")
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(1)
    source = get(a.cases_of)
    backend = standin(source)
    drawn = [c for c in sample_cases(source.caps, Limits(tiers=tuple(a.tiers.split(","))), a.examples)
             if not backend.not_supported_reasons(c)]
    mode = Counting()
    for part, names in PARTS.items():
        for name in names:
            setattr(compare, name, _counted(mode, part, getattr(compare, name)))
    with mode:
        for case in drawn:
            compare.evaluate(backend, case)
    n = len(drawn)
    print(f"## {a.cases_of}'s cases, tiers {a.tiers}: {n} cases, torch operations a case\n")
    print("| part | operations | of them views |\n|---|---|---|")
    for part in PARTS:
        total = sum(c for (p, _, _), c in mode.calls.items() if p == part)
        views = sum(c for (p, v, _), c in mode.calls.items() if p == part and v)
        print(f"| {part} | {total / n:.1f} | {views / n:.1f} |")
    for part in PARTS:
        lines = Counter()
        for (p, _, where), c in mode.calls.items():
            if p == part:
                lines[where] += c
        print(f"\n{part}: " + ", ".join(f"{where} {c / n:.1f}" for where, c in lines.most_common(a.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
