"""The campaign driver: owns the row store, the buckets and the scheduler; workers do the rest.

One event loop, whatever the plumbing (local processes or Ray actors): read worker messages,
write rows, decide shrinks, notice dead and hung workers (a crash / timeout row for the case in
their last heartbeat, then a fresh worker), hand out tasks, stop at the deadline or on SIGINT /
SIGTERM. On an interrupt every worker is stopped, the rows already computed are written, and the
campaign returns a status a shell can read (130 / 143); `--resume` continues it exactly.
"""
from __future__ import annotations

import math
import signal
import time
import traceback
from pathlib import Path

from .budget import CompileBudget
from .buckets import Buckets, Decision, is_new_failure
from .caches import cache_root
from .claims import built_by, compile_slots_at
from .compile_driving import CompileDriving
from .config import (EXIT_CLEAN, EXIT_HARNESS, EXIT_NEW_FAILURES, CampaignConfig, CampaignResult, HarnessAbort,
                     Plumbing)
from .compiles import BuildTimes, FirstCalls
from .clock import WorkerClock
from .declarations import campaign_keys, declare, slice_counts
from .profiling import driver_profile
from .progress import Progress
from .scheduler import Scheduler
from .store import RowStore, case_payload, prepare, read_rows, resume_state, saved_cases
from .tasks import Task, TaskKind, WorkerConfig
from .tasks import cores as available_cores
from .machine import default_workers, gpu_mem_gib, visible_gpus
from .sticky import STICKY_EXIT

# A backend gets no more tasks after this many harness errors in its tasks (each is reported, and the campaign exits 3):
# one such error in one case, a device error the ledger's check met, gave fa4-paged up at minute 2 of a 7-minute
# campaign (benchmarks/results/campaigns/jit-untold-fa4-cold-warm-h200-2026-11-27.md); a backend that cannot run at
# all fails its first tasks alike and is given up after this many.
HARNESS_ERRORS_PER_BACKEND = 3


