"""No build that would outlast a time-boxed campaign (campaign.compiles.BuildTimes): near the end a backend's compile
tasks stop and its generation tasks' first calls do not build, while loads and evaluation go on."""
from __future__ import annotations

from campaign.compiles import BUILD_QUANTILE, BUILD_SAMPLES, BuildTimes
from campaign.scheduler import Scheduler
from campaign.tasks import Task, TaskKind, WorkerConfig
from campaign.worker import Worker


def test_a_backend_is_late_once_less_time_is_left_than_its_first_calls_take():
    times = BuildTimes()
    for s in [0.1] * 8 + [100.0, 120.0]:
        times.record("fi", s)
    for s in [0.1] * (BUILD_SAMPLES - 1):
        times.record("few", 50.0)
    assert BUILD_QUANTILE == 1.0 and times.expected("fi") == 120.0  # the longest: the slow builds count
    assert times.expected("few") is None  # too few to tell
    assert times.late(119.0) == {"fi"} and times.late(121.0) == set()


def test_a_first_call_still_running_bounds_the_builds_as_a_finished_one_does():
    """A build longer than every earlier one is known only while it runs: one of prefill-fa2's did, and the builds the
    deadline killed took 11.0 % of the worker time (campaigns/jit-untold-budget-h200-2026-11-27.md)."""
    times = BuildTimes()
    for s in [0.1] * 8 + [100.0]:
        times.record("fi", s)
    assert times.late(150.0) == set()
    assert times.late(150.0, running={"fi": 160.0}) == {"fi"}  # older than the longest finished one
    assert times.late(150.0, running={"fi": 20.0}) == set()
    assert times.late(150.0, running={"fa4": 151.0}) == {"fa4"}  # before any of its first calls ended


def test_the_driver_publishes_late_backends_from_its_heartbeats(tmp_path):
    import time

    from campaign.claims import CompileClaims, write_late
    from campaign.engine import CampaignConfig, Driver
    from tests.campaign.test_compiles import SPEC, _Pool

    slots = tmp_path / "slots"
    (slots).mkdir()
    (slots / "late").write_text("test-fake-jit\n")  # an earlier run's list: written over at the first turn
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], seconds=600, specs=SPEC, progress=False)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=3, specs=SPEC, slots_dir=str(slots)))
    claims = CompileClaims(tmp_path / "keys", slots, slots=3)
    assert driver._late(300.0) == set() and claims.late() == frozenset()
    driver.beats[0] = {"backend": "test-fake-jit", "first_compile": True, "started": time.time() - 400.0}
    driver.beats[1] = {"backend": "other", "first_compile": False, "started": time.time() - 500.0}  # no first call
    assert driver._late(300.0) == {"test-fake-jit"} and driver.scheduler.late == {"test-fake-jit"}
    assert driver.scheduler.first_calls_running == {"test-fake-jit"}  # the same heartbeats: campaign.focus holds back
    assert claims.late() == {"test-fake-jit"} and claims.claim("test-fake-jit", "k") is None
    assert claims.claim("other", "k") is not None and claims.slot_only() is not None  # loads go on
    driver.beats.clear()
    assert driver._late(300.0) == set() and claims.late() == frozenset()
    assert driver.scheduler.first_calls_running == set()
    write_late(slots, {"test-fake-jit"})  # a --time run's list, then a resume with an example budget: no deadline
    resumed = Driver(cfg, _Pool(), WorkerConfig(compile_slots=3, specs=SPEC, slots_dir=str(slots)))
    assert resumed._late(None) == set() and claims.late() == frozenset()


