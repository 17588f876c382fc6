"""When a campaign's generation shards that gave no row were made: per backend, its first row and the no-row shards
(tours, whole-space shards whose draws all waited, focused shards that stalled at once) binned by time.

Shards are numbered in the order the scheduler makes them (campaign.scheduler), so a shard without rows was made
before the next-numbered shard that has one; that shard's first row bounds it (the earliest first row of it and every
later shard, as a waiting case's row comes later, from another task). compile_draws.json has their counts by kind
(benchmarks/jit_campaign.py), not their times.

Usage: python tools/analysis/no-row-shards.py RESULTS_DIR [--bin 30]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def first_rows(results: Path) -> tuple[float, dict[str, dict[int, float]]]:
    """(the campaign's start, per backend: shard -> its first generated row's time from the start)."""
    started = json.loads((results / "compile_draws.json").read_text())["started"]
    first: dict[str, dict[int, float]] = collections.defaultdict(dict)
    for line in (results / "rows.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("phase") != "generate" or r.get("shard") is None:
            continue
        shards = first[r["backend"]]
        shards[r["shard"]] = min(shards.get(r["shard"], float("inf")), r["t"] - started)
    return started, first


def no_row_bins(shards: dict[int, float], step: float) -> collections.Counter:
    """No-row shards (the numbers missing between shards with rows) by the bin of the time that bounds them."""
    bound, earliest = {}, float("inf")
    for j in sorted(shards, reverse=True):
        earliest = min(earliest, shards[j])
        bound[j] = earliest
    bins: collections.Counter = collections.Counter()
    previous = 0  # shard 0 is the warm-up
    for j in sorted(shards):
        if j > previous + 1:
            bins[int(bound[j] // step) * step] += j - previous - 1
        previous = j
    return bins


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--bin", type=float, default=30.0, help="seconds per bin")
    a = p.parse_args(argv)
    _, first = first_rows(Path(a.results))
    print("| backend | first row | no-row shards by the 30-s bin that bounds them |".replace("30", f"{a.bin:g}"))
    print("|---|---|---|")
    for backend, shards in sorted(first.items()):
        bins = no_row_bins(shards, a.bin)
        text = ", ".join(f"{t:g} s: {n}" for t, n in sorted(bins.items()))
        print(f"| {backend} | {min(shards.values()):.1f} s | {text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
