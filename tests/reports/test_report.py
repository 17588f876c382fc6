"""The report builds from a synthetic results set with every verdict, escapes markup, and renders."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from campaign.store import RowStore
from reports.build import build_report, load_rows, tolerance_table

VERDICTS = ["pass", "blind", "unsupported", "mismatch", "nan", "contract", "crash", "timeout"]
MARKUP = "<script>alert('x')</script>"


def _synthetic(out: Path) -> None:
    store = RowStore(out)
    for i, v in enumerate(VERDICTS * 3):
        store.append({"backend": f"b{i % 2}", "verdict": v, "phase": "generate", "dtype": "bfloat16",
                         "kv_cache_dtype": "auto", "features": "gqa,window" if i % 3 else "", "attn_type": "decoder",
                         "case": json.dumps({"note": MARKUP}), "message": f"{v} {MARKUP}", "error_ratio": 0.1 * (i + 1),
                         "max_err": 0.01 * i, "limit": 0.05})
    case = {"sequences": [{"query_len": 2, "context_len": 1, "encoder_len": 0}], "num_heads": 2, "head_size": 4,
            "tag": MARKUP}
    (out / "cases" / "b0-abc.json").write_text(json.dumps({
        "backend": "b0", "verdict": "mismatch", "case": case, "replay": "attnref replay x --backend b0",
        "row": {"message": "max error 1 > limit 0.1", "max_err": 1.0, "limit": 0.1, "worst_token_flat": 1, "worst_head": 0}}))
    torch.save({"expected_output": torch.zeros(2, 2, 4), "actual_output": torch.ones(2, 2, 4),
                "expected_lse": torch.zeros(2, 2), "actual_lse": torch.full((2, 2), float("-inf")),
                "query_start_loc": torch.tensor([0, 2])}, out / "cases" / "b0-abc.pt")


def test_report_builds_every_artifact(tmp_path):
    _synthetic(tmp_path)
    paths = build_report(tmp_path)
    for name in ("results.csv", "results.parquet", "tolerance.csv", "junit.xml", "summary.md"):
        assert (tmp_path / name).exists(), name
    index = paths["index"].read_text()
    page = (paths["index"].parent / "b0-abc.html").read_text()
    assert "data:image/png;base64," in page and "attnref replay x --backend b0" in page
    assert MARKUP not in index and MARKUP not in page
    assert "&lt;script&gt;" in page  # the case field is shown, as text
    assert "failures=" in (tmp_path / "junit.xml").read_text()


def test_a_row_without_summary_fields_does_not_stop_the_report(tmp_path):
    # a timeout row written before beats carried the summary (rows.jsonl of attnref before 2026-11-24) has only
    # backend, case and verdict
    _synthetic(tmp_path)
    RowStore(tmp_path).append({"backend": "b0", "verdict": "timeout", "phase": "generate", "case": "{}",
                               "message": "no result within 240s; worker killed", "worker_died": True})
    assert build_report(tmp_path)["index"].exists()


def test_an_output_with_infinities_gets_its_figures():
    """A float16 kernel output that overflowed to inf stopped the report with matplotlib's OverflowError (an FA4
    case on an H200): the heatmap took inf for the largest float64, a finite error, so its colour scale had no end."""
    from reports.figures import failure_figures

    actual = torch.ones(2, 2, 4, dtype=torch.float16)
    actual[1, 0] = torch.tensor([-497.0, float("inf"), 311.0, -773.5])
    figures = failure_figures({"expected_output": torch.zeros(2, 2, 4), "actual_output": actual,
                               "query_start_loc": torch.tensor([0, 2])}, {"worst_token_flat": 1, "worst_head": 0})
    assert {"heatmap", "worst_row"} <= set(figures)


def test_a_figure_that_cannot_be_drawn_leaves_its_page_and_says_why(tmp_path, monkeypatch):
    from reports import pages

    def fails(*args):
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(pages, "failure_figures", fails)
    _synthetic(tmp_path)
    page = (build_report(tmp_path)["index"].parent / "b0-abc.html").read_text()
    assert "figures not drawn: OverflowError: cannot convert float infinity to integer" in page


def test_probe_rows_show_in_the_report_latest_run_wins(tmp_path):
    _synthetic(tmp_path)
    rows = [dict(backend="b0", probe="lse_base", question="q", verdict="convention", detail=f"base 2 {MARKUP}"),
            dict(backend="b0", probe="causal_alignment", question="q", verdict="convention", detail="old"),
            dict(backend="b0", probe="causal_alignment", question="q", verdict="pass", detail="")]
    (tmp_path / "probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut')
    index = build_report(tmp_path)["index"].read_text()
    summary = (tmp_path / "summary.md").read_text()
    assert "Convention probes: 1 of 2" in summary and "`lse_base` convention" in summary
    assert "causal_alignment" in index and "base 2 &lt;script&gt;" in index and MARKUP not in index


def test_tolerance_table_counts_and_pass_rate(tmp_path):
    _synthetic(tmp_path)
    tol = tolerance_table(load_rows(tmp_path))
    assert tol["examples"].sum() == 24 and set(tol.columns) >= {"pass_rate", "ratio_p90", "worst_ratio"}


@pytest.mark.browser
def test_report_renders_in_headless_chromium(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (.ci/run installs it with apt-get where it can)")
    _synthetic(tmp_path)
    paths = build_report(tmp_path)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    for page in (paths["index"], paths["index"].parent / "b0-abc.html"):
        dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                             timeout=120).stdout
        assert "<table" in dom
        assert "<script>alert" not in dom  # the markup in a case field stayed text
    dom = subprocess.run([chromium, *flags, "--dump-dom", (paths["index"].parent / "b0-abc.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'id="heatmap"' in dom and 'id="case"' in dom and "&lt;script&gt;" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,900", paths["index"].as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 1000


def _many_rows(out: Path, n: int) -> None:
    import random

    rng = random.Random(0)
    store = RowStore(out)
    verdicts = ["pass"] * 90 + ["blind"] * 5 + ["mismatch"] * 3 + ["unsupported"] * 2
    case = json.dumps({"sequences": [{"query_len": 1, "context_len": 7}]})
    for i in range(n):
        v = rng.choice(verdicts)
        store.append({"backend": f"backend-{i % 6}", "verdict": v, "phase": "generate", "dtype": "bfloat16",
                      "kv_cache_dtype": "auto", "features": rng.choice(["gqa", "window,gqa", "", "sinks"]),
                      "attn_type": "decoder", "case": case, "message": "", "error_ratio": rng.random() * (3 if v == "mismatch" else 0.9),
                      "symptom": "output" if v == "mismatch" else "", "size_tier": rng.choice(["small", "tile", "long"]),
                      "example_id": f"b/{i // 100}/{i % 100}", "t": 1.7e9 + i})
    store.close()


def test_a_100k_row_report_stays_small(tmp_path):
    _many_rows(tmp_path, 100_000)
    index = build_report(tmp_path)["index"]
    assert index.stat().st_size < 400_000  # aggregates and figures, no DOM row per example
    text = index.read_text()
    assert "backend-5" in text and 'id="buckets"' in text and 'id="coverage"' in text


@pytest.mark.browser
def test_a_100k_row_report_renders_in_headless_chromium_under_two_seconds(tmp_path):
    import time

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (.ci/run installs it with apt-get where it can)")
    _many_rows(tmp_path, 100_000)
    index = build_report(tmp_path)["index"]
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}"]
    subprocess.run([chromium, *flags, "--dump-dom", "about:blank"], capture_output=True, timeout=120)  # warm start
    blank = time.perf_counter()
    subprocess.run([chromium, *flags, "--dump-dom", "about:blank"], capture_output=True, timeout=120)
    blank = time.perf_counter() - blank
    start = time.perf_counter()
    dom = subprocess.run([chromium, *flags, "--dump-dom", index.as_uri()], capture_output=True, text=True, timeout=120).stdout
    spent = time.perf_counter() - start
    assert "<table" in dom and spent - blank < 2.0, (spent, blank)  # the page's own share of the time