def test_a_late_backend_gets_no_compile_task_its_built_modules_cases_still_go_out():
    s = Scheduler(["jit", "other"], examples=None, shard_size=5, compile_slots=3)
    for wid in range(2):
        s.add_worker(wid)
    s.defer("jit", "k1", "case-1", {"shard": 1, "index": 1, "shard_size": 5})
    s.defer("other", "k2", "case-2", {"shard": 1, "index": 1, "shard_size": 5})
    s.late = {"jit"}
    compile_tasks = [t for _, t in s.schedule() if t.kind == TaskKind.DEFERRED]
    assert [(t.backend, t.needs_slot) for t in compile_tasks] == [("other", True)]
    s.key_built("jit", "k1")  # built elsewhere: its cases are a load, not a build
    s.task_done(0)
    s.task_done(1)
    assert ("jit", "k1") in {(t.backend, t.key) for _, t in s.schedule() if t.kind == TaskKind.DEFERRED}


def test_a_task_that_may_not_build_defers_the_cases_of_unbuilt_modules(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    sent: list[dict] = []
    worker = Worker(WorkerConfig(cache_dir=str(tmp_path / "c"), specs=("tests.campaign.fake_jit:backends",),
                                 limits={"tiers": ["small"]}), send=sent.append)
    worker.run(Task(TaskKind.GENERATE, "test-fake-jit", shard=3, size=4, start=0, builds=False))
    assert [m["type"] for m in sent if m["type"] in ("row", "deferred")] == ["deferred"] * 4
    assert not (tmp_path / "builds.log").exists()
    sent.clear()
    worker.run(Task(TaskKind.GENERATE, "test-fake-jit", shard=3, size=4, start=0))  # free slots: it builds
    assert [m for m in sent if m["type"] == "row"] and (tmp_path / "builds.log").exists()


def test_a_backend_without_a_first_call_for_a_while_is_starved_while_others_have_them():
    """fa4-paged had no first call from 84 s on while fa4-varlen's held every compile slot (campaigns/
    jit-untold-late-builds-h200-2026-11-27.md): its compile tasks then wait for a slot (Task.slot_wait)."""
    from campaign.compiles import STARVED_S, FirstCalls

    calls = FirstCalls(started=0.0)
    calls.ended("varlen", 10.0)
    calls.ended("paged", 12.0)
    assert calls.starved(20.0, {"varlen", "paged"}) == set()
    calls.ended("varlen", 12.0 + STARVED_S)
    assert calls.starved(12.0 + STARVED_S, {"paged"}) == {"paged"}  # varlen's calls go on, paged's stopped
    assert calls.starved(12.0 + STARVED_S, {"varlen"}) == set()
    assert calls.starved(13.0 + 3 * STARVED_S, {"paged"}) == set()  # nobody had one lately: no race to lose
    assert FirstCalls(started=0.0).starved(STARVED_S, {"paged"}) == set()
    fresh = FirstCalls(started=0.0)
    fresh.ended("varlen", STARVED_S)
    assert fresh.starved(STARVED_S, {"paged"}) == {"paged"}  # none yet since the start


def test_only_a_starved_backend_s_compile_tasks_wait_for_a_slot():
    from campaign.claims import SLOT_WAIT_S
    from campaign.engine import Driver

    compile_task = Task(TaskKind.DEFERRED, "paged", key="k", cases=("c",), wheres=({},), needs_slot=True)
    stamped = Driver._stamped(compile_task, 2, late=set(), starved={"paged"})
    assert stamped.slot_wait == SLOT_WAIT_S and stamped.slots == 2 and stamped.builds
    assert Task.from_dict(stamped.to_dict()).slot_wait == SLOT_WAIT_S  # it travels to the worker
    assert Driver._stamped(compile_task, 2, late=set(), starved={"varlen"}).slot_wait == 0.0
    loads = Task(TaskKind.DEFERRED, "paged", key="k", cases=("c",), wheres=({},))  # built: no slot to wait for
    assert Driver._stamped(loads, 2, late=set(), starved={"paged"}).slot_wait == 0.0
    generate = Task(TaskKind.GENERATE, "paged", shard=3, size=10)
    assert not Driver._stamped(generate, 1, late={"paged"}, starved={"paged"}).builds
