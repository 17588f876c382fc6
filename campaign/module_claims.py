"""A worker's side of JIT compiles (campaign.worker.Worker): whether a drawn case's module is loaded here, built on
the host, or to be built or loaded now under a claim (campaign.claims), and the compile and waiting-case tasks that
evaluate cases which waited for their module (campaign.compiles)."""
from __future__ import annotations

import json
import os
import time

from fuzz.compare import Evaluation
from fuzz.strategies import compile_key
from reference.case import Case

from .claims import Claim, built_by
from .compiles import key_text
from .tasks import Task, cores


class ModuleClaims:
    """Methods of campaign.worker.Worker; they use its config, claims, send, builds, _units, _loaded, _evaluate,
    _over, _marked_sticky and _report_sticky."""

    def _defers(self, backend, case: Case, built: frozenset[str], wait_s: float = 0.0,
                compile_task: bool = False) -> tuple[tuple[str, str] | None, Claim | None]:
        """((the case's compile key, its module) when the case waits for the module, None) or (None, the claim to build
        or load its module here now; None when this process has run it, or loads it without a slot): campaign.claims.
        Building a module and loading a built one into this process both take a compile slot (measured on an H100:
        FA4's first calls take 2-5 s in each process, FlashInfer's builds 5-400 s), except a load of a backend that loads
        in process (Backend.loads_in_process); a case waits while another process builds its module or every slot is
        busy, and the driver hands it to a worker that has the module loaded. `wait_s`: a starved backend's compile task
        waits that long for a slot, ahead of generation's claims (Task.slot_wait); a `compile_task` builds while
        builds pause (campaign.claims.write_paused)."""
        gated = self._module(backend, case)
        if gated is None or (backend.name, gated[1]) in self._units:
            return None, None
        text, unit = gated
        built_here = unit in built or self.claims.is_built(backend.name, unit)
        if not built_here and not self.builds:  # near the campaign's end: a build would outlast it
            return gated, None
        if built_here and backend.loads_in_process:  # a load on this worker's own core: no slot (Backend)
            return None, None
        claim = self.claims.slot_only(wait_s) if built_here else self.claims.claim(
            backend.name, unit, covers=text, space=backend.jit_module_space or "", wait_s=wait_s,
            compile_task=compile_task)
        return (gated, None) if claim is None else (None, claim)

    def _module(self, backend, case: Case) -> tuple[str, str] | None:
        """(compile key, what the library builds one module for: the backend's finer variant where it declares one,
        else the key) as texts; None where first calls are not gated (an AOT backend, or --compile-share 1)."""
        key = compile_key(case, backend.compiled_per, backend.compiled_features)
        if not key or self.config.compile_share >= 1.0:
            return None
        variant = backend.jit_variant(case)
        return key_text(key), key_text(key) if variant is None else json.dumps(["variant", *variant])

    def _unbuilt(self, backend, case: Case) -> str | None:
        """The case's module when it is neither in this process nor built on the host, else None (shrinking skips
        such cases: one build outlasts a shrink's whole budget; a compile task waits out another's build of it)."""
        gated = self._module(backend, case)
        if gated is None or (backend.name, gated[1]) in self._units or self.claims.is_built(backend.name, gated[1]):
            return None
        return gated[1]

    def _evaluate_claimed(self, backend, case: Case, where: dict, claim: Claim | None) -> tuple[dict, Evaluation | None]:
        """Evaluate under a claim: a first call that returned marks the key built for the whole host."""
        if claim is None:
            return self._evaluate(backend, case, where)
        row: dict = {}
        jobs = os.environ.get("MAX_JOBS")
        if claim.slot_fd is not None and jobs is not None:  # a slot's build may use the cores of the idle slots
            os.environ["MAX_JOBS"] = str(max(int(jobs), cores() // self.claims.slots))
        try:
            row, evaluation = self._evaluate(backend, case, where)
        finally:
            claim.done(built=built_by(row.get("verdict")))
            if jobs is not None:
                os.environ["MAX_JOBS"] = jobs
        return row, evaluation

    def _deferred(self, task: Task, deadline: float | None) -> None:
        """Generated cases that waited for their compile key: each gets the row it would have had when drawn. A built
        key's cases go to a worker that has it loaded (or 8 and more at once, campaign.compiles.Backlog.take); an
        unbuilt one's (a compile task) build under its lock. Beside generation every first call here, a build or a
        load (of a variant too), takes a free compile slot, or the remaining cases go back to wait; once generation
        is over they build or load where they land."""
        backend, _ = self._loaded(task.backend)
        for n, (text, where) in enumerate(zip(task.cases, task.wheres)):
            if self._over(deadline):
                return
            where = {"backend": task.backend, **where}
            case = Case.from_json(text)
            claim = None
            if task.needs_slot:  # beside generation: a first call here (a build or a load) only in a free slot
                wait_s = task.slot_wait if deadline is None else min(task.slot_wait, max(0.0, deadline - time.time()))
                waits_for, claim = self._defers(backend, case, frozenset(), wait_s, compile_task=True)
                if waits_for is not None:  # another process builds it, or every slot is busy: the cases wait again
                    self._give_back(task, n)
                    return
            else:  # once generation is over: another's build of the module is waited out
                unit = self._unbuilt(backend, case)
                if unit is not None:
                    claim = self.claims.wait_claim(task.backend, unit, covers=task.key, until=deadline,
                                                   space=backend.jit_module_space or "")
            row, evaluation = self._evaluate_claimed(backend, case, where, claim)
            row.update(phase="generate", deferred=True, t=time.time(),
                       example_id=f"{task.backend}/{where['shard']}/{where['index']}", **where)
            sticky = self._marked_sticky(row)  # before it is sent, as a generated row is
            self.send({"type": "row", "row": row})
            if sticky:
                self._report_sticky(task.backend, row, evaluation)
            if task.needs_slot and row.get("first_of_key") and not built_by(row.get("verdict")):
                # the module's build failed here: the next case would build it again and fail again (FA4 leaves
                # nothing in its cache after a failed build: each such key's two cases were two failed builds on an
                # H100, campaigns/jit-untold-fa4-failed-builds-h100-2026-12-07.md); the rest wait, as for a busy slot
                self._give_back(task, n + 1)
                return

    def _give_back(self, task: Task, start: int) -> None:
        """The task's cases from `start` on wait again in the driver's backlog (campaign.compiles.Backlog.add)."""
        for text, where in zip(task.cases[start:], task.wheres[start:]):
            self.send({"type": "deferred", "key": task.key, "unit": task.unit or task.key, "case": text,
                       "returned": True, "backend": task.backend, **where})
