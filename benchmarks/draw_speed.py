"""Milliseconds per drawn case, hypothesis only: a campaign shard's draws (`campaign.drawing.early_draws`) over a
backend's whole declared space, no evaluation. The library need not be installed (its declaration is enough).

Usage: python benchmarks/draw_speed.py [--backend torch-sdpa-flash ...] [--draws 600] [--rounds 3]

Prints, per backend and round, CPU milliseconds per case, then the choices hypothesis makes a case (its draws of integers,
floats, booleans: what a draw's cost grows with), and the hypothesis version, in Markdown. Compare hypothesis
versions by running it under each (e.g. PYTHONPATH=DIR-OF-ANOTHER-VERSION).
"""
from __future__ import annotations

import argparse
import time

import hypothesis
from hypothesis import Phase, given, seed
from hypothesis.control import current_build_context

from backends.registry import get
from campaign.drawing import Fresh, early_draws, hypothesis_settings
from fuzz.strategies import Limits, cases

DEFAULT = ("torch-sdpa-flash", "aten-flash-varlen", "flashinfer-decode", "fa4-paged")


def ms_per_case(name: str, draws: int, shard_seed: int) -> float:
    strategy = cases(get(name).caps, Limits())
    started = time.process_time()
    drawn = early_draws(strategy, shard_seed, draws, Fresh(frozenset()).budget(draws))  # a shard's max_examples
    return 1000 * (time.process_time() - started) / max(len(drawn), 1)


def choices_per_case(name: str, draws: int) -> float:
    """The mean number of choices in a drawn case's record (a deterministic count, unlike the seconds)."""
    counts: list[int] = []

    def count(case) -> None:
        counts.append(len(current_build_context().data.choices))

    hypothesis_settings(draws, [Phase.generate])(seed(1)(given(cases(get(name).caps, Limits()))(count)))()
    return sum(counts) / max(len(counts), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append")
    ap.add_argument("--draws", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    names = a.backend or list(DEFAULT)
    for name in names:
        ms_per_case(name, 50, 0)  # strategy objects and imports, not timed
    print(f"hypothesis {hypothesis.__version__}, {a.draws} draws a round\n")
    print("| backend | " + " | ".join(f"round {r + 1}" for r in range(a.rounds)) + " | choices a case |")
    print("|---|" + "---|" * (a.rounds + 1))
    for name in names:
        rounds = [f"{ms_per_case(name, a.draws, r + 1):.2f}" for r in range(a.rounds)]
        print(f"| {name} | " + " | ".join(rounds) + f" | {choices_per_case(name, a.draws):.1f} |")


if __name__ == "__main__":
    main()
