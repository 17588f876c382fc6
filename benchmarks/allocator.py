"""A worker's evaluation with glibc's default malloc against `campaign.allocator.keep_freed_memory`, in alternating
processes: milliseconds and minor page faults per case, by part of the evaluation.

Usage: python benchmarks/allocator.py [--backend torch-sdpa-math] [--tiers small] [--examples 300] [--pairs 6]

Each process draws the same derandomized cases (hypothesis' generation is not timed), evaluates the first once
(imports, first calls), then all of them on one thread, as a campaign worker does, and reports its process time and
minor page faults over the loop. Pairs alternate (default first, then kept), so the box's drift falls on both.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("materialize_s", "oracle_s", "kernel_s", "compare_s")


def child(backend_name: str, tiers: list[str], examples: int, keep: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    from backends.registry import get
    from campaign.allocator import keep_freed_memory
    from fuzz.compare import evaluate
    from profile_evaluate import draw

    torch.set_num_threads(1)
    said = keep_freed_memory() if keep else "glibc's defaults"
    backend = get(backend_name)
    drawn = draw(backend, examples, tiers)
    evaluate(backend, drawn[0])
    faults, started = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
    rows = [evaluate(backend, case).row for case in drawn]
    seconds = time.process_time() - started
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    parts = {p: 1000 * sum(r.get(p) or 0.0 for r in rows) / len(rows) for p in PARTS}
    return {"malloc": said, "cases": len(rows), "ms": 1000 * seconds / len(rows), "faults": faults / len(rows), **parts}


def run(args: argparse.Namespace, keep: bool) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "--backend", args.backend, "--tiers", args.tiers,
                          "--examples", str(args.examples), *(["--keep"] if keep else [])],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="torch-sdpa-math")
    ap.add_argument("--tiers", default="small", help="comma-separated size tiers")
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.backend, a.tiers.split(","), a.examples, a.keep)))
        return
    print(f"{a.backend}, tiers {a.tiers}, {a.examples} cases a process, {a.pairs} pairs (default, then kept)\n")
    print("| pair | malloc | ms a case | minor faults a case | materialize | oracle | kernel | compare |")
    print("|---|---|---|---|---|---|---|---|")
    results: dict[bool, list[dict]] = {False: [], True: []}
    for pair in range(1, a.pairs + 1):
        for keep in (False, True):
            r = run(a, keep)
            results[keep].append(r)
            print(f"| {pair} | {'kept' if keep else 'default'} | {r['ms']:.2f} | {r['faults']:.0f} | "
                  + " | ".join(f"{r[p]:.2f}" for p in PARTS) + " |", flush=True)
    ratios = [k["ms"] / d["ms"] for d, k in zip(results[False], results[True])]
    print(f"\nkept / default, ms a case, pair by pair: median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")
    for keep in (False, True):
        rs = results[keep]
        print(f"{'kept' if keep else 'default'}: median {statistics.median(r['ms'] for r in rs):.2f} ms, "
              f"{statistics.median(r['faults'] for r in rs):.0f} faults a case; "
              + ", ".join(f"{p[:-2]} {statistics.median(r[p] for r in rs):.2f}" for p in PARTS)
              + f" ms ({rs[0]['malloc']})")


if __name__ == "__main__":
    main()
