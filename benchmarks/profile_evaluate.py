"""Where one evaluation's time goes, call by call: cProfile over `fuzz.compare.evaluate` of drawn cases.

Usage: python benchmarks/profile_evaluate.py [--backend torch-sdpa-math] [--examples 300] [--tiers small,tile,long]
       [--threads 1] [--top 25] [--sort cumulative|tottime] [--chunked]

Cases are drawn first (hypothesis' generation is not timed), then evaluated in one process on one thread, as a
campaign worker does. Prints examples/s, the row timers' split (materialize / oracle + baseline / kernel /
compare = judge + blind check) and the functions with the most cumulative time, in Markdown.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from backends.registry import get
from fuzz.compare import evaluate
from fuzz.sampling import sample_cases
from fuzz.strategies import Limits

PARTS = ("materialize_s", "oracle_s", "kernel_s", "compare_s")


def draw(backend, n: int, tiers: list[str] | None) -> list:
    return sample_cases(backend.caps, Limits(tiers=tuple(tiers)) if tiers else Limits(), n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="torch-sdpa-math")
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--tiers", default=None, help="comma-separated size tiers (default: the campaign's)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sort", default="cumulative", help="pstats' order: cumulative, or tottime for own time")
    ap.add_argument("--chunked", action="store_true", help="the chunked per-sequence oracle only (no packed pass)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    backend = get(a.backend)
    drawn = draw(backend, a.examples, a.tiers.split(",") if a.tiers else None)
    evaluate(backend, drawn[0], packed=not a.chunked)  # first-call costs (imports, allocator) out of the figures
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    rows = [evaluate(backend, case, packed=not a.chunked).row for case in drawn]
    profile.disable()
    elapsed = time.perf_counter() - t0
    print(f"## {a.backend}: {len(rows)} examples in {elapsed:.2f} s = {len(rows) / elapsed:.1f} examples/s "
          f"({a.threads} thread{'s' if a.threads > 1 else ''}, tiers {a.tiers or 'default'})\n")
    print("| " + " | ".join(p.removesuffix("_s") for p in PARTS) + " | rest |")
    print("|" + "---|" * (len(PARTS) + 1))
    shares = [sum(r.get(p) or 0.0 for r in rows) / elapsed for p in PARTS]
    print("| " + " | ".join(f"{100 * s:.0f} %" for s in shares) + f" | {100 * (1 - sum(shares)):.0f} % |\n")
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats(a.sort).print_stats(a.top)
    print("```")
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip() and "{" not in line[:8])[:6000])
    print("```")


if __name__ == "__main__":
    main()
