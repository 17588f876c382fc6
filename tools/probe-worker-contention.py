"""Whether a campaign's workers slow each other on one host: a worker's evaluation loop, alone or beside others.

Usage (device, repository root):
    python tools/probe-worker-contention.py [--backend aten-flash-varlen] [--examples 600] [--tiers small]
    for i in $(seq 16); do python tools/probe-worker-contention.py > /tmp/p$i.txt & done; wait; cat /tmp/p*.txt

Each process draws the same derandomized cases (`fuzz.sampling.sample_cases`, not timed), evaluates the first once,
then all of them on one thread under cProfile, as a campaign worker does. It prints one line: milliseconds a case, minor
page faults a case and the row timers' mean parts; then the calls of allocation and conversion operators (`torch.empty`,
`torch.zeros`, `Tensor.to`, `Tensor.copy_`) by caller, with their microseconds a call. Run alone, then N at once: a
part that grows with N is a shared resource (memory, page faults, the GPU's turns), not the harness's own work.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402
from reference.values import normal_table  # noqa: E402

PARTS = ("materialize_s", "oracle_s", "kernel_s", "compare_s")
WATCHED = ("torch.empty>", "torch.zeros>", "'to' of", "'copy_' of")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="aten-flash-varlen")
    ap.add_argument("--examples", type=int, default=600)
    ap.add_argument("--tiers", default="small")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(1)
    backend = get(a.backend)
    cases = sample_cases(backend.caps, Limits(tiers=tuple(a.tiers.split(","))), a.examples)
    evaluate(backend, cases[0])
    normal_table()  # made once a process, as a worker does
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    rows = [evaluate(backend, case).row for case in cases]
    profile.disable()
    seconds = time.perf_counter() - started
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    parts = {p.removesuffix("_s"): round(1000 * sum(r.get(p) or 0.0 for r in rows) / len(rows), 2) for p in PARTS}
    print(f"pid {os.getpid()}: {1000 * seconds / len(rows):.2f} ms a case, {faults / len(rows):.0f} minor faults a case, "
          f"parts (ms) {parts}")
    calls = []
    for (_, _, name), (_, _, _, _, callers) in pstats.Stats(profile).stats.items():
        if any(w in name for w in WATCHED):
            for (path, line, caller), (_, n, own, _) in callers.items():
                calls.append((own, n, f"{name} <- {Path(path).name}:{caller}"))
    for own, n, what in sorted(calls, reverse=True)[:a.top]:
        print(f"    {what}: {n} calls, {1e6 * own / max(n, 1):.1f} us a call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
