"""Where a host-oracle case's materialization goes on a GPU host: drawing the inputs, moving the kernel's copy, the event.

Usage (device, repository root):
    python tools/probe-materialize.py [--backend aten-flash-varlen] [--examples 600] [--tiers small] [--top 12]
    for i in $(seq 16); do python tools/probe-materialize.py --top 0 > /tmp/m$i.txt & done; wait; cat /tmp/m*.txt

`fuzz.compare.evaluate` times one "materialize" part: `reference.inputs.materialize` on the host, `to_device` of the
kernel's inputs (one page-locked copy, `reference.transfer.move_all`) and the event the kernel's call waits for. On the
2-core CPU box, where nothing moves, the part is 0.7 ms a small case; on an H200's host it was 2.4-2.9 ms
(benchmarks/results/throughput/). This draws the same derandomized cases (`fuzz.sampling.sample_cases`, not timed) and
times the three steps apart, as a worker runs them (one thread, inference mode), then prints the calls with the most
own time under cProfile over the same loop.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.registry import get  # noqa: E402
from fuzz.compare import _copied  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402
from reference.inputs import materialize, to_device  # noqa: E402
from reference.values import normal_table  # noqa: E402


def steps(cases: list, device: torch.device) -> list[tuple[float, float, float]]:
    """(draw, move, event) seconds of each case."""
    out = []
    for case in cases:
        t0 = time.perf_counter()
        host = materialize(case, "cpu")
        t1 = time.perf_counter()
        moved = to_device(host, device)
        t2 = time.perf_counter()
        _copied(device)
        t3 = time.perf_counter()
        out.append((t1 - t0, t2 - t1, t3 - t2))
        del moved
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="aten-flash-varlen")
    ap.add_argument("--examples", type=int, default=600)
    ap.add_argument("--tiers", default="small")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # on a host without one: the draw alone
    cases = sample_cases(get(a.backend).caps, Limits(tiers=tuple(a.tiers.split(","))), a.examples)
    normal_table()
    with torch.inference_mode():
        steps(cases[:20], device)  # first calls: CUDA context, the allocators' first blocks
        timed = steps(cases, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
    med = [1000 * statistics.median(t[i] for t in timed) for i in range(3)]
    mean = [1000 * statistics.fmean(t[i] for t in timed) for i in range(3)]
    print(f"pid {os.getpid()}: ms a case, median / mean: draw {med[0]:.3f} / {mean[0]:.3f}, move {med[1]:.3f} / "
          f"{mean[1]:.3f}, event {med[2]:.3f} / {mean[2]:.3f}")
    if a.top:
        profile = cProfile.Profile()
        with torch.inference_mode():
            profile.enable()
            steps(cases, device)
            profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(a.top)
        print(text.getvalue()[text.getvalue().find("ncalls"):])
    return 0


if __name__ == "__main__":
    sys.exit(main())
