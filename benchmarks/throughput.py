"""Fuzz throughput and where the time goes, from a campaign's rows.jsonl.

Usage: python benchmarks/throughput.py RESULTS_DIR   (prints a Markdown table per backend)
examples/s counts generation-phase rows over the span of their timestamps; the split sums each
row's materialize / oracle (float64 + baseline) / kernel / compare seconds; the rest is
hypothesis' generation and the harness. JIT libraries (FlashInfer, FA4) report a variant's first
call apart: `compile` is that time, `kernel` the rest of the kernel time.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def main(results: str) -> int:
    rows = [json.loads(x) for x in (Path(results) / "rows.jsonl").read_text().splitlines() if x.strip()]
    by = defaultdict(list)
    for r in rows:
        if r.get("phase") == "generate" and "t" in r and r.get("oracle_s") is not None:
            by[r["backend"]].append(r)
    print("| backend | examples | examples/s | materialize | oracle | compile (JIT) | kernel | compare | generation+harness |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rs in by.items():
        rs.sort(key=lambda r: r["t"])
        span = max(rs[-1]["t"] - rs[0]["t"], 1e-9)
        rate = (len(rs) - 1) / span if len(rs) > 1 else float("nan")
        parts = {k: sum(r.get(k) or 0.0 for r in rs[1:]) for k in ("materialize_s", "oracle_s", "kernel_s", "compare_s")}
        compile_s = sum(r.get("compile_s") or 0.0 for r in rs[1:])
        parts["kernel_s"] = max(0.0, parts["kernel_s"] - compile_s)
        parts["compile_s"] = compile_s
        rest = max(0.0, span - sum(parts.values()))
        pct = lambda x: f"{100 * x / span:.0f}%"  # noqa: E731
        print(f"| {name} | {len(rs)} | {rate:.1f} | {pct(parts['materialize_s'])} | {pct(parts['oracle_s'])} | "
              f"{pct(parts['compile_s'])} | {pct(parts['kernel_s'])} | {pct(parts['compare_s'])} | {pct(rest)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