class Driver(CompileDriving):
    def __init__(self, cfg: CampaignConfig, plumbing: Plumbing, worker_config: WorkerConfig) -> None:
        self.cfg, self.plumbing, self.wcfg = cfg, plumbing, worker_config
        earlier = read_rows(cfg.out) if cfg.resume else []
        self.store = RowStore(cfg.out, resume=cfg.resume)
        done, self.run_no = resume_state(earlier)
        workers = plumbing.slots
        shard = cfg.shard_size or (100 if cfg.examples is None else
                                   max(10, min(100, math.ceil(cfg.examples * len(cfg.backends) / workers))))
        replays = saved_cases(cfg.out, cfg.backends) if cfg.replay_saved else {}
        gated = not cfg.compile_slices and cfg.compile_share < 1.0  # first calls held to compile slots
        self.scheduler = Scheduler(cfg.backends, examples=cfg.examples, shard_size=shard, done=done,
                                   replays=replays, max_shrinking=max(1, workers // 4), slices=slice_counts(cfg),
                                   declared=campaign_keys(cfg) if gated else None,
                                   compile_slots=worker_config.compile_slots if gated else 0)
        self._known_builds()
        for row in earlier:  # a resumed campaign does not take up a shard whose shape crashed its worker's context
            if row.get("phase") == "generate" and row.get("sticky") and row.get("shard") is not None:
                self.scheduler.crashed(row["backend"], int(row["shard"]))
        self.buckets = Buckets(per_bucket=cfg.shrink_per_bucket)
        for row in earlier:  # a resumed campaign keeps what it knew of its buckets
            if row.get("phase") == "minimal" and is_new_failure(row):
                self.buckets.known_minimal(row)
        self.progress = Progress(enabled=cfg.progress)
        self.beats: dict[int, dict] = {}
        self.slot_of: dict[int, int] = {}
        self.stopping: set[int] = set()  # asked to stop: their exit is expected
        self.timed_out: set[int] = set()
        self.origins: dict[tuple, dict] = {}  # (backend, shard, index) -> the row a shrink started from
        self.shrinking: dict[int, Task] = {}
        self.clock = WorkerClock()
        self.build_times = BuildTimes()
        self.first_calls = FirstCalls(time.time())  # which backends' compile tasks wait for a slot (Task.slot_wait)
        self.budget = CompileBudget(cfg.compile_share, workers)
        # what was last written to the slots folder for running tasks (campaign.claims), by name: the first turn writes
        # each, so a resumed campaign's writes over its earlier run's
        self.published: dict[str, object] = {}
        self.harness_errors: list[str] = []
        self.started_cases: dict[int, int] = {}  # cases each worker began (0 when it died: harness error)
        self.errored: set[int] = set()
        self.errors_of: dict[str, int] = {}  # harness errors in each backend's tasks
        self.restarts = 0
        self.next_wid = 0

    # --- rows -----------------------------------------------------------------------------------
    def _write(self, row: dict, wid: int | None = None) -> None:
        row.setdefault("run", self.run_no)
        if wid is not None:
            row.setdefault("worker", wid)
        self.store.append(row)
        bucket = row.get("bucket")
        self.progress.row(row, bucket)

    def _save_unshrunk(self, row: dict, note: str) -> None:
        """A failure kept as found (its process died, it hung, or the campaign ended before its shrink)."""
        bucket = self.buckets.covering(row)
        stem, payload, _ = case_payload(row["backend"], row, None)
        path = self.store.write_case(stem, payload, None)
        minimal = dict(row, phase="minimal", case_file=path, note=note, t=time.time())
        if bucket is not None:
            minimal["bucket"] = bucket.id
            if bucket.minimal is None:
                bucket.minimal = minimal
        self._write(minimal)

    def _on_row(self, wid: int, row: dict) -> None:
        self.beats.pop(wid, None)
        self.budget.record(row)
        phase = row.get("phase")
        if row.get("first_of_key"):
            self.scheduler.first_call_done()
            self.first_calls.ended(row["backend"], time.time())
            if row.get("compile_s"):
                self.build_times.record(row["backend"], row["compile_s"])
        if row.get("compile_key"):
            self.scheduler.key_drawn(row["backend"], row["compile_key"])
            if built_by(row.get("verdict")):
                self.scheduler.key_built(row["backend"], row["compile_key"], wid, unit=row.get("jit_unit", ""))
            elif row.get("first_of_key"):
                self.scheduler.key_failed(row["backend"], row["compile_key"])
        if phase == "generate":
            self.scheduler.example_done(row["backend"], row["shard"], row["index"], sticky=bool(row.get("sticky")))
            decision = self.buckets.observe(row)
            bucket = self.buckets.covering(row) if decision != Decision.IGNORE else None
            if bucket is not None:
                row["bucket"] = bucket.id
            self._write(row, wid)
            self._act(row, decision)
            return
        if phase == "shrink":
            self.scheduler.shrink_example_done()
        if phase == "replay" and is_new_failure(row):
            bucket = self.buckets.known_minimal(row)
            row["bucket"] = bucket.id
        self._write(row, wid)

    def _act(self, row: dict, decision: Decision) -> None:
        """Queue a shrink of a new kind of failure, or save one that cannot be shrunk as found."""
        if decision == Decision.SHRINK:
            self.origins[(row["backend"], row["shard"], row["index"])] = row
            key, tour, pins_of = self.scheduler.focus_of(row["backend"], row["shard"])
            self.scheduler.add(Task(TaskKind.SHRINK, row["backend"], shard=row["shard"], size=row["shard_size"],
                                    target=row["index"], signature=self.buckets.target(row).coarse, key=key,
                                    tour=tour, pins_of=pins_of))
        elif decision == Decision.SAVE and not row.get("sticky"):  # a sticky worker sends its own case
            self._save_unshrunk(row, "not shrunk: " + ("it hung" if row["verdict"] == "timeout" else "its process died"))

    def _on_minimal(self, wid: int, msg: dict) -> None:
        self.beats.pop(wid, None)
        row = msg.get("row")
        task = self.shrinking.get(wid)
        if msg.get("signature") is None:  # a sticky error: the worker's case, with its tensors
            bucket = self.buckets.covering(row)
            if bucket is not None and bucket.minimal is None:
                row["case_file"] = self.store.write_case(msg["stem"], msg["payload"], msg.get("tensors"))
                bucket.minimal = row
            row["bucket"] = bucket.id if bucket else None
            self._write(row, wid)
            return
        coarse = tuple(msg["signature"])
        origin = self.origins.pop((task.backend, task.shard, task.target), None) if task else None
        bucket, new, still = self.buckets.shrunk(coarse, row, origin if row is not None else None)
        if row is None:
            if origin is not None:
                self.buckets.observe_unshrunk(origin)
                self._save_unshrunk(origin, msg.get("note", "not shrunk"))
        else:
            row["bucket"] = bucket.id
            if new:
                row["case_file"] = self.store.write_case(msg["stem"], msg["payload"], msg.get("tensors"))
            else:
                row["merged_into"] = bucket.id  # the same bug as a bucket found before: no second case file
            self._write(row, wid)
        for waiting in still:  # failures a shrink in flight held back, which its minimal case does not cover
            self._act(waiting, self.buckets.observe(waiting))

    def _on_exit(self, wid: int, status: int, output: str) -> None:
        self.clock.gone(wid)
        beat = self.beats.pop(wid, None)
        task = self.scheduler.worker_lost(wid)
        self.shrinking.pop(wid, None)
        slot = self.slot_of.pop(wid, 0)
        expected = wid in self.stopping
        self.stopping.discard(wid)
        if expected and beat is None:
            return
        if status != STICKY_EXIT and beat is not None:
            timed_out = wid in self.timed_out
            verdict = "timeout" if timed_out else "crash"
            message = (f"no result within {self._timeout(beat):.0f}s; worker killed" if timed_out else
                       f"worker died (exit {status}) while running this case")
            phase = {TaskKind.SHRINK: "shrink", TaskKind.REPLAY: "replay"}.get(task.kind if task else None, "generate")
            fields = {k: v for k, v in beat.items() if k not in ("type", "started")}  # base_row's summary
            row = {**fields, "phase": phase, "verdict": verdict, "symptom": verdict,
                   "message": message, "worker_died": True, "worker_output": output[-3000:],
                   "shard": beat.get("shard"), "index": beat.get("index"), "shard_size": beat.get("shard_size"),
                   "t": time.time()}
            if phase == "generate":
                row["example_id"] = f"{beat['backend']}/{beat.get('shard')}/{beat.get('index')}"
                self._on_row(wid, row)
            else:
                self._write(row, wid)
                if task is not None and task.kind == TaskKind.SHRINK:
                    self._on_minimal(wid, {"row": None, "signature": list(task.signature),
                                           "note": "not shrunk: its process died while shrinking"})
        elif status != STICKY_EXIT and self.started_cases.get(wid, 0) == 0 and not expected and wid not in self.errored:
            name = task.backend if task else "?"
            self.harness_errors.append(f"worker for {name} died (exit {status}) before running a case:\n{output[-2000:]}")
            if task is not None:
                self.scheduler.give_up(task.backend, "its worker cannot start")
        self.timed_out.discard(wid)
        if not self.scheduler.stopped and self.restarts < 50 + 10 * self.plumbing.slots:
            self.restarts += 1
            self._start(slot)

    # --- loop -----------------------------------------------------------------------------------
    def _start(self, slot: int) -> None:
        wid = self.next_wid
        self.next_wid += 1
        try:
            self.plumbing.start(wid, slot)
        except Exception as e:  # noqa: BLE001 - any failure to start a worker ends the campaign (exit 3)
            raise HarnessAbort(f"worker {wid} could not be started: {type(e).__name__}: {e}") from e
        self.slot_of[wid] = slot
        self.started_cases[wid] = 0
        self.clock.started(wid)

    def _handle(self, event: tuple) -> None:
        if event[0] == "exit":
            self._on_exit(event[1], event[2], event[3])
            return
        _, wid, msg = event
        kind = msg.get("type")
        if kind == "ready":
            self.clock.ready(wid)
            self.scheduler.add_worker(wid)
        elif kind == "beat":
            self.beats[wid] = msg
            self.started_cases[wid] = self.started_cases.get(wid, 0) + 1
        elif kind == "row":
            self._on_row(wid, msg["row"])
        elif kind == "minimal":
            self._on_minimal(wid, msg)
        elif kind == "deferred":  # a generated case waits for its JIT module (campaign.compiles)
            where = {k: msg[k] for k in ("shard", "index", "shard_size", "pins_of") if k in msg}
            self.scheduler.defer(msg["backend"], msg["key"], msg["case"], where,
                                 returned=bool(msg.get("returned")), unit=msg.get("unit", ""))
            if not msg.get("returned"):
                self.progress.deferred(msg["backend"])
        elif kind == "done":
            self.clock.done(wid, msg)
            self.beats.pop(wid, None)
            self.shrinking.pop(wid, None)
            if wid in self.stopping:
                return
            self.scheduler.task_done(wid, exhausted=bool(msg.get("exhausted")), stalled=bool(msg.get("stalled")),
                                     rows=msg.get("rows"))
        elif kind == "error":  # a task of the backend raised in attnref's code: a harness error, not a finding
            self.errored.add(wid)
            beat = self.beats.pop(wid, None)  # the case it was on is not to blame: no `worker died` row for it
            on = f"\nthe case it was on: {beat['case']}" if beat and beat.get("case") else ""
            self.harness_errors.append(msg.get("message", "") + on)
            backend = msg.get("backend", "?")
            self.errors_of[backend] = self.errors_of.get(backend, 0) + 1
            if self.errors_of[backend] >= HARNESS_ERRORS_PER_BACKEND:
                self.scheduler.give_up(backend, msg.get("message", ""))
            self.scheduler.task_done(wid)

    def _task_deadline(self, task: Task, deadline: float | None) -> float | None:
        """With a time budget and more backends than workers, a generation task gets a time slice (its
        shard continues at a later turn), so a slow backend cannot hold a worker the whole campaign."""
        if deadline is None or task.kind != TaskKind.GENERATE or len(self.cfg.backends) <= self.plumbing.slots:
            return deadline
        share = self.cfg.seconds * self.plumbing.slots / len(self.cfg.backends)
        return min(deadline, time.time() + min(60.0, max(5.0, share / 4)))

    def _timeout(self, beat: dict) -> float:
        if beat.get("first_compile") and self.cfg.compile_timeout is not None:
            return max(self.cfg.compile_timeout, self.cfg.example_timeout)
        return self.cfg.example_timeout

    def _check_hangs(self) -> None:
        now = time.time()
        for wid, beat in list(self.beats.items()):
            if wid not in self.timed_out and now - beat["started"] > self._timeout(beat):
                self.timed_out.add(wid)
                self.plumbing.kill(wid)

    def _stop_all(self) -> None:
        self.scheduler.stop()
        for wid in list(self.slot_of):
            if wid not in self.stopping:
                self.stopping.add(wid)
                self.plumbing.stop(wid)

    def run(self) -> CampaignResult:
        interrupted = {"signal": None}

        def on_signal(signum, frame):
            interrupted["signal"] = signum

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        started = time.time()
        deadline = None if self.cfg.seconds is None else started + self.cfg.seconds
        try:
            self._loop(deadline, interrupted)
        except HarnessAbort as e:
            self.harness_errors.append(str(e))
        except Exception as e:  # noqa: BLE001 - the driver never dies with a traceback: one line, exit 3
            self.harness_errors.append(f"internal driver error: {type(e).__name__}: {e} (traceback in "
                                       f"{self._log_traceback()})")
        finally:
            for wid in list(self.slot_of):  # stragglers past the grace period
                self.plumbing.kill(wid)
            for event in self.plumbing.poll(0.5):  # rows they sent before dying are still written
                if event[0] == "msg" and event[2].get("type") in ("row", "minimal"):
                    self._handle(event)
            self.plumbing.close()
            for s, h in previous.items():
                signal.signal(s, h)
        cut_off = "not shrunk: the campaign ended before its shrink ran"
        for row in self.buckets.leftovers(list(self.origins.values())):  # shrinks that never ran
            self._save_unshrunk(row, cut_off)
        self.progress.tick(force=True)
        self.progress.close()
        self.store.close()
        self._record_compiles(started)
        return self._result(interrupted["signal"])

    def _log_traceback(self) -> Path:
        path = Path(self.cfg.out) / "logs" / "driver.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(traceback.format_exc())
        return path

    def _loop(self, deadline: float | None, interrupted: dict) -> None:
        """Start the workers, then schedule and collect until the budget, the work or a signal ends it."""
        grace_until, started = None, time.time()
        self.first_calls.started = started
        for slot in range(self.plumbing.slots):
            self._start(slot)
        while True:
            for event in self.plumbing.poll(0.2):
                self._handle(event)
            self._check_hangs()
            now = time.time()
            slots = self._compile_budget(now - started)
            late = self._late(None if deadline is None else deadline - now)
            if interrupted["signal"] is not None and grace_until is None:
                self._stop_all()
                grace_until = now + 3.0
            elif deadline is not None and now >= deadline and grace_until is None:
                self._stop_all()
                grace_until = now + min(self.cfg.example_timeout, 30.0)
            if grace_until is not None and (not self.slot_of or now >= grace_until):
                break
            if grace_until is None:
                assigned = self.scheduler.schedule()
                starved = self.first_calls.starved(now, {t.backend for _, t in assigned if t.needs_slot})
                for wid, task in assigned:
                    if task.kind == TaskKind.SHRINK:
                        self.shrinking[wid] = task
                    task = self._stamped(task, slots, late, starved)
                    self.plumbing.assign(wid, task, self._task_deadline(task, deadline))
                    self.clock.assigned(wid, task.backend)
                if self.scheduler.finished:
                    self._stop_all()
                    grace_until = now + 5.0
            self.progress.tick()

    def _result(self, signum: int | None) -> CampaignResult:
        rows = read_rows(self.cfg.out)
        this_run = [r for r in rows if r.get("run") == self.run_no]
        if signum is not None:
            status = 128 + signum
        elif self.harness_errors:
            status = EXIT_HARNESS
        elif any(is_new_failure(r) for r in this_run if r.get("phase") in ("generate", "replay")):
            status = EXIT_NEW_FAILURES
        else:
            status = EXIT_CLEAN
        return CampaignResult(rows, self.buckets.summary(), status, signum, self.harness_errors)


def run_campaign(cfg: CampaignConfig) -> CampaignResult:
    """Fuzz cfg.backends with local worker processes (or Ray actors with cfg.use_ray), under CUDA MPS with cfg.mps."""
    if cfg.mps:
        from .mps import mps_daemon

        with mps_daemon():  # the workers' CUDA contexts must be made after the daemon starts
            return _run_campaign(cfg)
    return _run_campaign(cfg)


def _run_campaign(cfg: CampaignConfig) -> CampaignResult:
    from .caches import use_caches

    use_caches(cfg.cache_dir)  # before the backends are imported below
    from fuzz.compare import ORACLE_CPU_MAX

    prepare(cfg.out)
    declare(cfg)
    gpus = visible_gpus()
    per = cfg.workers if isinstance(cfg.workers, int) else default_workers(gpus, gpu_mem_gib=gpu_mem_gib())
    slots = per * max(1, gpus)
    threads = max(1, available_cores() // slots)
    wcfg = WorkerConfig(seed=cfg.seed, limits=cfg.limits, specs=cfg.specs, threads=threads,
                        oracle_cpu_max=cfg.oracle_cpu_max if cfg.oracle_cpu_max is not None else ORACLE_CPU_MAX,
                        shrink_seconds=cfg.shrink_seconds, compile_slices=cfg.compile_slices,
                        cache_dir=str(cache_root(cfg.cache_dir)), compile_share=cfg.compile_share,
                        compile_slots=compile_slots_at(0.0, cfg.compile_share, slots),
                        slots_dir=str(Path(cfg.out).resolve() / "logs" / "compile-slots"),
                        profile_dir=str(Path(cfg.profile_dir).resolve()) if cfg.profile_dir else None,
                        # small cases 0.92x the time on a CPU host, no gain on an H200's host (campaign.allocator)
                        keep_freed_memory=gpus == 0)
    if cfg.use_ray:
        from .ray_pool import RayPool

        plumbing = RayPool(wcfg, per_gpu=per, gpus=gpus, address=cfg.ray_address, log_dir=Path(cfg.out) / "logs")
    else:
        from .pool import LocalPool

        plumbing = LocalPool(wcfg, slots=slots, gpus=gpus, log_dir=Path(cfg.out) / "logs",
                             tag=str(Path(cfg.out).resolve()))
    with driver_profile(wcfg.profile_dir):
        return Driver(cfg, plumbing, wcfg).run()
