"""Where worker time goes (campaign/clock.py): the split that benchmarks/jit_campaign.py prints must cover a task that
never sent its `done`. A JIT build still running at a campaign's deadline sends no seconds, so a 150-s FlashInfer
campaign on an H100 read 41 % of worker time outside any task (campaigns/jit-untold-h100-2026-11-26.md)."""
from __future__ import annotations

import pytest

import campaign.clock as clock_module
from benchmarks.jit_campaign import shard_time, task_time
from campaign.clock import WorkerClock
from campaign.worker import SPENT


@pytest.fixture
def now(monkeypatch):
    t = {"now": 100.0}
    monkeypatch.setattr(clock_module.time, "time", lambda: t["now"])
    return t


def test_start_up_finished_and_unfinished_tasks_are_each_counted_once(now):
    clock = WorkerClock()
    for wid in (0, 1, 2):
        clock.started(wid)
    now["now"] = 102.0
    clock.ready(0)
    clock.ready(1)  # worker 2 never gets ready
    clock.assigned(0, "jit")
    clock.assigned(1, "jit")
    now["now"] = 105.0
    clock.done(0, {"backend": "jit", "kind": "generate", "task_s": 2.5, **dict.fromkeys(SPENT, 0.5)})
    now["now"] = 107.0
    clock.gone(1)  # died in its task: 5 s unfinished
    clock.assigned(0, "jit")
    clock.close(110.0)  # worker 0 in a task since 107, worker 2 starting since 100
    jit = clock.spent["jit"]
    assert jit["unfinished_task_s"] == pytest.approx(5.0 + 3.0)
    assert jit["generate_task_s"] == pytest.approx(2.5) and jit["generate_tasks"] == 1 and jit["tasks"] == 1
    assert jit["draw_s"] == pytest.approx(0.5)
    assert clock.startup_s == pytest.approx(2.0 + 2.0 + 10.0)
    clock.close(120.0)  # closing twice adds nothing
    assert jit["unfinished_task_s"] == pytest.approx(8.0) and clock.startup_s == pytest.approx(14.0)
    record = {"workers": 3, "started": 100.0, "ended": 110.0, "time": clock.spent, "startup_s": clock.startup_s}
    (shares,) = task_time(record)
    assert shares["unfinished"] == pytest.approx(100 * 8.0 / 30.0)
    assert shares["in tasks"] == pytest.approx(100 * (2.5 + 8.0) / 30.0)


def test_generation_tasks_are_counted_by_the_shard_they_drew(now):
    """Short tasks cost their strategy, prefix and hypothesis' start each time: the split by shard says which kind of
    shard ends early (stalled: every one of its last draws waited) and how many rows each gave."""
    clock = WorkerClock()
    parts = dict.fromkeys(SPENT, 0.0)
    tasks = (("focused", True, 0, 1.0), ("focused", False, 40, 3.0), ("tour", False, 2, 0.5))
    for kind, stalled, rows, seconds in tasks:
        clock.done(0, {"backend": "jit", "kind": "generate", "task_s": seconds, "shard_kind": kind, "stalled": stalled,
                       "rows": rows, **parts})
    clock.done(0, {"backend": "jit", "kind": "deferred", "task_s": 9.0, **parts})  # not a shard's task
    record = {"workers": 1, "started": 100.0, "ended": 110.0, "time": clock.spent}
    assert task_time(record)[0]["in tasks"] == pytest.approx(100 * 13.5 / 10.0)  # the split's keys are none of these
    assert shard_time(record) == [
        {"backend": "jit", "shard": "focused", "tasks": 2, "stalled": 1, "rows": 40, "rows per task": 20.0,
         "worker time": pytest.approx(40.0)},
        {"backend": "jit", "shard": "tour", "tasks": 1, "stalled": 0, "rows": 2, "rows per task": 2.0,
         "worker time": pytest.approx(5.0)}]
