"""What an untold campaign of JIT backends reached: rows per campaign second, compile keys declared / drawn / built,
and where worker time went after the first minutes (issue #35's measure).

Usage: python benchmarks/jit_campaign.py RESULTS_DIR [--after 120]

Reads RESULTS_DIR/rows.jsonl, declarations.json and compile_draws.json (the driver's record: the campaign's span, its
workers, and the keys whose drawn cases were deferred, rows or not).

- rows/s: generated rows of the backend over the whole campaign (start to end, compiles included);
- keys: declared (declarations.json), drawn (a row or a deferred case), built (a row whose first call returned);
- after --after seconds, over workers x the rest of the campaign: JIT compile (rows' compile_s: first calls of a key
  in a process), evaluation (materialize, oracle, kernel, compare: the rest of the rows' time; the share of it in
  kernel calls over SLOW_CALL_S that were no first call, builds the variant does not name, printed beside), and the
  remainder (hypothesis drawing, also the cases it deferred; messages; idle);
- generation tasks by the kind of shard they drew (campaign.tasks.Task.shard_kind): tasks, stalled ones, rows per
  task, their share of worker time (each task's strategy, prefix and hypothesis start are paid per task).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from campaign.budget import inside, row_split  # noqa: E402
from campaign.claims import NOT_BUILT  # noqa: E402
from campaign.clock import by_shard  # noqa: E402
from campaign.worker import SPENT  # noqa: E402
from fuzz.verdicts import Verdict  # noqa: E402

# A kernel call past its module's first call that takes this long is a build the backend's variant does not name:
# FA4's per soft-cap value and vLLM Triton's per shape took 1-9 s each, FA4's other calls 1-2 ms at the median
# (results/campaigns/jit-untold-side-by-side-h200-2026-11-26.md).
SLOW_CALL_S = 0.5
BUILD_ROW_S = 10.0  # a first call this long is read as a build, not a load, in the minutes' table
NO_BUILD = ("crash", "unsupported")


def load(results: Path) -> tuple[list[dict], dict, dict]:
    rows = []
    for line in (results / "rows.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    declared = json.loads((results / "declarations.json").read_text()) if (results / "declarations.json").exists() else {}
    record = json.loads((results / "compile_draws.json").read_text())
    return rows, declared, record


def per_backend(rows: list[dict], declared: dict, record: dict) -> list[dict]:
    span = max(record["ended"] - record["started"], 1e-9)
    out = []
    for backend, rec in record["backends"].items():
        gen = [r for r in rows if r.get("backend") == backend and r.get("phase") == "generate"]
        ran = {r["compile_key"] for r in gen if r.get("compile_key")}
        built = {r["compile_key"] for r in rows if r.get("backend") == backend and r.get("compile_key")
                 and r.get("verdict") not in NO_BUILD}
        minutes = defaultdict(int)
        for r in gen:
            minutes[int((r["t"] - record["started"]) // 60)] += 1
        out.append(dict(backend=backend, rows=len(gen), rate=len(gen) / span,
                        declared=len(declared.get(backend, {}).get("compile_key", [])),
                        drawn=len(ran | set(rec["deferred"])), built=len(built),
                        waiting=rec["waiting"], dropped=rec["dropped"],
                        failures=sum(1 for r in gen if Verdict(r["verdict"]).is_failure),
                        per_minute=[minutes[m] for m in range(int(span // 60) + 1)]))
    return out


def worker_time(rows: list[dict], record: dict, after: float) -> dict:
    """Shares of workers x (end - start - after) spent compiling and evaluating, rows clipped to the window."""
    lo, hi = record["started"] + after, record["ended"]
    total = record["workers"] * max(hi - lo, 1e-9)
    compile_s = evaluate_s = slow_s = 0.0
    for r in rows:
        split = row_split(r)  # the compile budget's split of a row (campaign.budget)
        if split is None:
            continue
        end, evaluated, compiled = split
        share = inside(end, evaluated + compiled, lo, hi)
        compile_s += compiled * share
        evaluate_s += evaluated * share
        if not compiled and (r.get("kernel_s") or 0.0) > SLOW_CALL_S:
            slow_s += r["kernel_s"] * share
    return dict(compile=100 * compile_s / total, evaluation=100 * evaluate_s / total, slow=100 * slow_s / total,
                rest=100 * (1 - (compile_s + evaluate_s) / total))


def failed_builds(rows: list[dict], record: dict, after: float) -> dict[str, tuple[int, float]]:
    """Per backend: the compile keys whose first calls built nothing (campaign.claims.NOT_BUILT verdicts) and the
    worker seconds of such first calls `after` s into the campaign (campaign.compiles.FAILED_BUILDS)."""
    lo, hi, out = record["started"] + after, record["ended"], {}
    for r in rows:
        if r.get("first_of_key") and r.get("compile_key") and r.get("verdict") in NOT_BUILT and r.get("t") is not None:
            keys, seconds = out.get(r["backend"], (set(), 0.0))
            spent = r.get("compile_s") or 0.0
            window = spent * inside(r["t"], spent, lo, hi) if spent else 0.0
            out[r["backend"]] = (keys | {r["compile_key"]}, seconds + window)
    return {b: (len(keys), seconds) for b, (keys, seconds) in sorted(out.items())}


def by_minute(rows: list[dict], record: dict) -> list[dict]:
    """Per minute of the campaign (a last part under 30 s left out): `worker_time`'s split of that minute alone, and
    the first calls over BUILD_ROW_S that ran in it (backend, seconds, when they ended)."""
    out, span = [], record["ended"] - record["started"]
    for m in range(int(span // 60) + 1):
        lo = m * 60.0
        if span - lo < 30.0:  # the campaign's last seconds, its stop: no minute to speak of
            break
        window = dict(record, ended=record["started"] + min(lo + 60.0, span))
        split = worker_time(rows, window, after=lo)
        builds = [(r["backend"], r["compile_s"], r["t"] - record["started"]) for r in rows
                  if (r.get("compile_s") or 0.0) > BUILD_ROW_S and r.get("t") is not None
                  and r["t"] - r["compile_s"] < record["started"] + lo + 60.0 and r["t"] > record["started"] + lo]
        out.append({"minute": m, **split, "builds": builds})
    return out


def pauses(record: dict) -> str:
    """How often and how long the budget's build allowance held new builds back, and the allowance at the last
    change."""
    changes, span = record["build_pauses"], record["ended"] - record["started"]
    paused = sum((changes[i + 1][0] if i + 1 < len(changes) else span) - e
                 for i, (e, p, _) in enumerate(changes) if p)
    first = next((e for e, p, _ in changes if p), None)
    return (f"paused {sum(p for _, p, _ in changes)} times from {first:.0f} s, {paused:.0f} s in all; "
            f"last allowance {100 * changes[-1][2]:.1f} % of the worker time" if first is not None else "never paused")


def worker_seconds(record: dict) -> float:
    """The campaign's worker time: workers x its span (compile_draws.json)."""
    return record["workers"] * max(record["ended"] - record["started"], 1e-9)


