"""The driver's share of a campaign's JIT compiles (campaign.engine.Driver): modules an earlier campaign built, the
compile slots of the moment and the budget that sets them (campaign.budget), backends whose builds would outlast the
campaign, the first calls running, what tasks carry as they go out, and the record benchmarks/jit_campaign.py reads
(compile_draws.json). Running tasks learn the slots and the late backends from files in the slots folder
(campaign.claims)."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from .caches import KEYS_FOLDER, cache_root
from .claims import (SLOT_WAIT_S, WARMUP_S, built_modules, compile_slots_at, write_budget, write_late,
                     write_paused)
from .tasks import Task, TaskKind


class CompileDriving:
    """Methods of campaign.engine.Driver; they read its cfg, wcfg, plumbing, scheduler, beats, clock, build_times,
    budget, progress and published."""

    def _known_builds(self) -> None:
        """Modules an earlier campaign over the same cache built (campaign.claims' markers): their cases go out at
        once."""
        for backend in self.cfg.backends:
            for key, unit in built_modules(cache_root(self.wcfg.cache_dir) / KEYS_FOLDER, backend):
                self.scheduler.key_built(backend, key, unit=unit)

    # --- rows -----------------------------------------------------------------------------------

    def _record_compiles(self, started: float) -> None:
        """OUT/compile_draws.json: the campaign's span and workers, per JIT backend the keys drawn without a row, and per
        backend where its tasks' seconds went and the workers' start-up (campaign.clock)."""
        ended = time.time()
        self.clock.close(ended)
        record = {"started": started, "ended": ended, "workers": self.plumbing.slots,
                  "compile_slots": self.wcfg.compile_slots, "warmup_s": WARMUP_S,
                  "compile_slots_after": compile_slots_at(WARMUP_S, self.cfg.compile_share, self.plumbing.slots),
                  "compile_slots_history": self.budget.history, "build_pauses": self.budget.pauses,
                  "backends": self.scheduler.backlog.record(self.cfg.backends),
                  "time": self.clock.spent, "startup_s": self.clock.startup_s}
        try:
            (Path(self.cfg.out) / "compile_draws.json").write_text(json.dumps(record, indent=1))
        except OSError:
            pass  # the rows are what matters; a full disk was already reported by the store

    @staticmethod
    def _stamped(task: Task, slots: int, late: set[str], starved: set[str]) -> Task:
        """A task as it goes out: the compile slots of the moment, whether its first calls may build (not for a late
        backend), and for a starved backend's compile task its wait for a slot (campaign.compiles.FirstCalls)."""
        waits = task.kind == TaskKind.DEFERRED and task.needs_slot and task.backend in starved
        return replace(task, slots=slots, builds=task.backend not in late, slot_wait=SLOT_WAIT_S if waits else 0.0)

    def _late(self, remaining: float | None) -> set[str]:
        """The backends that may not build now: those whose builds would outlast the `remaining` seconds
        (campaign.compiles.BuildTimes, with the ages of the first calls the workers' heartbeats say are running; none
        without a time budget), and of those with a module built (a first build always goes ahead) the ones whose builds
        would outlast the warm-up. No compile task and no claim of a running task builds for them
        (campaign.claims.write_late). After the warm-up, while the budget's build allowance is spent (campaign.budget),
        the other backends with a module built pause: generation's first calls build nothing of theirs, and their
        compile tasks go only to keys that bring a value no built key of theirs has (campaign.claims.write_paused;
        holding all their builds, ten minutes of cold FlashInfer built 13 keys and left 10 of its 36 declared values
        unbuilt: campaigns/jit-untold-build-allowance-h200-2026-11-29.md). The scheduler learns them all, and the
        backends with a first call running (it holds back a backend waiting for its first build while one runs:
        campaign.focus)."""
        now, running, starts = time.time(), {}, []
        for beat in self.beats.values():
            if beat.get("first_compile"):
                b = beat.get("backend", "")
                running[b] = max(running.get(b, 0.0), now - beat.get("started", now))
                starts.append(beat.get("started", now))
        late = set() if remaining is None else self.build_times.late(remaining, running)
        # the budget's rules hold where compile tasks build (not with --compile-slices or --compile-share 1)
        evaluable = {b for b in self.cfg.backends if self.scheduler.backlog.built_keys[b]} \
            if self.scheduler.compile_slots else set()
        warm_up_left = None if self.budget.warm_end is None else self.budget.warm_end - now
        if warm_up_left is not None and warm_up_left > 0:
            # a build that would run past the warm-up takes the time after it: in the cold FlashInfer campaign two
            # builds started in its last 11 s ran on to 231-232 s, and with those started after it (at 122 and 169 s,
            # under the ceiling's 3 slots) builds took 23-27 % of minutes 2-3's worker time
            # (campaigns/jit-untold-cold-first-builds-h200-2026-11-29.md); one finished build is enough to tell
            late |= evaluable & self.build_times.late(warm_up_left, running, samples=1)
        # after the warm-up (builds_paused is False in it)
        paused = evaluable - late if evaluable and self.budget.builds_paused(now, starts) else set()
        self.scheduler.late, self.scheduler.paused = late, paused
        self.progress.paused = paused
        self.scheduler.first_calls_running = set(running)
        self._publish("late", late, write_late)  # else the tasks' own flags still hold new builds back
        self._publish("paused", paused, write_paused)
        return late

    def _publish(self, name: str, value, write) -> None:
        """`write(slots folder, value)` when `value` differs from what was last written under `name`; a failed write
        is tried again at the next turn."""
        if self.wcfg.slots_dir and (name not in self.published or self.published[name] != value):
            try:
                write(self.wcfg.slots_dir, value)
                self.published[name] = value
            except OSError:
                pass

    def _compile_budget(self, elapsed: float) -> int:
        """The compile slots `elapsed` seconds in (campaign.budget: the warm-up's share, then held down while
        evaluation is under its floor): the scheduler's compile tasks and every task's claims follow them."""
        slots = self.budget.slots(elapsed, time.time())
        if self.scheduler.compile_slots:  # 0: first calls are not gated (--compile-slices, --compile-share 1)
            self.scheduler.compile_slots = slots
            self._publish("budget", slots, write_budget)  # running tasks' claims follow it (else their own counts)
        return slots
