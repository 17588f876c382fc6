"""A worker that draws several cases before it evaluates them (WorkerConfig.eval_batch) sends the rows a worker of one
case at a time sends, in the same order; a stop or a sticky device error part-way through a batch leaves the cases
not evaluated to the shard's next task, which draws them again (the scheduler resumes at the last row's index)."""
from __future__ import annotations

import pytest

from backends.registry import get
from campaign.sticky import StickyDeviceError
from campaign.tasks import Task, TaskKind, WorkerConfig
from campaign.worker import Worker

NAME = "torch-naive-paged"
ILLEGAL = "CUDA error: an illegal memory access was encountered"


def _rows(tmp_path, batch: int, size: int = 12, start: int = 0, should_stop=lambda: False, patch=None):
    sent: list[dict] = []
    worker = Worker(WorkerConfig(cache_dir=str(tmp_path), eval_batch=batch), send=sent.append, should_stop=should_stop)
    if patch is not None:
        patch(worker._loaded(NAME)[0])
    error = None
    try:
        worker.run(Task(TaskKind.GENERATE, NAME, shard=1, size=size, start=start))
    except StickyDeviceError as e:
        error = e
    return sent, error


def _summary(sent: list[dict]) -> list[tuple]:
    return [(m["row"]["example_id"], m["row"]["case"], m["row"]["verdict"]) for m in sent if m["type"] == "row"]


def _done(sent: list[dict]) -> dict:
    return next(m for m in sent if m["type"] == "done")


def test_a_batch_of_five_sends_the_rows_of_one_at_a_time_in_their_order(tmp_path):
    one, _ = _rows(tmp_path / "1", 1)
    five, _ = _rows(tmp_path / "5", 5)
    assert len(_summary(one)) == 12  # 12 is not a multiple of 5: the last batch is part-full
    assert _summary(five) == _summary(one)
    assert _done(five)["exhausted"] == _done(one)["exhausted"]


def test_a_stop_inside_a_batch_leaves_its_rest_to_the_next_task_which_draws_the_same_cases(tmp_path):
    whole = _summary(_rows(tmp_path / "whole", 1)[0])
    rows: list = []

    def stop_after_three() -> bool:
        return len(rows) >= 3

    def counting(message):  # the stop is asked between the evaluations of one batch
        if message["type"] == "row":
            rows.append(message)

    worker = Worker(WorkerConfig(cache_dir=str(tmp_path / "stopped"), eval_batch=5), send=counting,
                    should_stop=stop_after_three)
    sent: list[dict] = []
    worker.send = lambda m: (counting(m), sent.append(m))
    worker.run(Task(TaskKind.GENERATE, NAME, shard=1, size=12, start=0))
    first = _summary(sent)
    assert len(first) == 3 and not _done(sent)["exhausted"]
    last_index = max(m["row"]["index"] for m in sent if m["type"] == "row")
    rest, _ = _rows(tmp_path / "rest", 5, start=last_index)
    assert first + _summary(rest) == whole


def test_a_sticky_crash_inside_a_batch_ends_the_task_there_with_its_minimal_case(tmp_path):
    whole = _summary(_rows(tmp_path / "whole", 1)[0])
    calls = {"n": 0}

    def crash_on_the_second(backend):
        run = backend.run

        def second_crashes(inputs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError(ILLEGAL)
            return run(inputs)

        backend.run = second_crashes

    sent, error = _rows(tmp_path / "sticky", 5, patch=crash_on_the_second)
    rows = _summary(sent)
    assert isinstance(error, StickyDeviceError)
    assert [r[:2] for r in rows] == [r[:2] for r in whole[:2]] and rows[1][2] == "crash"
    assert calls["n"] == 2  # the three cases drawn after it in its batch are never run on the unusable device
    assert [m["row"]["example_id"] for m in sent if m["type"] == "minimal"] == [rows[1][0]]


@pytest.mark.parametrize("batch", [0, -1])
def test_a_batch_below_one_is_refused_by_name(batch):
    with pytest.raises(ValueError, match="eval_batch"):
        WorkerConfig(eval_batch=batch)
