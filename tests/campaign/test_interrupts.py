"""A campaign stopped by SIGINT / SIGTERM stops its workers, keeps its rows and resumes exactly;
a driver killed outright leaves no worker running."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign.store import read_rows

BUDGET = 80


def _start(out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cli", "--backend-spec", "tests.fuzz.crashy:all_crashy", "fuzz", "--backend",
           "test-slow", "--examples", str(BUDGET), "--workers", "2", "--shard-size", "10", "--out", str(out),
           "--quiet", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_rows(out: Path, n: int, timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if sum(1 for r in read_rows(out) if r.get("phase") == "generate") >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} rows after {timeout}s")


def _workers_of(out: Path) -> list[int]:
    """Live processes whose environment names this campaign (every worker carries ATTNREF_CAMPAIGN)."""
    tag = f"ATTNREF_CAMPAIGN={out.resolve()}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if tag in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().split(")")[-1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _gone_within(out: Path, seconds: float) -> bool:
    end = time.time() + seconds
    while time.time() < end:
        if not _workers_of(out):
            return True
        time.sleep(0.2)
    return False


pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc to find workers (Linux)")


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_every_worker_keeps_the_rows_and_resume_reaches_the_budget(tmp_path, signum, status):
    proc = _start(tmp_path)
    _wait_for_rows(tmp_path, 10)
    assert _workers_of(tmp_path)
    sent = time.time()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == status, err
    assert time.time() - sent < 10
    assert "Traceback" not in err and "--resume" in err
    assert _gone_within(tmp_path, 5)
    first = read_rows(tmp_path)
    done = [r for r in first if r.get("phase") == "generate"]
    assert 10 <= len(done) < BUDGET

    again = _start(tmp_path, "--resume")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    rows = read_rows(tmp_path)
    generated = [r for r in rows if r.get("phase") == "generate"]
    assert len(generated) == BUDGET and len({r["example_id"] for r in generated}) == BUDGET
    assert rows[: len(first)] == first


def test_a_killed_driver_leaves_no_worker_running(tmp_path):
    proc = _start(tmp_path)
    _wait_for_rows(tmp_path, 5)
    assert _workers_of(tmp_path)
    proc.kill()
    proc.wait()
    assert _gone_within(tmp_path, 5)
    for line in (tmp_path / "rows.jsonl").read_text().splitlines()[:-1]:
        json.loads(line)  # every row but a torn last one is whole
