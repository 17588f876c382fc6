"""Pinned shapes against free ones on the CPU stand-in for a JIT that builds per shape (vLLM's Triton kernels).

Usage: python benchmarks/shape_pins.py [--seconds 40] [--workers 2] [--rounds 2]

Runs `attnref fuzz` untold over `test-fake-jit-shapes` (declares Backend.jit_shape_per: focused shards pin head counts
and window, fuzz.shapes) and `test-fake-jit-shapes-unpinned` (the same backend without the declaration), one after the
other, alternating for --rounds, each in a fresh build folder (tests/campaign/fake_jit.py: a build of a new shape
sleeps SHAPE_COMPILE_S in the process that first runs it). Prints, per run, rows/s and the builds per 100 rows, in
Markdown; the ratio of the medians last.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jit_standin import standin_campaign  # noqa: E402
PAIR = ("test-fake-jit-shapes", "test-fake-jit-shapes-unpinned")


def run(backend: str, seconds: int, workers: int, seed: int) -> dict:
    with standin_campaign(ROOT, [backend], seconds, workers, seed) as tmp:
        rows = [json.loads(line) for line in (tmp / "out" / "rows.jsonl").read_text().splitlines() if line.strip()]
        generated = sorted(r["t"] for r in rows if r.get("phase") == "generate")
        builds = (tmp / "shapes.log").read_text().count("\n") if (tmp / "shapes.log").exists() else 0
    rate = (len(generated) - 1) / (generated[-1] - generated[0]) if len(generated) > 1 else 0.0
    return {"backend": backend, "rows": len(generated), "rows_s": rate, "builds": builds,
            "builds_per_100": 100 * builds / max(len(generated), 1),
            "pinned_rows": sum(1 for r in rows if r.get("shape_pins"))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    results = [run(b, a.seconds, a.workers, seed) for seed in range(a.rounds) for b in PAIR]
    print("| round | backend | rows | rows/s | shape builds | builds per 100 rows | rows of pinned shards |")
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(results):
        print(f"| {i // 2 + 1} | {r['backend']} | {r['rows']} | {r['rows_s']:.1f} | {r['builds']} | "
              f"{r['builds_per_100']:.1f} | {r['pinned_rows']} |")
    med = {b: statistics.median(r["rows_s"] for r in results if r["backend"] == b) for b in PAIR}
    print(f"\nmedian rows/s pinned / unpinned: {med[PAIR[0]]:.1f} / {med[PAIR[1]]:.1f} = "
          f"{med[PAIR[0]] / max(med[PAIR[1]], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
