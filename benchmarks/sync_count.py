"""Device synchronisations per evaluated example, by the line of attnref that asked for them.

Usage: python benchmarks/sync_count.py [--backend aten-flash-varlen] [--examples 200] [--tiers small,tile,long]
       [--top 20]

On a GPU that a campaign's 16 worker processes time-slice, each synchronisation of one process waits for the
others' turns: a case whose oracle ran on the GPU cost 60-150 ms of measured parts against 10-16 ms for one whose
oracle ran on the CPU, for a few milliseconds of device work (benchmarks/results/throughput/). Cases are drawn
first, then evaluated one by one under `torch.cuda.set_sync_debug_mode("warn")`, which warns at every implicit
synchronisation (a blocking copy, `.item()`, a boolean index); explicit `torch.cuda.synchronize` calls (the row's
timers) and waits for an event (the kernel's for its inputs' copy) are counted by wrapping them. Each is charged to
the innermost frame in this repository. Prints, in Markdown, synchronisations per example by where the oracle ran,
and the sites with the most.
"""
from __future__ import annotations

import argparse
import collections
import sys
import traceback
import warnings
from pathlib import Path

import torch

import fuzz.compare
from backends.registry import get
from benchmarks.profile_evaluate import draw
try:
    from campaign.drawing import pin_hypothesis_constants
except ImportError:  # a tree before campaign.drawing, measured beside this one by tools/gpu-ab.sh
    from campaign.worker import pin_hypothesis_constants
from fuzz.compare import evaluate

ROOT = str(Path(fuzz.compare.__file__).resolve().parents[1])  # the tree whose modules run (another tree's too)


def site() -> str:
    """The innermost frame of the tree's code (not this file's) on the current stack."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename.startswith(ROOT) and not frame.filename.endswith("sync_count.py"):
            return f"{Path(frame.filename).relative_to(ROOT)}:{frame.lineno} {frame.name}"
    return "(outside the repository)"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="aten-flash-varlen")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--tiers", default="small,tile,long")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("sync_count: no CUDA device here (it counts GPU synchronisations)", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    pin_hypothesis_constants()  # two trees draw the same cases
    backend = get(a.backend)
    drawn = draw(backend, a.examples, a.tiers.split(","))
    evaluate(backend, drawn[0])  # first-call costs (imports, allocator, a JIT build) out of the count
    counts: collections.Counter[tuple[str, str]] = collections.Counter()  # (oracle device, site) -> syncs
    examples: collections.Counter[str] = collections.Counter()
    current: collections.Counter[str] = collections.Counter()  # this example's syncs by site
    synchronize, event_wait = torch.cuda.synchronize, torch.cuda.Event.synchronize

    def counted_synchronize(device=None) -> None:
        current["torch.cuda.synchronize at " + site()] += 1
        synchronize(device)

    def counted_event_wait(event) -> None:  # the kernel's wait for its inputs' copy (an event, not the device)
        current["torch.cuda.Event.synchronize at " + site()] += 1
        event_wait(event)

    def note(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message):
            current[site()] += 1

    torch.cuda.synchronize, torch.cuda.Event.synchronize = counted_synchronize, counted_event_wait
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = note
            for case in drawn:
                current.clear()
                device = evaluate(backend, case).row.get("oracle_device", "none")
                examples[device] += 1
                counts.update({(device, where): n for where, n in current.items()})
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize, torch.cuda.Event.synchronize = synchronize, event_wait
    print(f"{a.backend}: {len(drawn)} cases (tiers {a.tiers}); examples by oracle device: {dict(examples)}\n")
    print("| oracle on | synchronisations per example |")
    print("|---|---|")
    for device, n in sorted(examples.items()):
        total = sum(c for (d, _), c in counts.items() if d == device)
        print(f"| {device} | {total / n:.1f} |")
    print("\n| oracle on | site | per example |")
    print("|---|---|---|")
    for (device, where), c in counts.most_common(a.top):
        print(f"| {device} | `{where}` | {c / examples[device]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
