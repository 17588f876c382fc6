"""campaign.budget: after the warm-up, compile slots are held down while evaluation is under its floor, and new builds
pause while first calls have taken more than the allowance that keeps evaluation at its floor."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings, strategies as st

from benchmarks.jit_campaign import worker_time
from campaign.budget import EVALUATION_FLOOR, LEAST_BUILD_WORKERS, CompileBudget
from campaign.claims import WARMUP_S
from campaign.engine import CampaignConfig, Driver
from campaign.tasks import WorkerConfig
from tests.campaign.test_compiles import SPEC, _Pool

T0 = 1_000_000.0


def _rows(start: float, seconds: float, workers: int, build_share: float) -> list[dict]:
    """Every worker busy for `seconds` from `start` in 1-s rows, `build_share` of each a first call's build."""
    return [{"phase": "generate", "t": start + s + 1.0, "kernel_s": 1.0, "compile_s": build_share}
            for _ in range(workers) for s in range(int(seconds))]


def test_warm_up_then_one_slot_fewer_per_step_down_to_one_and_back_up_to_the_ceiling():
    budget = CompileBudget(0.2, 16, adjust_s=20.0)
    assert budget.slots(0.0, T0) == 5 and budget.slots(WARMUP_S - 1, T0 + WARMUP_S - 1) == 5  # the warm-up's 0.3
    for row in _rows(T0 + WARMUP_S - 60, 60, 16, build_share=0.0):  # the warm-up's last minute all evaluation
        budget.record(row)
    assert budget.slots(WARMUP_S, T0 + WARMUP_S) == 3  # its window judged at once: the ceiling
    for row in _rows(T0 + WARMUP_S, 60, 16, build_share=0.5):  # half of every worker's time building
        budget.record(row)
    seen = [budget.slots(e, T0 + e) for e in (WARMUP_S + 60, WARMUP_S + 80, WARMUP_S + 100, WARMUP_S + 120)]
    assert seen[:3] == [2, 1, 1]  # under the floor: one fewer per step, never none
    later = T0 + WARMUP_S + 120
    for row in _rows(later, 120, 16, build_share=0.0):  # then nothing but evaluation
        budget.record(row)
    back = [budget.slots(e, T0 + e) for e in (WARMUP_S + 180, WARMUP_S + 200, WARMUP_S + 220, WARMUP_S + 240)]
    assert back == [2, 3, 3, 3]  # one more per step, up to --compile-share's slots
    assert [slots for _, slots, _ in budget.history] == [3, 2, 1, 2, 3]


def test_no_change_between_steps_and_none_in_the_band_above_the_floor():
    budget = CompileBudget(0.2, 16, adjust_s=20.0)
    for row in _rows(T0, 200, 16, build_share=0.5):
        budget.record(row)
    assert budget.slots(WARMUP_S + 60, T0 + 180) == 2
    assert budget.slots(WARMUP_S + 70, T0 + 190) == 2  # 10 s later: no step yet
    band = CompileBudget(0.2, 16, adjust_s=20.0)
    band.current = 2
    evaluating = EVALUATION_FLOOR + 0.5 / 16  # above the floor by less than a slot's worth
    for row in _rows(T0, 200, 16, build_share=1.0 - evaluating):
        band.record(row)
    assert band.slots(WARMUP_S + 60, T0 + 180) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 120.0), st.floats(0.001, 30.0), st.floats(0.0, 1.0)), min_size=1,
                max_size=40), st.integers(1, 16))
def test_the_evaluation_share_is_the_one_benchmarks_jit_campaign_reports(spans, workers):
    """A second formulation: the share the budget acts on is worker_time's evaluation over the same window."""
    budget = CompileBudget(0.2, workers, window_s=60.0)
    rows = [{"phase": "generate", "t": T0 + end, "oracle_s": busy * (1 - built), "kernel_s": busy * built,
             "compile_s": busy * built} for end, busy, built in spans]
    for row in sorted(rows, key=lambda r: r["t"]):
        budget.record(row)
    now = T0 + 120.0
    record = {"started": now - 60.0, "ended": now, "workers": workers}
    expected = worker_time(rows, record, after=0.0)["evaluation"] / 100
    assert abs(budget.evaluation_share(now) - expected) < 1e-9


def test_the_driver_feeds_its_rows_to_the_budget_and_records_each_change(tmp_path):
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], seconds=600, specs=SPEC, progress=False)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=5, specs=SPEC))
    driver.budget.adjust_s = 0.0
    now = time.time()
    assert driver._compile_budget(WARMUP_S) == 2  # no row in the warm-up's last minute: nothing evaluated, one fewer
    for row in _rows(now - 60, 60, 16, build_share=0.6):
        driver._on_row(0, dict(row, backend="test-fake-jit", phase="replay", verdict="pass"))
    assert driver._compile_budget(WARMUP_S + 60) == 1 and driver.scheduler.compile_slots == 1
    driver._record_compiles(now - WARMUP_S - 60)
    history = json.loads((tmp_path / "out" / "compile_draws.json").read_text())["compile_slots_history"]
    assert [slots for _, slots, _ in history] == [2, 1]


