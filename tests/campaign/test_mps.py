"""--mps: the daemon starts before the workers and stops after them, a running one is left alone, and a missing or
failing control program is one line, not an error (a stand-in nvidia-cuda-mps-control on the PATH)."""
from __future__ import annotations

import os
import stat

from campaign import mps
from campaign.engine import CampaignConfig, run_campaign

STAND_IN = """#!/bin/sh
# records each call; -d makes the control pipe that marks a running daemon, "quit" on stdin removes it
if [ "$1" = "-d" ]; then echo start >> "$LOG"; [ -n "$FAIL" ] && { echo "cannot start: no GPU" >&2; exit 3; }
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY"; touch "$CUDA_MPS_PIPE_DIRECTORY/control"; exit 0; fi
read cmd; echo "$cmd" >> "$LOG"; rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
"""


def stand_in(tmp_path, monkeypatch, fail: bool = False):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / mps.CONTROL
    tool.write_text(STAND_IN)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "pipe"))
    monkeypatch.setenv("LOG", str(tmp_path / "calls"))
    if fail:
        monkeypatch.setenv("FAIL", "1")
    return tmp_path / "calls"


def test_a_campaign_starts_the_daemon_first_and_stops_it_after(tmp_path, monkeypatch):
    calls = stand_in(tmp_path, monkeypatch)
    seen = []
    monkeypatch.setattr("campaign.engine._run_campaign", lambda cfg: seen.append(mps.running()) or "result")
    assert run_campaign(CampaignConfig(out=tmp_path / "out", backends=["torch-sdpa-math"], mps=True)) == "result"
    assert seen == [True] and not mps.running()
    assert calls.read_text().split() == ["start", "quit"]


def test_a_running_daemon_is_used_and_left_running(tmp_path, monkeypatch):
    calls = stand_in(tmp_path, monkeypatch)
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "control").touch()
    with mps.mps_daemon() as what:
        assert what == "running already"
    assert mps.running() and not calls.exists()


def test_a_failing_or_missing_control_program_is_one_line(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, fail=True)
    said = []
    with mps.mps_daemon(said.append) as what:
        assert what.startswith("start failed")
    assert said == ["--mps: nvidia-cuda-mps-control -d failed (cannot start: no GPU); the campaign runs without MPS"]
    monkeypatch.setenv("PATH", "/nonexistent")
    with mps.mps_daemon(said.append) as what:
        assert what == "nvidia-cuda-mps-control not found" and len(said) == 2


def test_without_mps_nothing_is_started(tmp_path, monkeypatch):
    calls = stand_in(tmp_path, monkeypatch)
    monkeypatch.setattr("campaign.engine._run_campaign", lambda cfg: "result")
    run_campaign(CampaignConfig(out=tmp_path / "out", backends=["torch-sdpa-math"]))
    assert not calls.exists()
