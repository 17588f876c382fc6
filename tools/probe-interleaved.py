"""A worker's loop without the campaign: hypothesis draws a case, the case is evaluated, and so on; with the time of the
calls inside materialization, of the garbage collector and the minor page faults, per case.

Usage (device, repository root):
    python tools/probe-interleaved.py [--backend aten-flash-varlen] [--tiers small] [--seeds 4] [--batch 1]
    for i in $(seq 16); do python tools/probe-interleaved.py > /tmp/i$i.txt & done; wait; cat /tmp/i*.txt

`tools/probe-materialize.py` times materialization in a loop of its own, where nothing else runs between the cases;
here drawing and the whole evaluation run between them, as in a campaign's worker, so that a cost that shows only there
(a cache the other parts cool, an allocator the kernel's copies keep busy) shows. `--batch N` evaluates the cases N at
a time after drawing them. Prints one line: milliseconds a case and by part, the timed calls' milliseconds a case, the
garbage collector's passes and milliseconds a case by generation, and the minor faults a case.
"""
from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from hypothesis import Phase, given, seed  # noqa: E402

import fuzz.compare as compare  # noqa: E402
import reference.inputs as inputs  # noqa: E402
from backends.registry import get  # noqa: E402
from campaign.drawing import hypothesis_settings  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits, cases  # noqa: E402
from reference import transfer  # noqa: E402

PARTS = (("materialize", "materialize_s"), ("oracle", "oracle_s"), ("kernel", "kernel_s"), ("compare", "compare_s"))
spent: dict[str, float] = {}


def timed(module, name: str, label: str) -> None:
    """Replace module.name by a wrapper adding its seconds to spent[label]."""
    fn = getattr(module, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - started

    setattr(module, name, wrapper)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="aten-flash-varlen")
    ap.add_argument("--tiers", default="small")
    ap.add_argument("--seeds", type=int, default=4, help="hypothesis runs of 300 examples each")
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    backend = get(a.backend)
    strategy = cases(backend.caps, Limits(tiers=tuple(a.tiers.split(","))))
    timed(compare, "materialize", "draw inputs")
    timed(compare, "to_device", "to_device")
    timed(compare, "_copied", "event")
    timed(inputs, "draw_queries", "queries")
    timed(inputs, "draw_keys_values", "keys and values")
    timed(transfer, "move_all", "move_all")
    timed(torch, "empty", "torch.empty")
    collections: dict[int, list] = {g: [0, 0.0] for g in range(3)}
    began: list[float] = []

    def on_collection(phase: str, info: dict) -> None:
        if phase == "start":
            began.append(time.perf_counter())
        else:
            c = collections[info["generation"]]
            c[0] += 1
            c[1] += time.perf_counter() - began.pop()

    gc.callbacks.append(on_collection)
    parts = dict.fromkeys((name for name, _ in PARTS), 0.0)
    pending: list = []
    count = [0]

    def run(case) -> None:
        row = compare.evaluate(backend, case).row
        count[0] += 1
        for name, field in PARTS:
            parts[name] += row.get(field) or 0.0

    def one(case) -> None:
        pending.append(case)
        if len(pending) >= a.batch:
            for c in pending:
                run(c)
            pending.clear()

    # first calls (the CUDA context, the allocators' first blocks, the kernel's first launch) out of the figures: a
    # first run without them had the context's creation inside the first page-locked torch.empty, 2-5 ms a case of 600
    run(sample_cases(backend.caps, Limits(tiers=tuple(a.tiers.split(","))), 1)[0])
    count[0] = 0
    parts.update(dict.fromkeys(parts, 0.0))
    spent.clear()
    for c in collections.values():
        c[:] = [0, 0.0]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    started = time.perf_counter()
    for s in range(a.seeds):
        hypothesis_settings(300, [Phase.generate])(seed(s)(given(strategy)(one)))()
        for c in pending:
            run(c)
        pending.clear()
    seconds = time.perf_counter() - started
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    n = max(count[0], 1)
    ms = lambda x: round(1000 * x / n, 3)  # noqa: E731
    by_part = {k: ms(v) for k, v in parts.items()}
    calls = {k: ms(v) for k, v in spent.items()}
    passes = {g: (c, ms(t)) for g, (c, t) in collections.items()}
    print(f"pid {os.getpid()} batch {a.batch}: {n} cases, {ms(seconds)} ms a case; parts {by_part}; calls {calls}; "
          f"gc {passes}; {faults // n} minor faults a case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