def _evaluating(start: float, seconds: int, workers: int, duty: float) -> list[dict]:
    """`workers` evaluating from `start`: a row a second that was busy `duty` of it (the rest: drawing, messages)."""
    return [{"phase": "generate", "t": start + s + 1.0, "oracle_s": duty} for _ in range(workers) for s in range(seconds)]


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 32), st.floats(0.05, 1.0), st.floats(0.0, 0.9), st.floats(10.0, 600.0))
def test_builds_at_the_allowance_leave_evaluation_at_its_floor(workers, duty, build_share, seconds):
    """A second formulation of `allowed_share`: continue the campaign's split with builds taking share b, the rest of
    the time splitting between evaluation and the remainder as it did; evaluation then ends at the floor, unless the
    least allowance is above b (evaluation could not reach the floor even without builds: it stays under it)."""
    budget = CompileBudget(0.2, workers)
    budget.slots(WARMUP_S, T0 + WARMUP_S)
    total = workers * seconds
    built = build_share * total
    budget.evaluated, budget.built = duty * (total - built), built
    b = budget.allowed_share(T0 + WARMUP_S + seconds)
    evaluating = duty * (1 - b)  # duty: evaluation's share of the time that is not builds
    least = LEAST_BUILD_WORKERS / workers
    if b > least + 1e-12 and b < 1.0:
        assert abs(evaluating - EVALUATION_FLOOR) < 1e-9
    else:
        assert b == 1.0 or duty * (1 - least) <= EVALUATION_FLOOR + 1e-9


def test_builds_pause_once_they_spent_their_allowance_and_resume_as_evaluation_repays_it():
    workers, end = 16, T0 + WARMUP_S
    budget = CompileBudget(0.2, workers)
    budget.slots(WARMUP_S, end)
    assert not budget.builds_paused(end - 1.0, running=[end - 50.0])  # the warm-up builds freely
    # 100 s: 12 workers evaluate 80 % of each second, 4 build throughout (first calls still running)
    for row in _evaluating(end, 100, 12, 0.8):
        budget.record(row)
    now = end + 100
    assert budget.allowed_share(now, [end - 30.0] * 4) == pytest.approx(1 - 0.7 / 0.8)  # 960 s of 1,200
    assert budget.builds_paused(now, [end - 30.0] * 4)  # 400 s built
    for row in [{"phase": "generate", "t": now, "kernel_s": 130.0, "compile_s": 130.0}] * 4:  # they end
        budget.record(row)
    for row in _evaluating(now, 60, 16, 0.8):  # then all 16 evaluate
        budget.record(row)
    assert budget.builds_paused(now + 60)  # allowed: 0.125 x 2,560 = 320 s
    for row in _evaluating(now + 60, 90, 16, 0.8):
        budget.record(row)
    assert not budget.builds_paused(now + 150)  # 0.125 x 4,000 = 500 s
    assert [p for _, p, _ in budget.pauses] == [True, False]


def test_builds_never_pause_below_half_a_worker_where_evaluation_cannot_reach_its_floor():
    budget = CompileBudget(0.2, 16)
    end = T0 + WARMUP_S
    budget.slots(WARMUP_S, end)
    for row in _evaluating(end, 100, 16, 0.6):  # 60 % evaluation without any build
        budget.record(row)
    assert budget.allowed_share(end + 100) == LEAST_BUILD_WORKERS / 16
    assert not budget.builds_paused(end + 100, [end + 60.0])  # 40 s of one build: under half a worker's 100 s
    assert budget.builds_paused(end + 100, [end + 70.0, end + 70.0])  # 60 s


def _evaluated_past_the_warm_up(driver) -> float:
    """100 s after the warm-up's end, with test-fake-jit's key k0 built: 13 of 16 workers evaluated 80 % of each
    second (the other three build). Returns the wall clock."""
    now = time.time()
    driver.budget.slots(WARMUP_S + 100, now)
    driver.scheduler.key_built("test-fake-jit", "k0", 0)
    for row in _evaluating(now - 100, 100, 13, 0.8):
        driver.budget.record(row)
    return now


def _three_first_calls(driver, backend: str, now: float) -> None:
    """Three first calls of `backend` running since the warm-up's end: 300 s, over the 200 s the allowance gives."""
    for wid in range(3):
        driver.beats[wid] = {"backend": backend, "first_compile": True, "started": now - 100.0}


