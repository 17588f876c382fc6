"""Campaigns: fuzz backends for N examples or T seconds, one worker subprocess per backend.

The parent keeps the campaign alive: a worker that segfaults, hits a CUDA error or hangs is
recorded as a crash / timeout row for the case it was running (read from its heartbeat file), and
a fresh worker continues with the remaining budget. Rows are appended to rows.jsonl as they are
produced, so a killed campaign keeps them and `--resume` continues from the counts already there.
Failures are shrunk by hypothesis; each minimal case is saved as cases/<id>.json with its replay
command, and its tensors (expected/actual) as cases/<id>.pt for the report.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

STICKY_EXIT = 3  # a worker's exit after a sticky device error: its rows are written, start a fresh one

HEARTBEAT = "current.json"


@dataclass
class CampaignConfig:
    out: Path
    backends: list[str]
    examples: int | None = 200
    seconds: float | None = None
    seed: int = 0
    example_timeout: float = 120.0
    specs: tuple[str, ...] = ()
    resume: bool = False
    limits: dict = field(default_factory=dict)


def rows_path(out: Path) -> Path:
    return out / "rows.jsonl"


def read_rows(out: Path) -> list[dict]:
    path = rows_path(out)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill mid-write
    return rows


def append_row(out: Path, row: dict) -> None:
    with open(rows_path(out), "a") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()


def run_campaign(cfg: CampaignConfig, progress=None) -> list[dict]:
    """Fuzz every backend in cfg.backends; return all rows (also in cfg.out/rows.jsonl)."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "cases").mkdir(exist_ok=True)
    if not cfg.resume and rows_path(cfg.out).exists():
        rows_path(cfg.out).unlink()
    per_backend_seconds = None if cfg.seconds is None else cfg.seconds / max(1, len(cfg.backends))
    for name in cfg.backends:
        _run_backend(cfg, name, per_backend_seconds, progress)
    return read_rows(cfg.out)


def _done_for(out: Path, name: str) -> int:
    return sum(1 for r in read_rows(out) if r.get("backend") == name and r.get("phase") == "generate")


def _run_backend(cfg: CampaignConfig, name: str, seconds: float | None, progress) -> None:
    deadline = None if seconds is None else time.monotonic() + seconds
    restarts = 0
    while True:
        done = _done_for(cfg.out, name)
        if cfg.examples is not None and done >= cfg.examples:
            return
        if deadline is not None and time.monotonic() >= deadline:
            return
        budget = None if cfg.examples is None else cfg.examples - done
        remaining = None if deadline is None else deadline - time.monotonic()
        heartbeat = cfg.out / f"{name}.{HEARTBEAT}"
        heartbeat.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "fuzz.worker", "--backend", name, "--out", str(cfg.out),
               "--seed", str(cfg.seed + 7919 * restarts + done)]
        if budget is not None:
            cmd += ["--examples", str(budget)]
        if remaining is not None:
            cmd += ["--seconds", f"{remaining:.1f}"]
        for spec in cfg.specs:
            cmd += ["--spec", spec]
        if cfg.limits:
            cmd += ["--limits", json.dumps(cfg.limits)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                            os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        outcome = _watch(proc, heartbeat, cfg.example_timeout, deadline, progress, name)
        if outcome == "done":
            return
        restarts += 1
        if proc.returncode == STICKY_EXIT:  # the worker saved its case and left a poisoned device: go on
            if restarts >= 50:
                return
            continue
        current = _read_heartbeat(heartbeat)
        if not current.get("case"):  # the harness itself failed: say so once and give up on this backend
            output = proc.stdout.read()[-3000:] if proc.stdout else ""
            raise RuntimeError(f"worker for {name} failed before running a case:\n{output}")
        row = {"backend": name, "phase": "generate", "verdict": outcome, "case": current.get("case"),
               "message": (f"worker died (exit {proc.returncode}) while running this case" if outcome == "crash"
                           else f"no result within {cfg.example_timeout:.0f}s; worker killed"),
               "worker_output": (proc.stdout.read()[-3000:] if proc.stdout else "")}
        if current.get("case"):
            from .worker import save_case  # the dead worker could not save it

            row["case_file"] = save_case(cfg.out, name, current["case"], outcome)
        append_row(cfg.out, row)
        if restarts >= 50:
            return


def _read_heartbeat(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _watch(proc, heartbeat: Path, example_timeout: float, deadline, progress, name) -> str:
    """'done', 'crash' (exited non-zero) or 'timeout' (one example ran too long)."""
    while True:
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if progress is not None:
            progress(name)
        if proc.returncode is not None:
            return "done" if proc.returncode == 0 else "crash"
        beat = _read_heartbeat(heartbeat)
        started = beat.get("started")
        if started and time.time() - started > example_timeout:
            proc.kill()
            proc.wait()
            return "timeout"
