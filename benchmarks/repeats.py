"""How many of a campaign's generated examples repeat a case another shard drew (work spent twice).

Draws the first `--per` counted examples of `--shards` generation shards, as campaign workers do (shard seeds, the
fixed-prefix filter, the per-shard repeat filter, hypothesis' settings), without running any kernel, and reports
the share of cases drawn by more than one shard: with the fixed-prefix filter, and without it (skip nothing) in
the same run. With `--focus` every shard draws from the backend's first compile slice of a bf16 / head-128 focus,
the narrow strategies of the GPU campaigns (where the 2026-11-24 FA4 / flex / xformers run measured 2.0-3.6 % repeats).

Usage: python benchmarks/repeats.py [--backend B ...] [--shards 20] [--per 100] [--focus]
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

from hypothesis import Phase, given, seed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from backends.registry import get  # noqa: E402
from campaign.tasks import shard_seed  # noqa: E402
from campaign.drawing import Fresh, fixed_prefix, hypothesis_settings, pin_hypothesis_constants  # noqa: E402
from fuzz.strategies import Limits, cases, compile_slices  # noqa: E402

FOCUS = Limits(dtypes=("bfloat16",), head_sizes=(128,))


def repeat_share(strategy, name: str, skip: frozenset[str], shards: int, per: int) -> tuple[float, int]:
    """(share of drawn cases that another shard drew too, the most shards one case appeared in)."""
    counts: collections.Counter[str] = collections.Counter()
    for j in range(1, shards + 1):
        fresh, drawn = Fresh(skip), []

        def one(case) -> None:
            if len(drawn) < per and fresh(case):
                drawn.append(case.to_json())

        hypothesis_settings(fresh.budget(per), [Phase.generate])(seed(shard_seed(0, name, j))(given(strategy)(one)))()
        counts.update(drawn)
    total = sum(counts.values())
    return (total - len(counts)) / max(total, 1), max(counts.values(), default=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append", default=None)
    ap.add_argument("--shards", type=int, default=20)
    ap.add_argument("--per", type=int, default=100, help="examples per shard (a campaign's default is 100)")
    ap.add_argument("--focus", action="store_true", help="draw from the first compile slice of a bf16 / head-128 focus")
    a = ap.parse_args()
    pin_hypothesis_constants()
    print("| backend | strategy | fixed prefix | calibration s | repeats with prefix | repeats without | most shards |")
    print("|---|---|---|---|---|---|---|")
    for name in a.backend or ["torch-naive-paged", "flex-compiled"]:
        backend = get(name)
        limits = FOCUS if a.focus else Limits()
        slice0 = compile_slices(backend.caps, limits, backend.compiled_per, backend.compiled_features)[0]
        strategy = cases(backend.caps, slice0)
        t0 = time.perf_counter()
        prefix = fixed_prefix(strategy)
        calibration = time.perf_counter() - t0
        with_prefix, most = repeat_share(strategy, name, prefix, a.shards, a.per)
        without, _ = repeat_share(strategy, name, frozenset(), a.shards, a.per)
        print(f"| {name} | {'focus slice' if a.focus else 'whole'} | {len(prefix)} | {calibration:.2f} | "
              f"{with_prefix:.1%} | {without:.1%} | {most} of {a.shards} |")


if __name__ == "__main__":
    main()