def test_a_spent_allowance_pauses_builds_of_backends_with_a_module_but_not_a_first_build(tmp_path):
    from campaign.claims import CompileClaims

    slots = tmp_path / "slots"
    slots.mkdir()
    backends = ["test-fake-jit", "test-fake-jit-variants"]
    cfg = CampaignConfig(out=tmp_path / "out", backends=backends, seconds=3600, specs=SPEC, progress=False)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=3, specs=SPEC, slots_dir=str(slots)))
    claims = CompileClaims(tmp_path / "keys", slots, slots=3)
    now = _evaluated_past_the_warm_up(driver)
    assert driver._late(3000.0) == set() and driver.scheduler.paused == set()
    _three_first_calls(driver, "test-fake-jit-variants", now)
    assert driver._late(3000.0) == set()  # not late: paused
    assert driver.scheduler.paused == {"test-fake-jit"}  # the other has no module yet: its first build goes ahead
    driver.progress.row({"backend": "test-fake-jit", "phase": "generate", "compile_key": "k0", "verdict": "pass"})
    assert "test-fake-jit 1 " in driver.progress.line() and "builds paused" in driver.progress.line()
    assert claims.claim("test-fake-jit", "k1") is None and claims.slot_only() is not None  # loads go on
    assert claims.claim("test-fake-jit", "k1", compile_task=True) is not None  # the driver's compile tasks build
    assert claims.claim("test-fake-jit-variants", "k2") is not None
    driver.beats.clear()
    assert driver._late(3000.0) == set() and claims.paused() == frozenset()
    driver._record_compiles(now - WARMUP_S - 100)
    record = json.loads((tmp_path / "out" / "compile_draws.json").read_text())
    assert [p for _, p, _ in record["build_pauses"]] == [True, False]


def test_while_builds_pause_compile_tasks_go_only_to_keys_with_new_values():
    """The keys' values: dtype, head sizes, kv dtype and features (campaign.compiles.key_values)."""
    from campaign.compiles import Backlog

    def key(dtype, feature=None):
        return json.dumps([dtype, [64, 64], "auto"] + ([feature] if feature else []))

    backlog = Backlog()
    backlog.mark_built("fi", key("bfloat16", "window"))
    for n, k in enumerate([key("bfloat16"), key("bfloat16", "window"), key("float16")] * 3):
        backlog.defer("fi", k, f"case-{n}", {"shard": 1, "index": n + 1})
    backlog.defer("fi", key("bfloat16"), "one more", {"shard": 1, "index": 10})  # the largest backlog
    taken = backlog.take(built=False, breadth_only={"fi"})
    assert taken is not None and taken[1] == key("float16")  # float16 is new; bfloat16 without a window is not
    assert backlog.take(built=False, breadth_only={"fi"}) is None  # nothing else brings a new value
    assert backlog.take(built=False)[1] == key("bfloat16")  # not paused: the rest as before


def test_a_value_whose_keys_built_nothing_twice_stops_counting_as_new():
    """A value that never builds (FA4's head-size pairs whose compiles end in CUDADialectError) is not offered as
    breadth forever while builds pause (campaign.compiles.FAILED_BUILDS)."""
    from campaign.compiles import FAILED_BUILDS, Backlog

    def key(dtype, feature=None):
        return json.dumps([dtype, [64, 64], "auto"] + ([feature] if feature else []))

    backlog = Backlog()
    features = (None, "window", "soft_cap", "alibi")
    for f in features:
        backlog.mark_built("fi", key("bfloat16", f))
    failing = [key("float16", f) for f in features]  # float16 is their one new value
    for n, k in enumerate(failing):
        backlog.defer("fi", k, f"case-{n}", {"shard": 1, "index": n + 1})
    for k in failing[:FAILED_BUILDS - 1]:
        backlog.mark_failed("fi", k)
    assert backlog.take(built=False, breadth_only={"fi"}) is not None  # float16: one failure is not enough
    backlog.mark_failed("fi", failing[FAILED_BUILDS - 1])
    assert "float16" in backlog.tried("fi") and "float16" not in backlog.covered("fi")
    assert backlog.take(built=False, breadth_only={"fi"}) is None  # nothing new is left to try while builds pause
    assert backlog.take(built=False) is not None  # not paused: its keys are still built in their turn
    backlog.mark_built("fi", failing[0])  # a key that failed once and built later is a built key, not a failed one
    assert backlog.record(["fi"])["fi"]["failed"] == [failing[1]]


