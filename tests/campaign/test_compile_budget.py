"""campaign.budget: after the warm-up, compile slots are held down while evaluation is under its floor."""
from __future__ import annotations

import json
import time

from hypothesis import given, settings, strategies as st

from benchmarks.jit_campaign import worker_time
from campaign.budget import EVALUATION_FLOOR, CompileBudget
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
    for row in _rows(T0 + WARMUP_S, 60, 16, build_share=0.5):  # half of every worker's time building
        budget.record(row)
    assert budget.slots(WARMUP_S, T0 + WARMUP_S) == 3  # the ceiling, until a window of rows can be judged
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
    assert driver._compile_budget(WARMUP_S) == 3
    for row in _rows(now - 60, 60, 16, build_share=0.6):
        driver._on_row(0, dict(row, backend="test-fake-jit", phase="replay", verdict="pass"))
    assert driver._compile_budget(WARMUP_S + 60) == 2 and driver.scheduler.compile_slots == 2
    driver._record_compiles(now - WARMUP_S - 60)
    history = json.loads((tmp_path / "out" / "compile_draws.json").read_text())["compile_slots_history"]
    assert [slots for _, slots, _ in history] == [3, 2]
