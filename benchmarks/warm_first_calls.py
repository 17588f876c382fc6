"""What a warm JIT campaign's first calls were: loads of modules its caches held, or builds of modules no earlier run
drew. A row's `compile_s` is its worker's first call of a JIT unit (`jit_unit`: the compile key or the finer variant);
a call over `--build` seconds built the module, a shorter one loaded it.

    python benchmarks/warm_first_calls.py WARM_RESULTS [--cold COLD_RESULTS] [--build 1.0]

Prints, per backend, the first calls that loaded and those that built, with their seconds and, given the cold run's
results, how many of the built units the cold run had run at all (a unit it ran is in the caches the warm run reads).
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from campaign.store import read_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warm", type=Path)
    ap.add_argument("--cold", type=Path)
    ap.add_argument("--build", type=float, default=1.0, help="a first call longer than this built its module")
    a = ap.parse_args()
    warm = read_rows(a.warm)
    cold_units = {(r["backend"], r.get("jit_unit")) for r in read_rows(a.cold)} if a.cold else None
    first = collections.defaultdict(list)
    for r in warm:
        if r.get("compile_s"):
            first[r["backend"]].append(r)
    print("| backend | loads | load seconds | builds | build seconds | builds of units the cold run ran |")
    print("|---|---|---|---|---|---|")
    for backend, calls in sorted(first.items()):
        loads = [r["compile_s"] for r in calls if r["compile_s"] <= a.build]
        builds = [r for r in calls if r["compile_s"] > a.build]
        seen = "–" if cold_units is None else str(sum((backend, r.get("jit_unit")) in cold_units for r in builds))
        print(f"| {backend} | {len(loads)} | {sum(loads):.1f} | {len(builds)} | "
              f"{sum(r['compile_s'] for r in builds):.0f} | {seen} |")


if __name__ == "__main__":
    main()
