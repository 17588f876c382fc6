"""A device error after a kernel's call is that case's crash, never a harness error that drops the backend.

On an H200, fa4-paged's illegal memory access left the CUDA context unusable; the ledger's check that follows an
evaluation then raised in its first op on the device, the worker reported a harness error, and the driver stopped
giving the backend tasks at minute 2 (benchmarks/results/campaigns/jit-untold-fa4-cold-warm-h200-2026-11-27.md)."""
from __future__ import annotations

import pytest

import campaign.worker as worker_module
from backends.registry import get
from campaign.tasks import WorkerConfig
from campaign.sticky import sticky_device_error
from campaign.worker import Worker
from fuzz.strategies import Limits
from tests.repro_scripts import drawn_cases

ILLEGAL = "CUDA error: an illegal memory access was encountered"
WHERE = {"backend": "torch-naive-paged", "shard": 1, "index": 1, "shard_size": 1}


def _case():
    backend = get("torch-naive-paged")
    return backend, drawn_cases(backend.caps, Limits(max_sequences=2, max_context=16, max_query=4), 1)[0]


def _worker(tmp_path) -> Worker:
    return Worker(WorkerConfig(cache_dir=str(tmp_path)), send=lambda message: None)


def test_a_device_error_the_ledger_check_meets_makes_the_row_a_sticky_crash(tmp_path, monkeypatch):
    def fails(*args):
        raise RuntimeError(ILLEGAL)

    monkeypatch.setattr(worker_module, "known_for", fails)
    backend, case = _case()
    row, evaluation = _worker(tmp_path)._evaluate(backend, case, WHERE)
    assert row["verdict"] == "crash" and sticky_device_error(row["message"]) and "after the kernel" in row["message"]
    assert Worker._marked_sticky(row)  # so the worker saves the case and restarts, as after a crashing kernel


def test_after_a_sticky_crash_the_ledger_is_not_asked(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(worker_module, "known_for", lambda *args: asked.append(args))
    backend, case = _case()

    def crashes(inputs):
        raise RuntimeError(ILLEGAL)

    monkeypatch.setattr(backend, "run", crashes)
    row, _ = _worker(tmp_path)._evaluate(backend, case, WHERE)
    assert row["verdict"] == "crash" and not asked


def test_the_ledger_s_own_error_stays_a_harness_error(tmp_path, monkeypatch):
    def broken(*args):
        raise KeyError("a bug in the ledger, not the kernel's")

    monkeypatch.setattr(worker_module, "known_for", broken)
    backend, case = _case()
    with pytest.raises(KeyError):
        _worker(tmp_path)._evaluate(backend, case, WHERE)


def test_a_sticky_crash_while_simplifying_ends_the_simplification(tmp_path, monkeypatch):
    """Each later step would run on the unusable device: a crash row per step, each blamed on its own case."""
    from campaign.tasks import Task, TaskKind
    from fuzz.simplify import simplify

    backend, _ = _case()
    limits = Limits(max_sequences=2, max_context=16, max_query=4)
    case = next(c for c in drawn_cases(backend.caps, limits, 200)
                if c.cache is not None and simplify(c, backend.caps, lambda _: False)[1] >= 2)

    def crashes(inputs):
        raise RuntimeError(ILLEGAL)

    monkeypatch.setattr(backend, "run", crashes)
    sent: list[dict] = []
    worker = Worker(WorkerConfig(cache_dir=str(tmp_path)), send=sent.append)
    task = Task(TaskKind.SHRINK, backend.name, shard=1, size=1, start=0)
    state = {"best": ({"case": case.to_json()}, None), "evals": 0}
    worker._simplify(backend, task, ("torch-naive-paged", "mismatch", "output"), WHERE, state)
    rows = [m["row"] for m in sent if m["type"] == "row"]
    assert state.get("sticky") and state["evals"] == 1 and len(rows) == 1 and rows[0]["verdict"] == "crash"
