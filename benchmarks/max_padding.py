"""How much padding the packed oracle may add before the per-sequence path is cheaper: one evaluation's time by
`reference.packed.MAX_PADDING`, on the host, over the same drawn cases.

Usage: python benchmarks/max_padding.py [--backend torch-sdpa-math ...] [--examples 400] [--tiers small]
       [--limits 2,4,8,1e9] [--rounds 3]

For each backend the cases are drawn once (`fuzz.sampling.sample_cases`), then every case is evaluated under each
limit in turn, the limits' order rotating from round to round, on one CPU thread, as a campaign worker does. Prints,
in Markdown, per limit: the cases packed, the whole evaluation's milliseconds a case (best round), the oracle + compare
milliseconds of the cases the limit packs that the first limit does not (over those cases), and the rows whose verdict
or symptoms differ from the first limit's (the packed pass is property-tested against the per-sequence one:
tests/reference/test_packed.py).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402
from reference import packed  # noqa: E402
from reference.inputs import materialize  # noqa: E402


def verdicts(rows: list[dict]) -> list[tuple]:
    return [(r["verdict"], tuple(r.get("symptoms") or ())) for r in rows]


def run(backend, drawn: list, limit: float) -> tuple[float, list[dict]]:
    packed.MAX_PADDING = limit
    start = time.perf_counter()
    rows = [evaluate(backend, case).row for case in drawn]
    return time.perf_counter() - start, rows


def packed_under(inputs: list, limit: float) -> list[bool]:
    packed.MAX_PADDING = limit
    return [packed.packable(i) for i in inputs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append", default=None)
    ap.add_argument("--examples", type=int, default=400)
    ap.add_argument("--tiers", default="small")
    ap.add_argument("--limits", default="2,4,8,1e9")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    limits = [float(x) for x in a.limits.split(",")]
    print("| backend | tiers | MAX_PADDING | cases packed | ms a case (best round) | ratio to the first | newly packed "
          "cases | their oracle + compare ms, first limit -> this | rows judged otherwise |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in a.backend or ["torch-sdpa-math"]:
        backend = get(name)
        drawn = sample_cases(backend.caps, Limits(tiers=tuple(a.tiers.split(","))), a.examples)
        evaluate(backend, drawn[0])  # first-call costs out of the figures
        best = {x: float("inf") for x in limits}
        rows = {}
        for r in range(a.rounds):
            for x in limits[r % len(limits):] + limits[:r % len(limits)]:
                seconds, rows[x] = run(backend, drawn, x)
                best[x] = min(best[x], seconds)
        first = limits[0]
        inputs = [materialize(c) for c in drawn]
        before = packed_under(inputs, first)
        for x in limits:
            now = packed_under(inputs, x)
            new = [j for j, (n, b) in enumerate(zip(now, before)) if n and not b]

            def part(rs: list[dict]) -> float:  # mean oracle + compare ms over the newly packed cases
                return sum(rs[j]["oracle_s"] + rs[j]["compare_s"] for j in new) / max(len(new), 1) * 1e3

            differ = sum(v != w for v, w in zip(verdicts(rows[x]), verdicts(rows[first])))
            print(f"| {name} | {a.tiers} | {x:g} | {sum(now)} / {len(drawn)} | {best[x] / len(drawn) * 1e3:.2f} | "
                  f"{best[x] / best[first]:.2f}x | {len(new)} | {part(rows[first]):.2f} -> {part(rows[x]):.2f} | {differ} |")
    packed.MAX_PADDING = limits[0]


if __name__ == "__main__":
    main()
