"""Run ON THE DEVICE: a few hypothesis-drawn cases per named backend, in process, printing every
non-passing verdict with its message and traceback tail, plus the adapters' notes (LSE shapes,
first-call JIT times). Quick feedback on a new adapter before a full campaign.

    python tools/gpu-probe.py --examples 12 fa4-varlen fa4-paged ...
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from backends.registry import get, listings  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from fuzz.strategies import Limits, cases  # noqa: E402


def probe(name: str, examples: int) -> None:
    backend = get(name)
    counts: collections.Counter = collections.Counter()
    shown = 0
    t0 = time.perf_counter()

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(cases(backend.caps, Limits(max_sequences=3, max_context=70, max_query=12)))
    def one(case):
        nonlocal shown
        row = evaluate(backend, case, check_blind=False).row
        counts[row["verdict"]] += 1
        if row["verdict"] not in ("pass",) and shown < 6:
            shown += 1
            print(f"  [{row['verdict']}] {str(row.get('message', ''))[:300]}")
            if row.get("traceback"):
                print("   ", row["traceback"][-700:].replace("\n", "\n    "))
            print("    case:", case.to_json()[:400])
        for k in ("notes", "first_call_s", "lse_shape"):
            if row.get(k) and shown < 6:
                print("    note:", k, row[k])

    one()
    print(f"{name}: {dict(counts)} in {time.perf_counter() - t0:.1f}s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("backends", nargs="*")
    ap.add_argument("--examples", type=int, default=12)
    a = ap.parse_args()
    for listing in listings():
        print(f"{listing.backend.name:28s} {'available' if listing.available else 'unavailable: ' + listing.unavailable}")
    for name in a.backends:
        print(f"== {name}", flush=True)
        try:
            probe(name, a.examples)
        except Exception as e:  # a probe must go on to the next backend
            print(f"{name}: probe failed: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