def task_time(record: dict) -> list[dict]:
    """Per backend, shares of the campaign's worker time (workers x span) by where its tasks' seconds went (the
    workers' `done` messages, compile_draws.json `time`): a generation task's parts (campaign.worker.SPENT: the strategy
    and prefix, drawing the cases it evaluated, evaluating them, drawing cases that went to wait (`variant_draw`: those
    of a key the worker had run, waiting for another of its modules), draws that are not examples, and hypothesis' own
    rest), the waiting cases' tasks, shrinks and replays, and tasks that never ended (a worker died or was killed in
    it, or the campaign ended during it: a long JIT build); `outside` is what no task of any backend held (the workers'
    start-up, and a worker idle between tasks)."""
    total = worker_seconds(record)
    out = []
    for backend, t in sorted(record.get("time", {}).items()):
        parts = {k: t.get(k, 0.0) for k in SPENT}
        generate = t.get("generate_task_s", 0.0)
        counted = any(k.endswith("_tasks") for k in t)  # tasks per kind (records of older trees have the total only)
        out.append({"backend": backend, "tasks": t.get("tasks", 0),
                    "waiting-case tasks": t.get("deferred_tasks", 0) if counted else None,
                    **{k[:-2]: 100 * v / total for k, v in parts.items()},
                    "hypothesis": 100 * max(0.0, generate - sum(parts.values())) / total,
                    "waiting cases": 100 * t.get("deferred_task_s", 0.0) / total,
                    "shrink + replay": 100 * (t.get("shrink_task_s", 0.0) + t.get("replay_task_s", 0.0)) / total,
                    "unfinished": 100 * t.get("unfinished_task_s", 0.0) / total,
                    "in tasks": 100 * sum(v for k, v in t.items() if k.endswith("_task_s")) / total})
    return out


