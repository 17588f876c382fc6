"""Campaigns survive crashing and hanging kernels, keep every row, resume exactly, bucket failures,
replay saved cases first, and exit with a status a CI job can gate on."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from campaign.engine import CampaignConfig, run_campaign
from campaign.store import read_rows
from campaign.tasks import WorkerConfig
from fuzz.simplify import STEPS

SPEC = ("tests.fuzz.crashy:all_crashy",)


def _campaign(tmp_path: Path, backends, examples: int, **kw):
    kw.setdefault("workers", 1)
    kw.setdefault("progress", False)
    cfg = CampaignConfig(out=tmp_path, backends=list(backends), examples=examples, specs=SPEC, **kw)
    return run_campaign(cfg)


def _generated(rows):
    return [r for r in rows if r.get("phase") == "generate"]


def test_a_segfaulting_kernel_is_a_crash_row_and_the_campaign_goes_on(tmp_path):
    result = _campaign(tmp_path, ["test-segfaults"], 6, example_timeout=60)
    crashes = [r for r in result.rows if r["verdict"] == "crash" and r.get("phase") == "generate"]
    assert crashes and all(r["case"] and r.get("worker_died") for r in crashes)
    # the row of a dead worker's case carries its summary like any other (coverage and report count it)
    assert all(r["features"] is not None and r["dtype"] and r["size_tier"] for r in crashes)
    assert len(_generated(result.rows)) == 6  # the crashed examples count; the shard went on after them
    saved = [r for r in result.rows if r.get("phase") == "minimal" and r.get("case_file")]
    assert saved and json.loads(Path(saved[0]["case_file"]).read_text())["replay"].startswith("attnref replay")
    assert result.status == 1


def test_a_sticky_device_error_is_saved_unshrunk_and_a_fresh_worker_goes_on(tmp_path):
    rows = _campaign(tmp_path, ["test-sticky"], 8, example_timeout=60).rows
    sticky = [r for r in rows if "illegal memory access" in str(r.get("message"))]
    assert sticky and any(r.get("phase") == "minimal" and "not shrunk" in r.get("note", "") for r in sticky)
    assert not any("poisoned earlier" in str(r.get("message")) for r in rows)  # nothing blamed afterwards
    assert any(r["verdict"] in ("pass", "blind") for r in _generated(rows))


def test_a_hanging_kernel_is_a_timeout_row(tmp_path):
    rows = _campaign(tmp_path, ["test-hangs"], 4, example_timeout=3).rows
    timeouts = [r for r in rows if r["verdict"] == "timeout" and r.get("phase") == "generate"]
    assert timeouts and all(r["dtype"] and "head_size" in r for r in timeouts)


def test_a_first_compile_gets_the_compile_timeout_and_a_later_call_the_example_timeout(tmp_path):
    focus = {"dtypes": ["float32"], "head_sizes": [16]}  # one compile key: one 3-s first call per worker
    rows = _generated(_campaign(tmp_path / "lenient", ["test-compiles"], 4, example_timeout=1.5, compile_timeout=60,
                                limits=focus).rows)
    assert len(rows) == 4 and {r["verdict"] for r in rows} <= {"pass", "blind"}
    strict = _generated(_campaign(tmp_path / "strict", ["test-compiles"], 1, example_timeout=1.5, compile_timeout=None,
                                  limits=focus).rows)
    assert [r["verdict"] for r in strict] == ["timeout"] and "within 2s" in strict[0]["message"]


def test_resume_keeps_rows_and_reaches_the_budget_without_repeating_an_example(tmp_path):
    first = _campaign(tmp_path, ["torch-naive-paged"], 5, shard_size=4).rows
    again = _campaign(tmp_path, ["torch-naive-paged"], 9, shard_size=4, resume=True).rows
    gen = _generated(again)
    assert len(gen) == 9 and len({r["example_id"] for r in gen}) == 9
    assert again[: len(first)] == first and {r["run"] for r in gen} == {1, 2}


def test_concurrent_workers_write_whole_rows_and_cover_each_example_once(tmp_path):
    result = _campaign(tmp_path, ["torch-naive-paged", "torch-sdpa-math"], 24, workers=2, shard_size=6)
    gen = _generated(result.rows)
    assert Counter(r["backend"] for r in gen) == {"torch-naive-paged": 24, "torch-sdpa-math": 24}
    assert len({(r["backend"], r["example_id"]) for r in gen}) == 48
    assert len({r["worker"] for r in gen}) == 2 and result.status == 0
    lines = (tmp_path / "rows.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in lines)


def test_the_same_seed_draws_the_same_cases_whatever_the_number_of_workers(tmp_path):
    one = _campaign(tmp_path / "one", ["torch-naive-paged"], 16, workers=1, shard_size=4, seed=7).rows
    two = _campaign(tmp_path / "two", ["torch-naive-paged"], 16, workers=2, shard_size=4, seed=7).rows
    key = lambda rows: sorted((r["example_id"], r["case"], r["verdict"]) for r in _generated(rows))  # noqa: E731
    assert key(one) == key(two)


def test_a_planted_bug_is_one_bucket_shrunk_once(tmp_path):
    result = _campaign(tmp_path, ["mutant-window-off-by-one"], 150, workers=2)
    failures = [r for r in _generated(result.rows) if r["verdict"] == "mismatch"]
    saved = list((tmp_path / "cases").glob("*.json"))
    assert len(failures) >= 3 and 1 <= len(saved) <= 3
    shrink_rows = sum(1 for r in result.rows if r.get("phase") == "shrink")
    # each shrink keeps to its budget (WorkerConfig.shrink_examples, then at most len(fuzz.simplify.STEPS) runs);
    # a bug drawn first as a raw-API kernel case shrinks within that case's region (its minimal case keeps
    # `paged_kernel`), so decoder-window hits of the same bug get a second and third shrink: 497 rows for 3
    # shrinks on this draw
    assert shrink_rows <= len(saved) * (WorkerConfig().shrink_examples + len(STEPS))
    assert result.status == 1


def test_saved_minimal_cases_are_replayed_first_and_show_when_fixed(tmp_path):
    _campaign(tmp_path, ["mutant-lse-base2"], 20)
    saved = json.loads(next((tmp_path / "cases").glob("*.json")).read_text())
    saved["backend"] = "torch-naive-paged"  # as if the kernel were fixed: its correct twin replays the case
    (tmp_path / "cases" / "fixed.json").write_text(json.dumps(saved))
    result = _campaign(tmp_path, ["torch-naive-paged"], 4)
    replays = [r for r in result.rows if r.get("phase") == "replay"]
    assert replays and replays[0]["fixed"] and result.rows[0]["phase"] == "replay"


def test_replay_of_a_saved_failure_reproduces_its_verdict(tmp_path):
    rows = _campaign(tmp_path, ["mutant-lse-base2"], 10).rows
    minimal = [r for r in rows if r.get("phase") == "minimal" and r.get("case_file")]
    out = subprocess.run([sys.executable, "-m", "cli", "replay", minimal[0]["case_file"]],
                         capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["verdict"] == minimal[0]["verdict"]


def test_rows_survive_a_cut_last_line_and_resume_writes_after_it(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"backend": "x", "verdict": "pass"}\n{"backend": "x", "verd')
    assert read_rows(tmp_path) == [{"backend": "x", "verdict": "pass"}]
    _campaign(tmp_path, ["torch-naive-paged"], 2, resume=True)
    rows = read_rows(tmp_path)
    assert rows[0] == {"backend": "x", "verdict": "pass"} and len(_generated(rows)) == 2


def test_exit_status_is_zero_when_clean_one_for_new_failures_two_for_usage(tmp_path):
    def attnref(*args):
        return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True)

    clean = attnref("fuzz", "--backend", "torch-sdpa-math", "--examples", "3", "--workers", "1", "--out",
                    str(tmp_path / "a"), "--quiet")
    assert clean.returncode == 0, clean.stderr
    found = attnref("fuzz", "--backend", "mutant-lse-base2", "--mutants", "--examples", "6", "--workers", "1",
                    "--out", str(tmp_path / "b"), "--quiet")
    assert found.returncode == 1 and "new failure buckets: 1" in found.stdout and "replay:  attnref replay" in found.stdout
    usage = attnref("fuzz", "--limits", '{"max_contxt": 5}', "--out", str(tmp_path / "c"))
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1 and "max_context" in usage.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_replay_of_a_cuda_case_without_cuda_says_why_instead_of_raising():
    case = Path(__file__).parents[2] / "benchmarks/results/cases/flex-flash-cuda-lse-ln2.json"
    out = subprocess.run([sys.executable, "-m", "cli", "replay", str(case)], capture_output=True, text=True)
    assert out.returncode == 2 and "unavailable here: no CUDA device" in out.stderr, out.stderr


def test_a_tampered_saved_case_is_rejected_by_validation_not_run(tmp_path):
    (tmp_path / "cases").mkdir(parents=True)
    bad = {"backend": "torch-naive-paged", "case": {"sequences": [{"query_len": -4}], "num_heads": 2}}
    (tmp_path / "cases" / "tampered.json").write_text(json.dumps(bad))
    rows = _campaign(tmp_path, ["torch-naive-paged"], 2).rows
    replayed = [r for r in rows if r.get("phase") == "replay"]
    assert replayed and replayed[0]["verdict"] == "unsupported" and "no longer valid" in replayed[0]["message"]
    assert len(_generated(rows)) == 2


def test_the_warm_up_shard_draws_small_cases_and_the_rest_every_tier(tmp_path):
    """Shard 0 of a backend is the warm-up: small cases only, so a shallow bug shows in milliseconds;
    the shards after it draw every size tier."""
    from campaign.scheduler import WARMUP_SHARD
    from fuzz.strategies import Limits

    rows = _generated(_campaign(tmp_path, ["torch-naive-paged"], WARMUP_SHARD + 60).rows)
    warm = [r for r in rows if r["shard"] == 0]
    later = [r for r in rows if r["shard"] > 0]
    small = Limits().max_context + Limits().max_query  # the small tier's most keys
    assert len(warm) == WARMUP_SHARD and max(r["max_kv_len"] for r in warm) <= small
    assert max(r["max_kv_len"] for r in later) > small


def test_a_jit_backend_s_shards_each_draw_one_compile_slice(tmp_path):
    from backends.registry import get
    from fuzz.strategies import Limits, compile_slices

    rows = _generated(_campaign(tmp_path, ["test-jit"], 60, shard_size=10, workers=2, compile_slices=True).rows)
    jit = get("test-jit", specs=SPEC)
    slices = compile_slices(jit.caps, Limits(), jit.compiled_per, jit.compiled_features)
    assert len(slices) > 4
    later = [r for r in rows if r["shard"] > 0]
    assert len(later) == 50  # shard 0, the warm-up (10 here), draws the whole (small-tier) space
    for r in later:
        want = slices[(r["shard"] - 1) % len(slices)]
        assert ((r["dtype"],), (r["head_size"],)) == (want.dtypes, want.head_sizes)
        drawn = set(filter(None, r["features"].split(",")))
        assert not drawn & ({"sinks", "soft_cap"} - set(want.features)), (drawn, want.features)
    for worker in {r["worker"] for r in later}:  # a worker stays on its slice (its compiled kernels) for a while
        mine = [r for r in later if r["worker"] == worker]
        assert len({(r["dtype"], r["head_size"]) for r in mine}) < len({r["shard"] for r in mine}) or len(mine) <= 10
    plain = _generated(_campaign(tmp_path / "plain", ["test-jit"], 50, shard_size=10, workers=1).rows)
    # without slices the warm-up draws the whole space; later shards draw one key each: a loaded one (focused), or
    # one nothing was drawn of (a tour, a few cases), until every declared key was drawn
    assert len({(r["dtype"], r["head_size"]) for r in plain if r["shard"] == 0}) > 1
    assert all(r.get("focus_key") == r["compile_key"] for r in plain if r["shard"] > 0)
    tours = [r for r in plain if r.get("tour")]
    assert tours and len({r["focus_key"] for r in tours}) == len({r["shard"] for r in tours})
    focused = [r for r in plain if r.get("focus_key") and not r.get("tour")]  # from one key the worker has loaded
    assert focused and not any(r.get("first_of_key") for r in focused)
