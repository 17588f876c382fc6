"""The same campaign through Ray actors (a local Ray with this machine's CPUs): same cases and
verdicts as the local pool, planted bugs killed, a dying actor recorded as a crash, no row lost."""
from __future__ import annotations

import json

import pytest

from campaign.engine import CampaignConfig, run_campaign

ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'attnref[ray]'); make test installs it")

SPEC = ("tests.fuzz.crashy:all_crashy",)
# The planted bug is the LSE-base one, which nearly every case shows: whether a window bug shows within 24
# draws depends on the draw (a window over EDGE values hides a one-key shift), which is not what this tests.
BACKENDS = ["torch-naive-paged", "torch-sdpa-math", "mutant-lse-base2", "test-segfaults"]


def _generated(rows):
    return sorted((r["backend"], r["example_id"], r["case"], r["verdict"]) for r in rows if r.get("phase") == "generate")


def test_a_ray_campaign_equals_the_local_pool_kills_the_mutant_and_records_a_dying_actor(tmp_path):
    # two shards a backend: each of test-segfaults' cases restarts a process (a third shard cost 20 of 66 s; shards of 4
    # instead of 8 took the test from 40.1 to 24.6 s on the 2-core CPU)
    common = dict(backends=BACKENDS, examples=8, shard_size=4, seed=5, workers=2, specs=SPEC, progress=False,
                  example_timeout=60)
    through_ray = run_campaign(CampaignConfig(out=tmp_path / "ray", use_ray=True, **common))
    local = run_campaign(CampaignConfig(out=tmp_path / "local", **common))
    assert _generated(through_ray.rows) == _generated(local.rows)
    assert len(_generated(through_ray.rows)) == 8 * len(BACKENDS)
    assert any(r["backend"] == "mutant-lse-base2" and r["verdict"] == "mismatch" for r in through_ray.rows)
    died = [r for r in through_ray.rows if r["backend"] == "test-segfaults" and r.get("worker_died")]
    assert died and all(r["verdict"] == "crash" and r["case"] for r in died)
    assert through_ray.status == local.status == 1
    assert not any(r["verdict"] == "crash" for r in through_ray.rows if r["backend"] != "test-segfaults")
    lines = (tmp_path / "ray" / "rows.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in lines)
