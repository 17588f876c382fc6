"""Campaigns survive crashing and hanging kernels, keep rows, resume, and replay saved cases."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fuzz.campaign import CampaignConfig, read_rows, run_campaign

SPEC = ("tests.fuzz.crashy:all_crashy",)


def _campaign(tmp_path: Path, backend: str, examples: int, **kw) -> list[dict]:
    cfg = CampaignConfig(out=tmp_path, backends=[backend], examples=examples, specs=SPEC, **kw)
    return run_campaign(cfg)


def test_a_segfaulting_kernel_is_a_crash_row_and_the_campaign_goes_on(tmp_path):
    rows = _campaign(tmp_path, "test-segfaults", 12, example_timeout=60)
    crashes = [r for r in rows if r["verdict"] == "crash"]
    assert crashes and all(r["case"] for r in crashes)
    assert any(r["verdict"] in ("pass", "blind") for r in rows)  # the campaign went on after the crash
    saved = json.loads(Path(crashes[0]["case_file"]).read_text())
    assert saved["replay"].startswith("attnref replay")


def test_a_sticky_device_error_is_saved_unshrunk_and_a_fresh_worker_goes_on(tmp_path):
    rows = _campaign(tmp_path, "test-sticky", 12, example_timeout=60)
    sticky = [r for r in rows if "illegal memory access" in str(r.get("message"))]
    assert sticky and any(r.get("phase") == "minimal" and "not shrunk" in r.get("note", "") for r in sticky)
    assert not any("poisoned earlier" in str(r.get("message")) for r in rows)  # nothing blamed afterwards
    assert any(r["verdict"] in ("pass", "blind") for r in rows if r.get("phase") == "generate")


def test_a_hanging_kernel_is_a_timeout_row(tmp_path):
    rows = _campaign(tmp_path, "test-hangs", 6, example_timeout=4)
    assert any(r["verdict"] == "timeout" for r in rows)


def test_resume_keeps_rows_and_continues_to_the_budget(tmp_path):
    first = _campaign(tmp_path, "torch-naive-paged", 5)
    again = run_campaign(CampaignConfig(out=tmp_path, backends=["torch-naive-paged"], examples=9, resume=True))
    gen = [r for r in again if r.get("phase") == "generate"]
    assert len(gen) == 9 and again[: len(first)] == first


def test_replay_of_a_saved_failure_reproduces_its_verdict(tmp_path):
    cfg = CampaignConfig(out=tmp_path, backends=["mutant-lse-base2"], examples=10)
    rows = run_campaign(cfg)
    minimal = [r for r in rows if r.get("phase") == "minimal"]
    assert minimal
    out = subprocess.run([sys.executable, "-m", "fuzz.cli", "replay", minimal[0]["case_file"]],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert json.loads(out.stdout)["verdict"] == minimal[0]["verdict"]


def test_rows_survive_a_cut_last_line(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"backend": "x", "verdict": "pass"}\n{"backend": "x", "verd')
    assert read_rows(tmp_path) == [{"backend": "x", "verdict": "pass"}]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_replay_of_a_cuda_case_without_cuda_says_why_instead_of_raising():
    case = Path(__file__).parents[2] / "benchmarks/results/cases/flex-flash-cuda-lse-ln2.json"
    out = subprocess.run([sys.executable, "-m", "fuzz.cli", "replay", str(case)], capture_output=True, text=True)
    assert out.returncode == 2 and "unavailable here: no CUDA device" in out.stderr, out.stderr
