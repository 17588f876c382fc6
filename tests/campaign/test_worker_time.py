"""benchmarks/jit_campaign.py's split of worker time after the first minutes (issue #35's measure)."""
from __future__ import annotations

from benchmarks.jit_campaign import BUILD_ROW_S, SLOW_CALL_S, by_minute, pauses, worker_time


def test_the_worker_time_split_names_slow_calls_past_a_first_call():
    """benchmarks/jit_campaign.py: a kernel call over SLOW_CALL_S that was no first call is a build the backend's
    variant does not name (FA4's per soft-cap value, 1-9 s); it stays in evaluation and is printed beside it."""
    record = {"started": 0.0, "ended": 10.0, "workers": 1}
    rows = [{"phase": "generate", "t": 3.0, "kernel_s": 2.0, "compile_s": 2.0},  # a first call: compile
            {"phase": "generate", "t": 6.0, "kernel_s": 3 * SLOW_CALL_S, "compile_s": None},  # a build past it
            {"phase": "generate", "t": 7.0, "kernel_s": 0.001, "oracle_s": 0.999}]  # evaluation
    w = worker_time(rows, record, after=0.0)
    assert (round(w["compile"]), round(w["evaluation"]), round(w["slow"], 1)) == (20, 25, 15.0)


def test_the_minutes_split_the_campaign_as_the_whole_does_and_name_the_builds_that_ran_in_them():
    """A second formulation: the minutes' worker-seconds add up to the whole campaign's split."""
    record = {"started": 100.0, "ended": 100.0 + 150.0, "workers": 2}  # two minutes and 30 s
    build = {"phase": "generate", "t": 100.0 + 70.0, "kernel_s": 40.0, "compile_s": 40.0, "backend": "fi"}
    rows = [build] + [{"phase": "generate", "t": 100.0 + s + 1.0, "oracle_s": 0.5, "backend": "fi"}
                      for s in range(150)]
    minutes = by_minute(rows, record)
    assert [m["minute"] for m in minutes] == [0, 1, 2]
    seconds = {k: sum(m[k] / 100 * record["workers"] * min(60.0, 150.0 - 60.0 * m["minute"]) for m in minutes)
               for k in ("compile", "evaluation")}
    whole = worker_time(rows, record, after=0.0)
    for k in seconds:
        assert abs(seconds[k] - whole[k] / 100 * record["workers"] * 150.0) < 1e-6
    assert BUILD_ROW_S < 40.0 and [len(m["builds"]) for m in minutes] == [1, 1, 0]  # 30-70 s: both first minutes
    record = dict(record, build_pauses=[[130.0, True, 0.05], [140.0, False, 0.06], [145.0, True, 0.06]])
    assert pauses(record).startswith("paused 2 times from 130 s, 15 s in all")  # 10 s, then 145-150 s


def test_a_focused_shard_whose_key_cannot_be_drawn_is_exhausted_not_a_harness_error(tmp_path):
    """hypothesis raises Unsatisfiable when a shard's filter rejects every draw (a key outside what the focus draws):
    the shard ends as exhausted and the worker goes on."""
    from campaign.tasks import Task, TaskKind, WorkerConfig
    from campaign.worker import Worker

    sent = []
    worker = Worker(WorkerConfig(cache_dir=str(tmp_path), specs=("tests.campaign.fake_jit:backends",)), send=sent.append)
    # head size 7 is not declared: the focus falls back to the declared sizes, whose cases the key's filter rejects
    worker.run(Task(TaskKind.GENERATE, "test-fake-jit", shard=3, size=2, start=0, key='["float32", [7, 7]]'))
    done = [m for m in sent if m["type"] == "done"]
    assert done and done[0]["exhausted"] and not [m for m in sent if m["type"] == "row"]


def test_the_tier_table_counts_each_groups_blind_rows_apart():
    """benchmarks/throughput.py --by-tier: blind rows by size tier and oracle device, where the default tiers' blind
    share moved while the small tier's held (results/throughput/harness-passes-table-gpu-packing-h200-2026-12-01.md)."""
    from benchmarks.throughput import by_tier

    def row(tier, device, verdict):
        return {"phase": "generate", "backend": "b", "size_tier": tier, "oracle_device": device, "verdict": verdict,
                "oracle_s": 0.001}

    rows = [row("long", "cpu", "blind"), row("long", "cpu", "pass"), row("small", "cpu", "pass"),
            row("small", "cpu", "pass"), row("small", "cuda", "blind"), {**row("small", "cpu", "blind"), "phase": "shrink"}]
    got = {(t["tier"], t["device"]): (t["examples"], t["blind"]) for t in by_tier(rows)}
    assert got == {("long", "cpu"): (2, 50.0), ("small", "cpu"): (2, 0.0), ("small", "cuda"): (1, 100.0)}
