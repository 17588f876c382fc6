"""Campaign throughput and where worker time goes, from a campaign's rows.jsonl.

Usage: python benchmarks/throughput.py RESULTS_DIR [--run N] [--by-tier]     (a Markdown table per backend)

- examples/s: generated examples of the backend over the span of its generated rows (all workers
  together: the aggregate rate a campaign achieves);
- worker time: per worker, the span from its first to its last row, summed; its split: materialize /
  oracle (float64 + baseline + blind check) / JIT compile / kernel / compare, each summed over rows,
  apart for generated examples and for shrinking; what is left is hypothesis' generation and the
  harness (messages, scheduling, process start);
- new-example share: worker time spent on generated examples (their measured parts plus their share
  of the rest) over worker time spent on generated and shrink examples.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

PARTS = ("materialize_s", "oracle_s", "compile_s", "kernel_s", "compare_s")


def rows_of(results: Path, run: int | None) -> list[dict]:
    rows = []
    for line in (results / "rows.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if run is None or r.get("run") == run:
            rows.append(r)
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    by = defaultdict(list)
    for r in rows:
        if r.get("t") is not None and r.get("backend"):
            by[r["backend"]].append(r)
    out = []
    for backend, rs in sorted(by.items()):
        gen = sorted((r for r in rs if r.get("phase") == "generate"), key=lambda r: r["t"])
        if not gen:
            continue
        span = max(gen[-1]["t"] - gen[0]["t"], 1e-9)
        per_worker = defaultdict(list)
        for r in rs:  # a row's t is stamped when it ends: its work started sum(parts) earlier
            per_worker[r.get("worker")] += [r["t"], r["t"] - sum(r.get(p) or 0.0 for p in PARTS if p != "compile_s")]
        worker_time = sum(max(ts) - min(ts) for ts in per_worker.values()) or span
        measured = {phase: {p: 0.0 for p in PARTS} for phase in ("generate", "shrink")}
        for r in rs:
            phase = "shrink" if r.get("phase") == "shrink" else "generate" if r.get("phase") == "generate" else None
            if phase is None:
                continue
            for p in PARTS:
                measured[phase][p] += r.get(p) or 0.0
            measured[phase]["kernel_s"] -= r.get("compile_s") or 0.0  # the JIT compile is kept apart
        used = {phase: sum(v.values()) for phase, v in measured.items()}
        rest = max(0.0, worker_time - used["generate"] - used["shrink"])
        n_gen = len(gen)
        n_shrink = sum(1 for r in rs if r.get("phase") == "shrink")
        gen_share_of_rest = rest * n_gen / max(n_gen + n_shrink, 1)
        new_share = (used["generate"] + gen_share_of_rest) / max(worker_time, 1e-9)
        pct = {p: 100 * measured["generate"][p] / worker_time for p in PARTS}  # generated examples; shrinking apart
        out.append(dict(backend=backend, examples=n_gen, workers=len(per_worker), seconds=span,
                        rate=(n_gen - 1) / span if n_gen > 1 else float("nan"), shrink_rows=n_shrink,
                        new_share=100 * new_share, shrink_pct=100 * used["shrink"] / worker_time,
                        rest_pct=100 * rest / worker_time,
                        cpu_oracle=sum(1 for r in gen if r.get("oracle_device") == "cpu") / n_gen, **pct))
    return out


def by_tier(rows: list[dict]) -> list[dict]:
    """Generated examples per (backend, size tier, oracle device): how many, the mean milliseconds of each measured
    part (generation and the harness are not per row), the group's share of its backend's measured time (where
    a cheap tier's many examples and a costly tier's few weigh against each other) and its share of blind rows."""
    groups = defaultdict(list)
    for r in rows:
        if r.get("phase") == "generate" and r.get("backend"):
            groups[r["backend"], r.get("size_tier"), r.get("oracle_device")].append(r)
    out = []
    measured = {}  # per group: its examples x their mean measured milliseconds
    for (backend, tier, device), rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        means = {p: 1e3 * sum(r.get(p) or 0.0 for r in rs) / len(rs) for p in PARTS}
        blind = 100 * sum(r.get("verdict") == "blind" for r in rs) / len(rs)
        out.append(dict(backend=backend, tier=tier, device=device, examples=len(rs), blind=blind, **means))
        measured[backend, tier, device] = len(rs) * sum(means.values())
    totals = defaultdict(float)
    for (backend, _, _), ms in measured.items():
        totals[backend] += ms
    for t in out:
        t["share"] = 100 * measured[t["backend"], t["tier"], t["device"]] / max(totals[t["backend"]], 1e-12)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--run", type=int, help="only rows of this run (resumed campaigns have several)")
    p.add_argument("--by-tier", action="store_true",
                   help="then a table of mean milliseconds per part by size tier and oracle device")
    a = p.parse_args(argv)
    rows = rows_of(Path(a.results), a.run)
    table = summarize(rows)
    print("| backend | examples | workers | examples/s | new-example share | materialize | oracle | JIT compile | "
          "kernel | compare | shrink | generation + harness | oracle on CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in table:
        print(f"| {t['backend']} | {t['examples']} | {t['workers']} | {t['rate']:.1f} | {t['new_share']:.0f}% | "
              f"{t['materialize_s']:.0f}% | {t['oracle_s']:.0f}% | {t['compile_s']:.0f}% | {t['kernel_s']:.0f}% | "
              f"{t['compare_s']:.0f}% | {t['shrink_pct']:.0f}% | {t['rest_pct']:.0f}% | {100 * t['cpu_oracle']:.0f}% |")
    if a.by_tier:
        print("\n| backend | size tier | oracle on | examples | materialize ms | oracle ms | JIT compile ms | kernel ms | "
              "compare ms | share of measured time | blind |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for t in by_tier(rows):
            print(f"| {t['backend']} | {t['tier']} | {t['device']} | {t['examples']} | " +
                  " | ".join(f"{t[p]:.1f}" for p in PARTS) + f" | {t['share']:.0f}% | {t['blind']:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
