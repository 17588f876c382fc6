"""Milliseconds per drawn case, hypothesis only: a campaign shard's draws (`campaign.drawing.early_draws`) over a
backend's whole declared space, no evaluation. The library need not be installed (its declaration is enough).

Usage: python benchmarks/draw_speed.py [--backend torch-sdpa-flash ...] [--draws 600] [--rounds 3]
       python benchmarks/draw_speed.py --base DIR [--backend B ...] [--draws 600] [--pairs 6]

With --base (another checkout, e.g. `git worktree add /tmp/base HEAD~1`) each tree draws in processes of its own,
alternating which goes first, as a worker draws (global PRNGs left alone); prints the medians and the ratios by pair.

Prints, per backend and round, CPU milliseconds per case, then the choices hypothesis makes a case (its draws of integers,
floats, booleans: what a draw's cost grows with) and its draws of strategies (each a span, nested ones included), and the
hypothesis version, in Markdown. Compare hypothesis
versions by running it under each (e.g. PYTHONPATH=DIR-OF-ANOTHER-VERSION).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import hypothesis
from hypothesis import Phase, given, seed
from hypothesis.control import current_build_context

from backends.registry import get
from campaign.drawing import Fresh, early_draws, global_prngs_left_alone, hypothesis_settings
from fuzz.strategies import Limits, cases

DEFAULT = ("torch-sdpa-flash", "aten-flash-varlen", "flashinfer-decode", "fa4-paged")


def ms_per_case(name: str, draws: int, shard_seed: int) -> float:
    strategy = cases(get(name).caps, Limits())
    started = time.process_time()
    drawn = early_draws(strategy, shard_seed, draws, Fresh(frozenset()).budget(draws))  # a shard's max_examples
    return 1000 * (time.process_time() - started) / max(len(drawn), 1)


def per_case(name: str, draws: int) -> tuple[float, float]:
    """(choices, hypothesis draws) a drawn case takes on average, in one run (deterministic counts, unlike the
    seconds): the choices in its record, and its `ConjectureData.draw` calls (internal API: each opens a span,
    validates and labels its strategy), nested ones included: what a case's drawing time grows with."""
    from hypothesis.internal.conjecture.data import ConjectureData

    choices: list[int] = []
    calls, plain = [0], ConjectureData.draw

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return plain(self, *args, **kwargs)

    def count(case) -> None:
        choices.append(len(current_build_context().data.choices))

    ConjectureData.draw = counted
    try:
        hypothesis_settings(draws, [Phase.generate])(seed(1)(given(cases(get(name).caps, Limits()))(count)))()
    finally:
        ConjectureData.draw = plain
    return sum(choices) / max(len(choices), 1), calls[0] / max(len(choices), 1)


def one_process(tree: Path, name: str, draws: int, shard_seed: int) -> float:
    """`ms_per_case` in a fresh process of this script that imports `tree`'s packages, drawing as a worker does
    (global PRNGs left alone), after 50 untimed draws."""
    done = subprocess.run([sys.executable, __file__, "--one", name, str(draws), str(shard_seed)], cwd=tree,
                          env=dict(os.environ, PYTHONPATH=str(tree)), capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def against(base: Path, names: list[str], draws: int, pairs: int) -> None:
    """This tree against `base`, a process each, alternating which goes first, a shard seed a pair."""
    here = Path(__file__).resolve().parent.parent
    print(f"this tree against {base}, {draws} draws a process, {pairs} pairs\n")
    print("| backend | this ms a case (median) | base | this / base by pair | median |")
    print("|---|---|---|---|---|")
    for name in names:
        this, other = [], []
        for p in range(pairs):
            order = [(here, this), (base, other)][:: 1 if p % 2 == 0 else -1]
            for tree, out in order:
                out.append(one_process(tree, name, draws, p + 1))
        ratios = [a / b for a, b in zip(this, other)]
        print(f"| {name} | {statistics.median(this):.2f} | {statistics.median(other):.2f} | "
              f"{', '.join(f'{r:.2f}' for r in ratios)} | **{statistics.median(ratios):.3f}** |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append")
    ap.add_argument("--draws", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another checkout: time each tree's draws in processes of their own")
    ap.add_argument("--pairs", type=int, default=6, help="with --base: processes per tree")
    ap.add_argument("--one", nargs=3, metavar=("BACKEND", "DRAWS", "SEED"), help=argparse.SUPPRESS)  # one_process
    a = ap.parse_args()
    if a.one is not None:
        name, draws, shard_seed = a.one[0], int(a.one[1]), int(a.one[2])
        ms_per_case(name, 50, 0)
        with global_prngs_left_alone():
            print(ms_per_case(name, draws, shard_seed))
        return
    names = a.backend or list(DEFAULT)
    if a.base is not None:
        against(a.base.resolve(), names, a.draws, a.pairs)
        return
    for name in names:
        ms_per_case(name, 50, 0)  # strategy objects and imports, not timed
    print(f"hypothesis {hypothesis.__version__}, {a.draws} draws a round\n")
    print("| backend | " + " | ".join(f"round {r + 1}" for r in range(a.rounds)) + " | choices a case | draws a case |")
    print("|---|" + "---|" * (a.rounds + 2))
    for name in names:
        rounds = [f"{ms_per_case(name, a.draws, r + 1):.2f}" for r in range(a.rounds)]
        choices, calls = per_case(name, a.draws)
        print(f"| {name} | " + " | ".join(rounds) + f" | {choices:.1f} | {calls:.1f} |")


if __name__ == "__main__":
    main()
