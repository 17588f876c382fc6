"""What a worker does with a task, whatever process or Ray actor it lives in.

A worker keeps its backends (and their compiled kernels) for its whole life, runs one task at a
time and reports through `send(message)`; it writes no file but campaign.claims' locks and built markers.
Messages (plain dicts):
  beat     {base_row, started, shard, index}       before each kernel call: if the process dies or
           hangs, the driver knows which case did it (and writes its row from these fields)
  row      {row}                                   one evaluated example (generate, shrink, replay)
  minimal  {row, payload, tensors}                 a shrunk (or unshrinkable) failure and its case file
  done     {exhausted}                             the task ended; exhausted: the shard had no more cases
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

from hypothesis import Phase, given, seed
from hypothesis.errors import Unsatisfiable

from backends.registry import get
from fuzz.compare import Evaluation, base_row, crash_message, evaluate
from fuzz.judge import Verdict
from fuzz.ledger import known_crash_for, known_for
from fuzz.shapes import pin_shape, pins_text
from fuzz.simplify import simplify
from fuzz.strategies import Limits, cases, compile_key, compile_slices, key_limits
from fuzz.warm_up import warm_up_cases
from reference.case import Case

from .buckets import row_symptoms
from .caches import KEYS_FOLDER, PREFIXES_FOLDER, cache_root
from .claims import Claim, CompileClaims, built_by
from .compiles import key_text
from .drawing import (PINNED_PREFIX_SEEDS, PREFIX_SEEDS, Fresh, PrefixStore, fixed_prefix, hypothesis_settings,
                      pin_hypothesis_constants)
from .profiling import TaskProfiler
from .store import tensors_b64
from .tasks import Task, TaskKind, WorkerConfig, cores, shard_seed

# Where a generation task's seconds go besides hypothesis' own start and end (`done` messages; compile_draws.json):
# building its strategy and fixed prefix, drawing cases evaluated here, evaluating them (rows and messages), drawing
# cases sent to wait for their module, and drawing cases that are not examples (repeats, the prefix, a resume's start).
# `variant_draw_s` is the part of the waiting draws whose compile key this process has run already: they wait for a
# module finer than the key (Backend.jit_variant: FlashInfer builds two modules of a windowless key, by how the case
# spells an unbounded window), the draws a focus on loaded modules rather than loaded keys would spare.
SPENT = ("setup_s", "draw_s", "evaluated_s", "deferred_draw_s", "variant_draw_s", "skipped_draw_s")

# A generation task whose last STALL_DRAWS draws all waited for modules ends there (`done` says `stalled`; the scheduler
# closes the shard): its further draws would mostly wait too, or be dropped behind a full backlog. On an H200, FA4's
# untold campaigns drew 83,000-84,000 cases that waited, 51,260 and 27,738 of them dropped, 6 ms a draw, 12 % of the
# workers' time (campaigns/jit-untold-side-by-side-h200-2026-11-27.md). Eight keep a module's backlog fed for its build.
STALL_DRAWS = 8

STICKY_EXIT = 3  # a worker's exit status after a sticky device error: its rows are sent, start a fresh one

_STICKY = ("illegal memory access", "device-side assert", "unspecified launch failure", "misaligned address",
           "an illegal instruction")


def sticky_device_error(message: str) -> bool:
    """CUDA errors after which the process's CUDA context cannot be used again."""
    return any(s in message for s in _STICKY)


def sticky_crash(row: dict) -> bool:
    """Whether the row is a crash with a sticky device error: nothing more can run on this process's device."""
    return row["verdict"] == Verdict.CRASH.value and sticky_device_error(row.get("message", ""))


class StickyDeviceError(Exception):
    """Raised after a sticky device error was reported: the process must end (status STICKY_EXIT)."""


class _Stop(Exception):
    pass


class _Found(AssertionError):
    pass


class _DeviceLost(Exception):
    """A simplification step crashed with a sticky device error: no later step can run in this process."""


