"""Device: the same drawn cases judged with the oracle on the GPU and on the host, verdict by verdict.

Usage: python tools/probe-oracle-devices.py [--backend aten-flash-varlen] [--examples 300] [--tiers small,tile,long]
       [--seconds 120]

Each case of the backend's declaration whose score elements put its oracle on the GPU in a campaign
(`fuzz.compare.ORACLE_CPU_MAX`) is evaluated twice: oracle on the GPU (the packed pass up to
`reference.packed.PACKED_ELEMENTS_GPU`, its blind check over the packed scores) and on the host (the host's packing
rule). Prints, by size tier, the verdicts of each, the cases judged otherwise, and the GPU / host ratio of the limits.
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.registry import get  # noqa: E402
from fuzz.compare import ORACLE_CPU_MAX, evaluate, score_elements, size_tier  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="aten-flash-varlen")
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--tiers", default="small,tile,long")
    ap.add_argument("--seconds", type=float, default=120.0, help="stop comparing after this long")
    a = ap.parse_args()
    backend = get(a.backend)
    drawn = [c for c in sample_cases(backend.caps, Limits(tiers=tuple(a.tiers.split(","))), a.examples)
             if score_elements(c) > ORACLE_CPU_MAX and not backend.not_supported_reasons(c)]
    verdicts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    ratios: dict[str, list[float]] = collections.defaultdict(list)
    otherwise = []
    started = time.monotonic()
    for case in drawn:
        if time.monotonic() - started > a.seconds:
            break
        gpu = evaluate(backend, case, oracle_cpu_max=-1).row
        host = evaluate(backend, case, oracle_cpu_max=1 << 40).row
        tier = size_tier(case)
        verdicts[tier][("gpu", gpu["verdict"])] += 1
        verdicts[tier][("host", host["verdict"])] += 1
        if gpu.get("limit") and host.get("limit"):
            ratios[tier].append(gpu["limit"] / host["limit"])
        if gpu["verdict"] != host["verdict"]:
            otherwise.append((tier, host["verdict"], gpu["verdict"], host.get("limit"), gpu.get("limit"),
                              host.get("mask_shift_error"), gpu.get("mask_shift_error")))
    print(f"{a.backend}: {sum(sum(v.values()) for v in verdicts.values()) // 2} cases compared of {len(drawn)} drawn")
    print("| tier | verdicts, oracle on the GPU | verdicts, on the host | limit GPU / host: median (min-max) |")
    print("|---|---|---|---|")
    for tier, counts in sorted(verdicts.items()):
        side = {s: ", ".join(f"{v} {n}" for (d, v), n in sorted(counts.items()) if d == s) for s in ("gpu", "host")}
        r = ratios[tier]
        spread = f"{statistics.median(r):.6f} ({min(r):.6f}-{max(r):.6f})" if r else "-"
        print(f"| {tier} | {side['gpu']} | {side['host']} | {spread} |")
    print(f"\njudged otherwise: {len(otherwise)}")
    for row in otherwise:
        print("  ", row)


if __name__ == "__main__":
    main()
