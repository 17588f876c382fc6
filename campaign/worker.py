"""What a worker does with a task, whatever process or Ray actor it lives in.

A worker keeps its backends (and their compiled kernels) for its whole life, runs one task at a
time and reports through `send(message)`; it writes no file but campaign.claims' locks and built markers.
Messages (plain dicts):
  beat     {base_row, started, shard, index}       before each kernel call: if the process dies or
           hangs, the driver knows which case did it (and writes its row from these fields)
  row      {row}                                   one evaluated example (generate, shrink, replay)
  minimal  {row, payload, tensors}                 a shrunk (or unshrinkable) failure and its case file
  done     {exhausted}                             the task ended; exhausted: the shard had no more cases

Generation and replays are here; shrinks in campaign.shrinking, JIT first calls under claims and the tasks of cases
that waited for their module in campaign.module_claims, sticky device errors in campaign.sticky.
"""
from __future__ import annotations

import hashlib
import json
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
from fuzz.strategies import Limits, cases, compile_key, compile_slices, key_limits
from fuzz.warm_up import warm_up_cases
from reference.case import Case

from .caches import KEYS_FOLDER, PREFIXES_FOLDER, cache_root
from .claims import CompileClaims
from .compiles import key_text
from .drawing import (PINNED_PREFIX_SEEDS, PREFIX_SEEDS, Fresh, PrefixStore, fixed_prefix, global_prngs_left_alone,
                      hypothesis_settings, pin_hypothesis_constants)
from .module_claims import ModuleClaims
from .profiling import TaskProfiler
from .shrinking import Shrinking
from .sticky import StickyDeviceError, sticky_crash, sticky_device_error
from .store import case_payload
from .tasks import Task, TaskKind, WorkerConfig, shard_seed

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

class _Stop(Exception):
    pass


class Worker(ModuleClaims, Shrinking):
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
        with self.profiler.task(), global_prngs_left_alone():
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
