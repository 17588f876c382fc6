"""Milliseconds per drawn case with hypothesis seeding the global PRNGs for each example and with them left alone
(`campaign.drawing.global_prngs_left_alone`, as campaign workers draw), alternating in one process.

Usage: python benchmarks/draw_prngs.py [--backend flashinfer-decode ...] [--draws 300] [--rounds 12]

Each round draws `--draws` cases of a shard seed both ways (which goes first alternates), so the two see the same
cases; prints the medians, the median of the rounds' ratios and whether the two drew the same cases, in Markdown.
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hypothesis  # noqa: E402

from backends.registry import get  # noqa: E402
from campaign.drawing import Fresh, early_draws, global_prngs_left_alone  # noqa: E402
from fuzz.strategies import Limits, cases  # noqa: E402

DEFAULT = ("flashinfer-decode", "fa4-paged", "aten-flash-varlen", "torch-sdpa-flash")


def timed(strategy, shard_seed: int, draws: int, left_alone: bool) -> tuple[float, str]:
    """(CPU ms a case, a digest of the cases drawn)."""
    with global_prngs_left_alone() if left_alone else nullcontext():
        started = time.process_time()
        drawn = early_draws(strategy, shard_seed, draws, Fresh(frozenset()).budget(draws))  # a shard's max_examples
        spent = time.process_time() - started
    return 1000 * spent / max(len(drawn), 1), hashlib.sha256("\n".join(drawn).encode()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append")
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=12)
    a = ap.parse_args()
    print(f"hypothesis {hypothesis.__version__}, {a.draws} draws a round, {a.rounds} rounds\n")
    print("| backend | seeded ms a case | left alone | ratio (median of rounds) | same cases |")
    print("|---|---|---|---|---|")
    for name in a.backend or list(DEFAULT):
        strategy = cases(get(name).caps, Limits())
        early_draws(strategy, 0, 50, 100)  # strategy objects and imports, not timed
        seeded, alone, same = [], [], True
        for r in range(a.rounds):
            order = (False, True) if r % 2 else (True, False)
            got = {left: timed(strategy, r + 1, a.draws, left) for left in order}
            seeded.append(got[False][0])
            alone.append(got[True][0])
            same &= got[False][1] == got[True][1]
        ratio = statistics.median(x / y for x, y in zip(alone, seeded))
        print(f"| {name} | {statistics.median(seeded):.2f} | {statistics.median(alone):.2f} | {ratio:.3f} | "
              f"{'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
