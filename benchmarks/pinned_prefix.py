"""How many early draws of shards that borrow a pinned shape repeat the first shard's, with no fixed prefix and with
prefixes of a few calibration seeds (campaign.drawing.PINNED_PREFIX_SEEDS), and what each prefix costs.

Usage: python benchmarks/pinned_prefix.py [--backend fa4-varlen] [--keys 5] [--shards 8] [--draws 40] [--seeds 4 16]

For --keys of the backend's declared compile keys (every eighth), one pinned shape each (fuzz.shapes.pin_shape),
--shards shards draw --draws cases each, as campaign workers draw them (max_examples above hypothesis' steady order,
its constants pinned).
Prints, per prefix size, the later shards' draws that repeat the first shard's and the prefix's seconds per shape.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import campaign.drawing as drawing  # noqa: E402
from backends.registry import get  # noqa: E402
from campaign.compiles import key_text  # noqa: E402
from fuzz.shapes import pin_shape  # noqa: E402
from fuzz.strategies import Limits, cases, compile_key, declared_compile_keys, key_limits  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="fa4-varlen")
    ap.add_argument("--keys", type=int, default=5)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[4, 16])
    a = ap.parse_args()
    drawing.pin_hypothesis_constants()
    backend = get(a.backend)
    per, keyed = backend.compiled_per, backend.compiled_features
    limits = Limits()
    keys = declared_compile_keys(backend.caps, limits, per, keyed)[:8 * a.keys:8]
    sizes = [0, *a.seeds]
    repeats, total, seconds = dict.fromkeys(sizes, 0), dict.fromkeys(sizes, 0), dict.fromkeys(sizes, 0.0)
    for key in keys:
        text = key_text(key)
        narrowed = pin_shape(backend.caps, key_limits(backend.caps, limits, per, keyed, json.loads(text)),
                             backend.jit_shape_per, 12345)
        strategy = cases(backend.caps, narrowed).filter(lambda c, t=text: key_text(compile_key(c, per, keyed)) == t)
        # each shard as a campaign worker draws it, max_examples above hypothesis' steady order
        shards = [drawing.early_draws(strategy, s * 7919, a.draws, 4 * a.draws) for s in range(1, a.shards + 1)]
        first = set(shards[0])
        for n in sizes:
            started = time.perf_counter()
            prefix = drawing.fixed_prefix(strategy, n) if n else frozenset()
            seconds[n] += time.perf_counter() - started
            later = [c for shard in shards[1:] for c in shard if c not in prefix]
            repeats[n] += sum(1 for c in later if c in first)
            total[n] += len(later)
    print(f"{a.backend}: {len(keys)} keys, one pinned shape each, {a.shards} shards of {a.draws} draws\n")
    print("| prefix seeds | later shards' draws | repeating the first shard's | prefix seconds per shape |")
    print("|---|---|---|---|")
    for n in sizes:
        print(f"| {n or 'none'} | {total[n]} | {repeats[n]} | {seconds[n] / max(len(keys), 1):.2f} |")


if __name__ == "__main__":
    main()