def shard_time(record: dict) -> list[dict]:
    """Per backend and kind of shard (campaign.tasks.Task.shard_kind), its generation tasks: how many, how many ended
    stalled (every one of their last STALL_DRAWS draws waited), their rows, rows per task and % of the campaign's
    worker time (records of trees before the split have none)."""
    total = worker_seconds(record)
    out = []
    for backend, t in sorted(record.get("time", {}).items()):
        for kind, n in by_shard(t).items():
            out.append({"backend": backend, "shard": kind, "tasks": n["tasks"], "stalled": n["stalled"],
                        "rows": n["rows"], "rows per task": n["rows"] / max(n["tasks"], 1),
                        "worker time": 100 * n["s"] / total})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--after", type=float, default=120.0, help="seconds from the start left out of the worker-time split")
    a = p.parse_args(argv)
    rows, declared, record = load(Path(a.results))
    span = record["ended"] - record["started"]
    after = record.get("compile_slots_after")
    budget = f", {after} after {record.get('warmup_s', 0):.0f} s" if after is not None else ""
    print(f"campaign: {span:.0f} s, {record['workers']} workers, {record.get('compile_slots')} compile slots{budget}\n")
    if record.get("compile_slots_history"):  # campaign.budget: (s into the campaign, slots, evaluation share judged)
        steps = ", ".join(f"{e:.0f} s: {n}" + ("" if share is None else f" ({100 * share:.0f} % evaluation)")
                          for e, n, share in record["compile_slots_history"])
        print(f"compile slots after the warm-up (campaign.budget): {steps}\n")
    if record.get("build_pauses"):  # campaign.budget: (s into the campaign, paused, builds' allowed share)
        print(f"new builds after the warm-up (campaign.budget's allowance): {pauses(record)}\n")
    print("| backend | generated rows | rows/s (whole campaign) | keys declared | keys drawn | keys built | "
          "cases waiting at the end | dropped | failing rows | rows per minute |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in per_backend(rows, declared, record):
        print(f"| {t['backend']} | {t['rows']} | {t['rate']:.1f} | {t['declared']} | {t['drawn']} | {t['built']} | "
              f"{t['waiting']} | {t['dropped']} | {t['failures']} | {' '.join(map(str, t['per_minute']))} |")
    w = worker_time(rows, record, a.after)
    print(f"\nworker time after {a.after:.0f} s: JIT compile {w['compile']:.0f} %, evaluation {w['evaluation']:.0f} % "
          f"({w['slow']:.0f} points of it in kernel calls over {SLOW_CALL_S} s past a first call: builds the variant does "
          f"not name), drawing / deferring / idle {w['rest']:.0f} %")
    failed = failed_builds(rows, record, a.after)
    if failed:
        print("\nfirst calls that built nothing (crash, unsupported, timeout): " + "; ".join(
            f"{b} {n} keys, {s:.0f} worker s after {a.after:.0f} s" for b, (n, s) in failed.items()))
    print("\nby minute: worker time on JIT compiles and evaluation, and the first calls over "
          f"{BUILD_ROW_S:.0f} s that ran in it (backend: seconds, ending at)\n")
    print("| minute | JIT compile | evaluation | builds |")
    print("|---|---|---|---|")
    for m in by_minute(rows, record):
        builds = ", ".join(f"{b}: {s:.0f} s to {end:.0f} s" for b, s, end in m["builds"])
        print(f"| {m['minute']} | {m['compile']:.1f} % | {m['evaluation']:.1f} % | {builds} |")
    shares = task_time(record)
    if shares:
        heads = [k for k in shares[0] if k not in ("backend", "tasks", "waiting-case tasks")]
        print("\nwhole campaign, % of worker time by the tasks' own clocks (`outside`: no task held the worker)\n")
        print("| backend | tasks (of waiting cases) | " + " | ".join(heads) + " |")
        print("|---|---|" + "---|" * len(heads))
        for t in shares:
            waiting = "" if t["waiting-case tasks"] is None else f" ({t['waiting-case tasks']})"
            print(f"| {t['backend']} | {t['tasks']}{waiting} | " + " | ".join(f"{t[k]:.1f}" for k in heads) + " |")
        outside = max(0.0, 100 - sum(t['in tasks'] for t in shares))
        split = ""
        if "startup_s" in record:  # campaign.clock
            startup = 100 * record["startup_s"] / worker_seconds(record)
            split = f" (workers starting {startup:.1f} %, between tasks {max(0.0, outside - startup):.1f} %)"
        print(f"\noutside any task: {outside:.1f} %{split}")
    shards = shard_time(record)
    if shards:
        print("\ngeneration tasks by the shard they drew\n")
        print("| backend | shard | tasks | stalled | rows | rows per task | % of worker time |")
        print("|---|---|---|---|---|---|---|")
        for t in shards:
            print(f"| {t['backend']} | {t['shard']} | {t['tasks']} | {t['stalled']} | {t['rows']} | "
                  f"{t['rows per task']:.1f} | {t['worker time']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