def case_payload(backend: str, row: dict, evaluation: Evaluation | None) -> tuple[str, dict, str | None]:
    """(file stem, JSON payload, base64 tensors) of a case file: the case, its verdict and row, and the
    expected / actual tensors the report draws."""
    digest = hashlib.sha1(row["case"].encode()).hexdigest()[:10]
    payload = {"backend": backend, "verdict": row["verdict"], "case": json.loads(row["case"]),
               "row": {k: v for k, v in row.items() if k != "case"}}
    tensors = None
    if evaluation is not None and evaluation.expected is not None:
        a = evaluation.actual
        try:
            tensors = tensors_b64({
                "expected_output": evaluation.expected.output.cpu(), "expected_lse": evaluation.expected.lse.cpu(),
                "actual_output": a.output.detach().cpu() if a is not None else None,
                "actual_lse": a.lse.detach().cpu() if a is not None and a.lse is not None else None,
                "query_start_loc": evaluation.inputs.query_start_loc.cpu()})
        except RuntimeError as e:  # a sticky device error (found on an H100 with FA4): the case is saved without tensors
            payload["tensors_lost"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return f"{backend}-{digest}", payload, tensors


class Worker:
    def __init__(self, config: WorkerConfig, send: Callable[[dict], None],
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        pin_hypothesis_constants()
        self.config = config
        self.send = send
        self.should_stop = should_stop
        self.limits = Limits(**config.limits)
        self._backends: dict[str, tuple[Any, list[Limits]]] = {}
        self._strategies: dict[tuple[str, Any], Any] = {}
        self._prefixes: dict[tuple[str, Any], frozenset[str]] = {}  # a strategy's fixed prefix, once computed
        self.pins: dict[tuple[str, int], str] = {}  # (backend, pins' shard) -> the pinned shape (fuzz.shapes), as text
        self.stalled = False  # the running generation task ended after STALL_DRAWS waiting draws
        self.builds = True  # the running task may build modules (Task.builds)
        self._compiled: set[tuple] = set()  # (backend, compile key) this process has run before
        self._units: set[tuple[str, str]] = set()  # (backend, module it builds: _unit) this process has run
        root = cache_root(config.cache_dir)
        keys = root / KEYS_FOLDER
        self.prefix_store = PrefixStore(root / PREFIXES_FOLDER)
        self.claims = CompileClaims(keys, config.slots_dir or keys / "slots", config.compile_slots)
        self.spent = dict.fromkeys(SPENT, 0.0)  # the running task's seconds by part (run)
        self.rows = 0  # the running generation task's rows so far (run)
        self.profiler = TaskProfiler(config.profile_dir)

    # --- shared pieces --------------------------------------------------------------------------
    def _loaded(self, name: str) -> tuple[Any, list[Limits]]:
        """(backend, its compile slices: [the campaign's limits] without --compile-slices), once per process."""
        if name not in self._backends:
            backend = get(name, include_mutants=True, specs=self.config.specs)
            slices = (compile_slices(backend.caps, self.limits, backend.compiled_per, backend.compiled_features)
                      if self.config.compile_slices else [self.limits])
            self._backends[name] = (backend, slices)
        return self._backends[name]

    def _backend(self, name: str, shard: int, key: str = "", tour: bool = False, pins_of: int = 0):
        """(backend, strategy, fixed prefix) of `name` for `shard`, built once per process: shard 0 is the
        warm-up (campaign.scheduler.WARMUP_SHARD: fuzz.warm_up, small cases, half with every feature on);
        a JIT backend's later shards draw from their compile slice, or only cases of compile key `key` (a focused
        shard: campaign.scheduler), of the shape pinned by the seed of shard `pins_of` where the scheduler passes
        one (0: its own). A tour's few draws skip the prefix (about 1 s per strategy): it draws a key once."""
        backend, slices = self._loaded(name)
        which: Any = key or (-1 if shard == 0 else (shard - 1) % len(slices))
        pinned = bool(key) and not tour and bool(backend.jit_shape_per)
        source = pins_of or shard
        if pinned:  # a shape of its own (fuzz.shapes): its strategy serves the shards that draw it and their shrinks
            which = (key, source)
        if (name, which) not in self._strategies:
            if key:
                per, keyed = backend.compiled_per, backend.compiled_features
                narrowed = key_limits(backend.caps, self.limits, per, keyed, json.loads(key))
                if pinned:
                    narrowed = pin_shape(backend.caps, narrowed, backend.jit_shape_per,
                                         shard_seed(self.config.seed, name, source))
                    self.pins[name, source] = pins_text(narrowed, backend.jit_shape_per)
                strategy = cases(backend.caps, narrowed).filter(lambda c: key_text(compile_key(c, per, keyed)) == key)
            else:
                strategy = (warm_up_cases(backend.caps, self.limits) if shard == 0
                            else cases(backend.caps, slices[which]))
            self._strategies[name, which] = strategy
        strategy = self._strategies[name, which]
        # the shard that first draws a shape (and the warm-up) evaluates its simplest cases; the shards that borrow its
        # pins, like every other shard, skip them
        if shard == 0 or tour or (pinned and not pins_of):
            return backend, strategy, frozenset()
        if (name, which) not in self._prefixes:
            self._prefixes[name, which] = fixed_prefix(strategy, PINNED_PREFIX_SEEDS if pinned else PREFIX_SEEDS,
                                                       self.prefix_store)
        return backend, strategy, self._prefixes[name, which]

    def _evaluate(self, backend, case: Case, where: dict, check_blind: bool = True) -> tuple[dict, Evaluation | None]:
        known = known_crash_for(backend.name, case)
        if known is not None:
            row = base_row(backend, case)
            row.update(verdict=Verdict.CRASH.value, symptom="crash", known_issue=known.link,
                       message=f"known crash, not launched: {known.summary}")
            return row, None
        # the beat carries the row's summary fields: a worker that dies or hangs in this case still leaves a
        # row the coverage map and the report can count (features, dtype, sizes)
        key = self._run_key(backend, case)
        # a JIT compile may come first, of the key or of a finer variant (jit_variant): a longer timeout. On an H100
        # the 120-s example timeout killed 13 workers mid-build of such variants, each a false `timeout` row
        # (campaigns/jit-untold-h100-2026-11-26.md).
        first = bool(key[1]) and key not in self._compiled
        self._compiled.add(key)
        gated = self._module(backend, case)
        if gated is not None:
            first = first or (backend.name, gated[1]) not in self._units
            self._units.add((backend.name, gated[1]))
        summary = base_row(backend, case)
        self.send({"type": "beat", **summary, "started": time.time(), "first_compile": first, **where})
        evaluation = evaluate(backend, case, check_blind=check_blind, oracle_cpu_max=self.config.oracle_cpu_max,
                              base=summary)
        row = evaluation.row
        if key[1]:
            row["compile_key"] = key_text(key[1])
            if gated is not None:
                row["jit_unit"] = gated[1]  # the module the case ran through (the driver routes waiting cases by it)
            if first:  # this process built (or loaded) the key's module in this call
                row["first_of_key"] = True
                # a backend that does not time its first call apart (vLLM's Triton kernels): the whole call was the build
                row.setdefault("compile_s", row.get("kernel_s") or 0.0)
        started = time.perf_counter()
        known = self._known(backend.name, case, evaluation)
        if "compare_s" in row:  # judging against the ledger is part of the comparison
            row["compare_s"] += time.perf_counter() - started
        if known is not None:
            failing = Verdict(row["verdict"]).is_failure
            if not failing or known.explains_row(row):
                row["known_issue"] = known.link
            if not failing:
                row["known_fixed"] = True
        return row, evaluation

    @staticmethod
    def _run_key(backend, case: Case) -> tuple:
        """(backend name, the case's compile key): what `_compiled` records of the keys this process has run."""
        return backend.name, compile_key(case, backend.compiled_per, backend.compiled_features)

    @staticmethod
    def _known(name: str, case: Case, evaluation: Evaluation):
        """The ledger's finding for the evaluated case, checked on its inputs, or None. A case the backend does not
        take (no inputs drawn) is no evidence about a finding. After a crash that left the device unusable nothing is
        checked (every op on it fails); a device error that shows only here, after the kernel's call returned, makes
        the row this case's crash. On an H200, fa4-paged's illegal memory access raised in the sink check's first op,
        was taken for a harness error, and ended the backend's campaign at minute 2
        (benchmarks/results/campaigns/jit-untold-fa4-cold-warm-h200-2026-11-27.md)."""
        row = evaluation.row
        if evaluation.inputs is None or sticky_crash(row):
            return None
        try:
            return known_for(name, case, evaluation.inputs)
        except Exception as e:
            if not sticky_device_error(str(e)):
                raise  # the ledger's own bug: a harness error, not the kernel's
            row.update(verdict=Verdict.CRASH.value, symptom="crash", traceback=traceback.format_exc()[-4000:],
                       message=f"{crash_message(e)} (raised after the kernel's call returned, by the next op on the "
                               "device)")
            return None

    def _over(self, deadline: float | None) -> bool:
        return (deadline is not None and time.time() >= deadline) or self.should_stop()

    @staticmethod
    def _marked_sticky(row: dict) -> bool:
        """Whether the row is a crash with a sticky device error; such a row is marked `sticky`."""
        if sticky_crash(row):
            row["sticky"] = True
            return True
        return False

    def _report_sticky(self, backend: str, row: dict, evaluation: Evaluation | None) -> None:
        """The CUDA context is now unusable: every later case here would crash and be blamed. Send this
        case unshrunk as its bucket's minimal case and end the process."""
        stem, payload, tensors = case_payload(backend, row, evaluation)
        self.send({"type": "minimal", "stem": stem, "payload": payload, "tensors": tensors,
                   "row": dict(row, phase="minimal", t=time.time(),
                               note="not shrunk: sticky CUDA error (the context is unusable afterwards)")})
        raise StickyDeviceError(row.get("message", ""))

    def run(self, task: Task, deadline: float | None = None) -> None:
        """Run one task to its end (or the deadline / a stop request); always ends with a `done` message, which
        carries the task's seconds and, for generation, where they went besides the rows (`spent`). Under cProfile
        with `--profile` (campaign.profiling)."""
        with self.profiler.task():
            self._run(task, deadline)

    def _run(self, task: Task, deadline: float | None) -> None:
        exhausted = self.stalled = False
        self.builds = task.builds
        started = time.perf_counter()
        self.spent, self.rows = dict.fromkeys(SPENT, 0.0), 0
        self.claims.slots = max(1, task.slots or self.config.compile_slots)  # the driver's budget as it stands now
        if task.kind == TaskKind.GENERATE:
            try:
                exhausted = self._generate(task, deadline)
            except Unsatisfiable:
                if not task.key:
                    raise
                # a compile key the focus's strategy (nearly) never draws, such as a value head size the limits leave
                # out: the shard is exhausted, not a harness error that ends the campaign
                exhausted = True
        elif task.kind == TaskKind.SHRINK:
            self._shrink(task, deadline)
        elif task.kind == TaskKind.DEFERRED:
            self._deferred(task, deadline)
        else:
            self._replay(task, deadline)
        shard = {"shard_kind": task.shard_kind, "rows": self.rows} if task.kind == TaskKind.GENERATE else {}
        self.send({"type": "done", "exhausted": exhausted, "stalled": self.stalled, "backend": task.backend,
                   "kind": task.kind.value, "task_s": time.perf_counter() - started, **shard, **self.spent})

    # --- tasks ----------------------------------------------------------------------------------
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

    def _generate(self, task: Task, deadline: float | None) -> bool:
        setup = time.perf_counter()
        backend, strategy, prefix = self._backend(task.backend, task.shard, task.key, task.tour, task.pins_of)
        fresh = Fresh(prefix)
        state = {"index": 0, "stopped": False, "waiting": 0}
        built = frozenset(task.built)
        drawn = time.perf_counter()  # when the previous case's turn ended: hypothesis draws the next one from here
        self.spent["setup_s"] += drawn - setup  # the strategy and its fixed prefix, once per process and strategy

        def spend(part: str) -> None:
            nonlocal drawn
            now = time.perf_counter()
            self.spent[part] += now - drawn
            drawn = now

        def one(case: Case) -> None:
            if state["stopped"]:
                raise _Stop
            if not fresh(case):
                spend("skipped_draw_s")
                return
            state["index"] += 1
            i = state["index"]
            if i > task.size or self._over(deadline):
                state["stopped"] = True
                raise _Stop
            if i <= task.start:  # done in an earlier run: drawn again to reach the same place, not evaluated
                spend("skipped_draw_s")
                return
            where = {"backend": task.backend, "shard": task.shard, "index": i, "shard_size": task.size}
            if task.pins_of:
                where["pins_of"] = task.pins_of  # rows, waiting cases' rows too, say it: resume and shrinks draw alike
            waits_for, claim = self._defers(backend, case, built) if not self.config.compile_slices else (None, None)
            if waits_for is not None:  # the driver hands it out once the module is built (campaign.compiles)
                self.send({"type": "deferred", "key": waits_for[0], "unit": waits_for[1], "case": case.to_json(),
                           **where})
                # of a key this process has run: it waits for another module of that key (a variant)
                spend("variant_draw_s" if self._run_key(backend, case) in self._compiled else "deferred_draw_s")
                state["waiting"] += 1
                if state["waiting"] >= STALL_DRAWS:
                    state["stopped"] = self.stalled = True
                    raise _Stop
                return
            state["waiting"] = 0
            spend("draw_s")
            row, evaluation = self._evaluate_claimed(backend, case, where, claim)
            row.update(phase="generate", example_id=f"{task.backend}/{task.shard}/{i}", t=time.time(), **where)
            if task.key:
                row["focus_key"] = task.key  # a focused shard's row (campaign.focus.FOCUSED_PER_WHOLE)
                if task.tour:
                    row["tour"] = True  # of a key nothing was drawn of before (campaign.focus.TOUR_SIZE)
                if (task.backend, task.pins_of or task.shard) in self.pins:  # its focused shard's pins (fuzz.shapes)
                    row["shape_pins"] = self.pins[task.backend, task.pins_of or task.shard]
            sticky = self._marked_sticky(row)
            self.send({"type": "row", "row": row})
            self.rows += 1
            spend("evaluated_s")  # the row's own parts and its message
            if sticky:
                state["stopped"] = state["sticky"] = True  # hypothesis calls once more to report: a no-op
                self._report_sticky(task.backend, row, evaluation)

        test = hypothesis_settings(fresh.budget(task.size), [Phase.generate])(
            seed(shard_seed(self.config.seed, task.backend, task.shard))(given(strategy)(one)))
        try:
            test()
        except (_Stop, StickyDeviceError):
            pass
        if state.get("sticky"):
            raise StickyDeviceError(task.label)
        return not state["stopped"] and state["index"] < task.size

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
                    for text2, where2 in zip(task.cases[n:], task.wheres[n:]):
                        self.send({"type": "deferred", "key": task.key, "unit": task.unit or task.key, "case": text2,
                                   "returned": True, "backend": task.backend, **where2})
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

    def _replay(self, task: Task, deadline: float | None) -> None:
        backend, _ = self._loaded(task.backend)  # a replay draws nothing: no strategy to build
        for text in task.cases:
            if self._over(deadline):
                return
            try:
                case = Case.from_json(text)
            except (ValueError, TypeError) as e:  # a case file from another version, or edited by hand
                self.send({"type": "row", "row": {"backend": task.backend, "phase": "replay", "verdict": "unsupported",
                                                  "message": f"saved case no longer valid: {e}", "case": text,
                                                  "t": time.time()}})
                continue
            where = {"backend": task.backend, "shard": None, "index": None}
            row, evaluation = self._evaluate(backend, case, where)
            digest = hashlib.sha1(text.encode()).hexdigest()[:10]
            row.update(phase="replay", example_id=f"{task.backend}/replay/{digest}", t=time.time(),
                       fixed=not Verdict(row["verdict"]).is_failure)
            self.send({"type": "row", "row": row})
            if self._marked_sticky(row):
                self._report_sticky(task.backend, row, evaluation)
