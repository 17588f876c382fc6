"""A shard's fresh cases with hypothesis' span mutations (as campaign workers draw) and without them, alternating in
one process. After each new example hypothesis' generation phase runs up to 5 more, each copying the choices of one
span over another span of the same label (`ConjectureRunner.generate_mutations_from`); `mutations_off` swaps that
step for nothing (internal API).

Usage: python benchmarks/draw_mutations.py [--backend fa4-paged ...] [--draws 200] [--rounds 8]

Each round draws a shard seed's first `--draws` fresh cases (`campaign.drawing.Fresh`: repeats of a case the shard drew
do not count, as in a worker) both ways, which goes first alternating, with the global PRNGs left alone as in a worker.
Prints, in Markdown, per backend and way: CPU milliseconds a fresh case (median of rounds), the draws that repeated an
earlier case, the mean sequences a case and the share of one-sequence cases, the mean query heads, the median of a
case's query x key pairs over all heads (what the oracle's work grows with), and the median of the rounds' time
ratios.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hypothesis  # noqa: E402
from hypothesis import Phase, given, seed  # noqa: E402
from hypothesis.internal.conjecture.engine import ConjectureRunner  # noqa: E402

from backends.registry import get  # noqa: E402
from campaign.drawing import Fresh, global_prngs_left_alone, hypothesis_settings  # noqa: E402
from fuzz.strategies import Limits, cases  # noqa: E402
from reference.case import Case, kv_len  # noqa: E402

DEFAULT = ("fa4-paged", "flashinfer-decode", "aten-flash-varlen", "torch-sdpa-flash")


class _Enough(Exception):
    pass


@contextlib.contextmanager
def mutations_off() -> Iterator[None]:
    mutating = ConjectureRunner.generate_mutations_from
    ConjectureRunner.generate_mutations_from = lambda runner, data: None
    try:
        yield
    finally:
        ConjectureRunner.generate_mutations_from = mutating


def pairs(case: Case) -> int:
    return case.num_heads * sum(s.query_len * kv_len(case.attn_type, s) for s in case.sequences)


def timed(strategy, shard_seed: int, draws: int, mutations: bool) -> dict:
    """CPU ms a fresh case, the draws that repeated one, and the fresh cases, of one shard seed."""
    fresh, got, calls = Fresh(frozenset()), [], [0]

    def one(case: Case) -> None:
        if len(got) >= draws:
            raise _Enough  # also on hypothesis' replay of the example that raised it
        calls[0] += 1
        if fresh(case):
            got.append(case)

    test = hypothesis_settings(fresh.budget(draws), [Phase.generate])(seed(shard_seed)(given(strategy)(one)))
    with global_prngs_left_alone(), contextlib.nullcontext() if mutations else mutations_off():
        started = time.process_time()
        try:
            test()
        except _Enough:
            pass
        spent = time.process_time() - started
    return {"ms": 1000 * spent / max(len(got), 1), "repeats": 1 - len(got) / max(calls[0], 1), "cases": got}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append")
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    print(f"hypothesis {hypothesis.__version__}, {a.draws} fresh cases a round, {a.rounds} rounds (shard seeds "
          f"1-{a.rounds})\n")
    print("| backend | span mutations | ms a fresh case | draws repeating a case | sequences a case | one-sequence "
          "cases | query heads | query x key pairs a case (median) | time ratio without / with |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in a.backend or list(DEFAULT):
        strategy = cases(get(name).caps, Limits())
        timed(strategy, 0, 50, True)  # strategy objects and imports, not counted
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for r in range(a.rounds):
            for mutations in ((True, False) if r % 2 == 0 else (False, True)):
                runs[mutations].append(timed(strategy, r + 1, a.draws, mutations))
        ratio = statistics.median(off["ms"] / on["ms"] for on, off in zip(runs[True], runs[False]))
        for mutations in (True, False):
            got = runs[mutations]
            drawn = [c for g in got for c in g["cases"]]
            print(f"| {name} | {'yes' if mutations else 'no'} | {statistics.median(g['ms'] for g in got):.2f} | "
                  f"{100 * statistics.mean(g['repeats'] for g in got):.1f} % | "
                  f"{statistics.mean(len(c.sequences) for c in drawn):.2f} | "
                  f"{100 * statistics.mean(len(c.sequences) == 1 for c in drawn):.0f} % | "
                  f"{statistics.mean(c.num_heads for c in drawn):.1f} | "
                  f"{statistics.median(pairs(c) for c in drawn):,.0f} | {'' if mutations else f'{ratio:.3f}'} |",
                  flush=True)


if __name__ == "__main__":
    main()