def test_a_first_call_that_built_nothing_is_a_failed_key_for_the_scheduler(tmp_path):
    """The driver's side: a row of a first call whose verdict says nothing was built (campaign.claims.NOT_BUILT)."""
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], seconds=3600, specs=SPEC, progress=False)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=3, specs=SPEC))
    key = json.dumps(["float16", [64, 64], "auto"])
    driver._on_row(0, {"phase": "shrink", "backend": "test-fake-jit", "compile_key": key, "first_of_key": True,
                       "verdict": "crash"})
    driver._on_row(0, {"phase": "shrink", "backend": "test-fake-jit", "compile_key": key, "verdict": "crash"})
    assert driver.scheduler.backlog.failed_keys["test-fake-jit"] == {key}
    assert key not in driver.scheduler.backlog.built_keys["test-fake-jit"]


def test_a_compile_task_whose_build_failed_gives_its_other_cases_back_instead_of_building_again(tmp_path,
                                                                                                  monkeypatch):
    """The worker's side: a failed build leaves nothing to load, so each further case of the task would build the
    module again and fail again (FA4 on an H100: two failed builds for each such key,
    benchmarks/results/campaigns/jit-untold-fa4-failed-builds-h100-2026-12-07.md). One row, the rest wait."""
    from dataclasses import replace

    from backends.registry import get
    from campaign.compiles import key_text
    from campaign.tasks import Task, TaskKind
    from campaign.worker import Worker
    from fuzz.strategies import Limits, compile_key
    from tests.repro_scripts import drawn_cases

    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    backend = get("test-fake-jit-failing-builds", specs=SPEC)
    monkeypatch.setattr(type(backend), "compile_s", 0.01)
    case = next(c for c in drawn_cases(backend.caps, Limits(max_sequences=2, max_context=16, max_query=4), 50)
                if c.dtype.value == "float32")
    sent: list[dict] = []
    worker = Worker(WorkerConfig(specs=SPEC, cache_dir=str(tmp_path / "cache"), compile_slots=2,
                                 slots_dir=str(tmp_path / "slots")), send=sent.append)
    key = key_text(compile_key(case, backend.compiled_per, backend.compiled_features))
    same_module = [replace(case, seed=case.seed + i) for i in range(3)]
    wheres = tuple({"shard": 1, "index": i, "shard_size": 3} for i in range(3))
    task = Task(TaskKind.DEFERRED, backend.name, key=key, unit=worker._module(backend, case)[1],
                cases=tuple(c.to_json() for c in same_module), wheres=wheres, needs_slot=True, slots=2)
    worker.run(task)
    rows = [m["row"] for m in sent if m["type"] == "row"]
    assert [(r["verdict"], r.get("first_of_key")) for r in rows] == [("crash", True)]
    returned = [m for m in sent if m["type"] == "deferred"]
    assert [m["index"] for m in returned] == [1, 2] and all(m["returned"] for m in returned)
    assert len((tmp_path / "failed.log").read_text().splitlines()) == 1  # one failed build, not three
    # once generation is over (no slot to take) the cases go on where they land, as before
    sent.clear()
    worker.run(replace(task, needs_slot=False))
    assert [m["type"] for m in sent].count("row") == 3


def test_in_the_warm_up_a_build_that_would_outlast_it_waits_unless_it_is_the_backends_first(tmp_path):
    backends = ["test-fake-jit", "test-fake-jit-variants"]
    cfg = CampaignConfig(out=tmp_path / "out", backends=backends, seconds=3600, specs=SPEC, progress=False)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=5, specs=SPEC))
    now = time.time()
    driver.budget.slots(WARMUP_S - 30, now)  # 30 s of the warm-up left
    driver.scheduler.key_built("test-fake-jit", "k0", 0)
    driver.build_times.record("test-fake-jit", 20.0)  # one build: 20 s
    driver.build_times.record("test-fake-jit-variants", 100.0)  # no module yet (its build failed): a first build
    assert driver._late(3000.0) == set()
    driver.build_times.record("test-fake-jit", 40.0)  # the longest first call so far would end past the warm-up
    assert driver._late(3000.0) == {"test-fake-jit"}
    driver.build_times.seconds.clear()
    driver.beats[0] = {"backend": "test-fake-jit", "first_compile": True, "started": now - 35.0}  # running for 35 s
    assert driver._late(3000.0) == {"test-fake-jit"}


def test_with_compile_slices_nothing_pauses(tmp_path):
    """--compile-slices (and --compile-share 1) hand out no compile tasks while generation goes on: a pause there would
    hold a key's cases until generation ends."""
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], seconds=3600, specs=SPEC, progress=False,
                         compile_slices=True)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=3, specs=SPEC))
    _three_first_calls(driver, "test-fake-jit", _evaluated_past_the_warm_up(driver))
    assert driver.scheduler.compile_slots == 0
    assert driver._late(3000.0) == set() and driver.scheduler.paused == set()
