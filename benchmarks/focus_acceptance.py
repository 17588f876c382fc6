"""How many of a focused shard's draws are of its compile key: a campaign focuses two of every three shards of a JIT
backend on one key a worker has loaded (campaign.scheduler), drawing from `fuzz.compile_keys.key_limits` and keeping
the cases of that key; a draw of another key is generation time spent for no row.

For each backend, a sample of its declared keys (every k-th), `--draws` generated cases each (hypothesis, generate
phase only): the share kept, and the seconds per kept case on this machine.

Usage: python benchmarks/focus_acceptance.py [--backend NAME ...] [--keys 24] [--draws 100]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.registry import get  # noqa: E402
from campaign.compiles import key_text  # noqa: E402
from campaign.declarations import compile_keys  # noqa: E402
from fuzz.strategies import Limits, cases, compile_key, key_limits  # noqa: E402

BACKENDS = ("flashinfer-decode", "flashinfer-prefill-fa2", "fa4-varlen", "fa4-paged", "vllm-triton-unified")


def kept_share(backend, key: str, draws: int) -> tuple[float, float]:
    """(share of draws of `key`, seconds per kept draw)."""
    per, keyed = backend.compiled_per, backend.compiled_features
    strategy = cases(backend.caps, key_limits(backend.caps, Limits(), per, keyed, json.loads(key)))
    n = {"all": 0, "kept": 0}

    @settings(max_examples=draws, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(case):
        n["all"] += 1
        n["kept"] += key_text(compile_key(case, per, keyed)) == key

    started = time.perf_counter()
    draw()
    return n["kept"] / max(n["all"], 1), (time.perf_counter() - started) / max(n["kept"], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append")
    ap.add_argument("--keys", type=int, default=24, help="keys sampled per backend")
    ap.add_argument("--draws", type=int, default=100)
    a = ap.parse_args()
    print("| backend | keys declared | keys sampled | kept share: median | min | ms per kept case (median) |")
    print("|---|---|---|---|---|---|")
    for name in a.backend or BACKENDS:
        backend = get(name)
        keys = compile_keys(backend)
        sample = keys[::max(1, len(keys) // a.keys)][:a.keys]
        shares, costs = zip(*(kept_share(backend, k, a.draws) for k in sample))
        print(f"| {name} | {len(keys)} | {len(sample)} | {statistics.median(shares):.2f} | {min(shares):.2f} | "
              f"{1000 * statistics.median(costs):.1f} |")


if __name__ == "__main__":
    main()
