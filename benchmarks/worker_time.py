"""One campaign worker's generation task, in process, split into its parts: where a worker's time goes besides the
evaluation (hypothesis' drawing of cases, the row and its message).

Usage: python benchmarks/worker_time.py [--backend torch-sdpa-math] [--examples 800] [--tiers small] [--threads 1]

Runs campaign.worker.Worker over a 30-example shard first (the strategy, its fixed prefix, first-call costs), then
times one shard of --examples generated examples. Prints ms per row: the whole task, the rows' measured parts
(materialize + oracle + kernel + compare), the rest, and the worker's own split of the task (`Worker.spent`:
draw_s is hypothesis drawing the cases that got a row, evaluated_s their evaluation and message).
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch

from campaign.tasks import Task, TaskKind, WorkerConfig
from campaign.worker import Worker

PARTS = ("materialize_s", "oracle_s", "kernel_s", "compare_s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="torch-sdpa-math")
    ap.add_argument("--examples", type=int, default=800)
    ap.add_argument("--tiers", default=None, help="comma-separated size tiers (default: the campaign's)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    limits = {"tiers": a.tiers.split(",")} if a.tiers else {}
    messages: list[dict] = []
    worker = Worker(WorkerConfig(seed=0, limits=limits, cache_dir=tempfile.mkdtemp()), send=messages.append)
    worker.run(Task(TaskKind.GENERATE, a.backend, shard=1, size=30, start=0))
    messages.clear()
    started = time.perf_counter()
    worker.run(Task(TaskKind.GENERATE, a.backend, shard=2, size=a.examples, start=0))
    elapsed = time.perf_counter() - started
    rows = [m["row"] for m in messages if m["type"] == "row"]
    parts = sum(sum(r.get(p) or 0.0 for p in PARTS) for r in rows)
    per_row = {k: v / len(rows) * 1e3 for k, v in worker.spent.items() if v}
    print(f"{a.backend}, tiers {a.tiers or 'default'}: {len(rows)} rows, {elapsed / len(rows) * 1e3:.2f} ms/row; "
          f"parts {parts / len(rows) * 1e3:.2f}, rest {(elapsed - parts) / len(rows) * 1e3:.2f}; "
          + ", ".join(f"{k} {v:.2f}" for k, v in per_row.items()))


if __name__ == "__main__":
    main()
