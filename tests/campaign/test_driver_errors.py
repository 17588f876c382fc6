"""The driver never dies with a traceback: a worker it cannot (re)start, or an error of its own, ends the
campaign with one line and exit 3, every computed row kept; a working directory replaced under a running
campaign (a re-laid checkout) does not stop worker restarts."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from campaign import pool
from campaign.engine import EXIT_HARNESS, HARNESS_ERRORS_PER_BACKEND, CampaignConfig, Driver, run_campaign
from campaign.store import read_rows
from tests.campaign.test_interrupts import _workers_of

SPEC = ("tests.fuzz.crashy:all_crashy",)
ROOT = Path(__file__).resolve().parents[2]


def _campaign(out: Path, backend: str, examples: int):
    cfg = CampaignConfig(out=out, backends=[backend], examples=examples, specs=SPEC, workers=1, progress=False,
                         example_timeout=60)
    return run_campaign(cfg)


def test_a_worker_that_cannot_be_restarted_ends_the_campaign_with_one_line_and_exit_3(tmp_path, monkeypatch):
    real_start, starts = pool.LocalPool.start, []

    def start(self, wid, slot):  # the first worker starts; its replacement after the first segfault cannot
        starts.append(wid)
        if len(starts) > 1:
            raise OSError(24, "Too many open files")
        real_start(self, wid, slot)

    monkeypatch.setattr(pool.LocalPool, "start", start)
    result = _campaign(tmp_path, "test-segfaults", 6)
    assert result.status == EXIT_HARNESS
    assert result.harness_errors == ["worker 1 could not be started: OSError: [Errno 24] Too many open files"]
    crashes = [r for r in read_rows(tmp_path) if r.get("phase") == "generate" and r["verdict"] == "crash"]
    assert crashes  # the row of the case whose worker died is kept


def test_a_harness_error_in_one_case_is_reported_and_its_backend_runs_on(tmp_path, monkeypatch):
    """Given up at its first harness error, fa4-paged lost its campaign at minute 2 for one case
    (benchmarks/results/campaigns/jit-untold-fa4-cold-warm-h200-2026-11-27.md)."""
    monkeypatch.setenv("ATTNREF_TEST_MARKER", str(tmp_path / "met"))
    result = _campaign(tmp_path / "out", "test-harness-error-once", 6)
    assert result.status == EXIT_HARNESS
    (error,) = result.harness_errors
    assert "a bug in the harness" in error and "the case it was on: {" in error
    rows = [r for r in read_rows(tmp_path / "out") if r.get("phase") == "generate"]
    assert len(rows) == 6 and not any(r.get("worker_died") for r in rows)  # no case blamed for the harness's error


def test_a_backend_whose_every_task_fails_in_the_harness_is_given_up(tmp_path):
    result = _campaign(tmp_path, "test-harness-error", 6)
    assert result.status == EXIT_HARNESS and len(result.harness_errors) == HARNESS_ERRORS_PER_BACKEND
    assert not [r for r in read_rows(tmp_path) if r.get("phase") == "generate"]


def test_an_internal_driver_error_is_one_line_exit_3_and_a_logged_traceback(tmp_path, monkeypatch):
    calls = []

    def check_hangs(self):
        calls.append(1)
        if len(calls) == 20:
            raise KeyError("beat")

    monkeypatch.setattr(Driver, "_check_hangs", check_hangs)
    result = _campaign(tmp_path, "test-slow", 40)
    assert result.status == EXIT_HARNESS
    (line,) = result.harness_errors
    assert line.startswith("internal driver error: KeyError: 'beat' (traceback in ") and "\n" not in line
    assert "_check_hangs" in (tmp_path / "logs" / "driver.log").read_text()


def test_workers_restart_after_the_driver_s_working_directory_is_replaced(tmp_path):
    """Measured on an H100: a device call re-laid the checkout under a running campaign and the driver died in
    os.getcwd() at the next worker restart (FileNotFoundError, exit 1). Workers now start in the directory
    resolved at launch, which exists again. (A worker killed here stands for one that crashes after the re-lay.)"""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    cmd = [sys.executable, "-m", "cli", "--backend-spec", SPEC[0], "fuzz", "--backend", "test-slow",
           "--examples", "40", "--workers", "1", "--shard-size", "10", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=work, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    end = time.time() + 60
    while time.time() < end and not any(r.get("phase") == "generate" for r in read_rows(out)):
        time.sleep(0.1)  # a worker is up: the directory goes while the campaign runs
    shutil.rmtree(work)  # the checkout re-laid: same path, a new directory
    work.mkdir()
    for pid in _workers_of(out):
        os.kill(pid, signal.SIGKILL)  # its replacement starts after the re-lay
    _, err = proc.communicate(timeout=300)
    # 1 when the kill met a running case (its crash row), 0 when it met the worker between two tasks
    assert "Traceback" not in err and proc.returncode in (0, 1), err
    assert (out / "logs" / "worker-1.log").exists()  # the replacement started, in the re-created directory
    generated = [r for r in read_rows(out) if r.get("phase") == "generate"]
    assert len(generated) == 40 and sum(r["verdict"] == "crash" for r in generated) <= 1  # and went on
