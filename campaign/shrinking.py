"""A worker's shrink task (campaign.worker.Worker): draw a shard's failing example again, let hypothesis shrink it while
it fails the same way, simplify what hypothesis leaves (fuzz.simplify), and send the minimal case with its tensors."""
from __future__ import annotations

import time
from typing import Any

from hypothesis import Phase, given, seed

from fuzz.compare import Evaluation
from fuzz.simplify import simplify
from reference.case import Case

from .buckets import row_symptoms
from .drawing import Fresh, hypothesis_settings
from .sticky import StickyDeviceError, sticky_crash
from .store import case_payload
from .tasks import Task, shard_seed


class _Found(AssertionError):
    pass


class _DeviceLost(Exception):
    """A simplification step crashed with a sticky device error: no later step can run in this process."""


class Shrinking:
    """Methods of campaign.worker.Worker; they use its config, send, _backend, _evaluate, _over and _unbuilt."""

    def _shrink(self, task: Task, deadline: float | None) -> None:
        backend, strategy, prefix = self._backend(task.backend, task.shard, task.key, task.tour, task.pins_of)
        fresh = Fresh(prefix)
        target = tuple(task.signature) if task.signature else None
        where = {"backend": task.backend, "shard": task.shard, "index": task.target, "shard_size": task.size}
        state: dict[str, Any] = {"index": 0, "found": False, "gone": False, "best": None, "evals": 0, "t0": None}

        def one(case: Case) -> None:
            if state["gone"]:
                return
            if not state["found"]:
                if not fresh(case):
                    return
                state["index"] += 1
                if state["index"] < task.target:
                    return
                state["t0"] = time.monotonic()
            elif (state["evals"] >= self.config.shrink_examples or self._over(deadline)
                  or time.monotonic() - state["t0"] > self.config.shrink_seconds):
                return  # out of shrink budget: every candidate now "passes", so hypothesis keeps the best so far
            elif self._unbuilt(backend, case):
                return  # a candidate whose module nobody built "passes": the shrink stays within built keys
            row, evaluation = self._shrink_step(backend, task, case, where)
            state["evals"] += 1
            if sticky_crash(row):
                state["gone"] = state["sticky"] = True  # this process's device is unusable from here on
                return
            if target is not None and row["backend"] == target[0] and tuple(target[1:]) in row_symptoms(row):
                state["found"], state["best"] = True, (row, evaluation)
                raise _Found(row["verdict"])
            if not state["found"]:
                state["gone"] = True  # drawn again, it did not fail the same way: nothing to shrink

        test = hypothesis_settings(fresh.budget(task.size), [Phase.generate, Phase.shrink])(
            seed(shard_seed(self.config.seed, task.backend, task.shard))(given(strategy)(one)))
        try:
            test()
        except Exception:  # _Found (shrunk), or hypothesis' flaky report once the budget ran out
            pass
        if state.get("sticky") and state["best"] is None:
            self.send({"type": "minimal", "row": None, "signature": list(target) if target else None,
                       "note": "not shrunk: a sticky CUDA error while drawing it again"})
            raise StickyDeviceError(task.label)
        if state["best"] is None:
            self.send({"type": "minimal", "row": None, "signature": list(target) if target else None,
                       "note": f"example {task.target} of shard {task.shard} did not fail the same way when "
                               f"drawn again (flaky kernel, or a harness change)"})
            return
        if not state.get("sticky"):
            self._simplify(backend, task, target, where, state)
        row, evaluation = state["best"]
        # after a sticky error the best case's tensors live on a dead device: save the case alone
        stem, payload, tensors = case_payload(task.backend, row, None if state.get("sticky") else evaluation)
        minimal = dict(row, phase="minimal", t=time.time(), shrink_evaluations=state["evals"], bucket_symptom=target[1:],
                       example_id=f"{task.backend}/{task.shard}/{task.target}")
        self.send({"type": "minimal", "row": minimal, "stem": stem, "payload": payload, "tensors": tensors,
                   "signature": list(target) if target else None})
        if state.get("sticky"):
            raise StickyDeviceError(task.label)

    def _shrink_step(self, backend, task: Task, case: Case, where: dict) -> tuple[dict, Evaluation | None]:
        """Evaluate one candidate of a shrink and send its row (failing or not: no pass to doubt, no blind check)."""
        row, evaluation = self._evaluate(backend, case, where, check_blind=False)
        row.update(phase="shrink", t=time.time(), shrinking=f"{task.backend}/{task.shard}/{task.target}")
        self.send({"type": "row", "row": row})
        return row, evaluation

    def _simplify(self, backend, task: Task, target, where: dict, state: dict) -> None:
        """Set the shrunk case's cache dtype, layout and table to their simplest declared values, and drop the
        features it does not need, where it still shows the target symptom (fuzz.simplify: hypothesis seldom gets
        a cache dtype back to auto, or drops a feature drawn early). A step onto a compile key not built here is
        skipped (`_unbuilt`): simplifying never waits for a JIT build."""
        def still_fails(case: Case) -> bool:
            if self._unbuilt(backend, case):
                return False
            row, evaluation = self._shrink_step(backend, task, case, where)
            state["evals"] += 1
            if sticky_crash(row):
                state["sticky"] = True  # every later step would crash on the unusable device, each blamed on its case
                raise _DeviceLost
            if tuple(target[1:]) in row_symptoms(row):
                state["best"] = (row, evaluation)
                return True
            return False

        best = Case.from_json(state["best"][0]["case"])
        try:
            simplify(best, backend.caps, still_fails, backend.not_supported_reasons)
        except _DeviceLost:
            pass  # the best case so far is the minimal one, saved without its tensors (they live on that device)
