"""`attnref fuzz --profile DIR`: every worker's tasks and the driver under cProfile, tabulated by call and family."""
from __future__ import annotations

from pathlib import Path

from campaign.engine import CampaignConfig, run_campaign
from campaign.profiling import TaskProfiler, driver_profile, family, merged, profile_table


def test_a_profiled_campaign_leaves_each_worker_s_and_the_driver_s_statistics(tmp_path):
    """The workers' merged profile holds the evaluation's calls (the oracle, the judge, hypothesis' draws), and the
    driver's its own loop: the table a user reads to see where a campaign's time goes."""
    folder = tmp_path / "prof"
    result = run_campaign(CampaignConfig(out=tmp_path / "out", backends=["torch-sdpa-math"], examples=6, workers=2,
                                         replay_saved=False, progress=False, profile_dir=str(folder)))
    assert [r for r in result.rows if r.get("phase") == "generate"]
    workers = sorted(folder.glob("worker-*.prof"))
    assert workers and (folder / "driver.prof").exists()
    table = profile_table(folder, top=200)
    assert f"{len(workers)} processes" in table
    assert "oracle, inputs (reference/)" in table and "hypothesis" in table
    calls = {(Path(f).name, name) for f, _, name in merged(workers).stats}
    assert {("compare.py", "evaluate"), ("inputs.py", "materialize")} <= calls
    assert "_loop" in profile_table(folder, top=200, files="driver.prof")


def test_without_a_folder_nothing_is_profiled_or_written(tmp_path, monkeypatch):
    """A campaign without --profile passes no folder: the worker's and the driver's wrappers do nothing."""
    monkeypatch.chdir(tmp_path)
    profiler = TaskProfiler(None)
    with profiler.task(), driver_profile(None):
        sum(range(1000))
    assert profiler.profile is None and not list(tmp_path.rglob("*"))


def test_families_follow_the_file_a_call_is_in_or_a_builtin_s_name():
    assert family("/repo/reference/softmax.py", "probabilities") == "oracle, inputs (reference/)"
    assert family("/x/site-packages/hypothesis/internal/conjecture/data.py", "draw") == "hypothesis"
    assert family("~", "<built-in method torch.einsum>") == "torch operators (C++)"
    assert family("/x/site-packages/torch/functional.py", "norm") == "torch (Python)"
    assert family("~", "<method 'flush' of '_io.TextIOWrapper' objects>").startswith("other")
    # an installed library's folder named like a package of the repository is the library's, and the reverse
    assert family("/opt/torch/.venv/lib/python3.12/site-packages/numpy/core/fromnumeric.py", "sum").startswith("other")
    assert family("/opt/torch/checkout/reference/packed.py", "attend") == "oracle, inputs (reference/)"
