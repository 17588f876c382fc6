"""The compile budget after warm-up: compile slots held down while evaluation is under its floor.

During the warm-up (campaign.claims.WARMUP_S) a cold campaign has little built, so builds get the warm-up's share.
After it, `--compile-share` is a ceiling, not a fixed share: every ADJUST_S the driver looks at the last WINDOW_S of
rows, and while evaluation (the rows' materialize, oracle, kernel and compare seconds, less their first calls' build
seconds) is under EVALUATION_FLOOR of the workers' time it gives one compile slot back to evaluation, down to one
slot, so new keys are still built; with a slot's worth of room above the floor it takes one back, up to the
ceiling. Why: with 3 of 16 workers building after minute 2 the untold FA4 and FlashInfer campaigns spent 18 and 27 %
of their worker time in builds and 47 and 41 % evaluating (benchmarks/results/campaigns/
jit-untold-cold-warm-h200-2026-11-27.md), while issue #35 asks for 70 % evaluation. Under this budget (one slot
from 200 s) the warm ones evaluated 67 and 63 % (campaigns/jit-untold-budget-h200-2026-11-27.md).

The slots bound how many builds run at once, not how much of the time they take: with one slot left from 200 s the cold
FlashInfer campaign still built 11 % of its worker time after minute 2, and evaluated 64 %
(campaigns/jit-untold-cold-first-builds-h200-2026-11-29.md). So builds after the warm-up also get an allowance of
worker time (`allowed_share`): the share that leaves evaluation at its floor, given how the rest of the time split so
far. While they have spent more (running first calls included) new builds pause, except a backend's first and keys
that bring a declared value no built key of the backend has (campaign.compile_driving); loads and evaluation go on.
Cold FlashInfer on an H200: 69 % evaluation after minute 2, every declared value built
(campaigns/jit-untold-build-allowance-h200-2026-11-29.md).

Rows are the worker's own clock: a row that ends at `t` and took `busy` seconds covers [t - busy, t], clipped to
the window, as benchmarks/jit_campaign.py's `worker_time` counts it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from .claims import WARMUP_S, compile_slots, compile_slots_at

EVALUATION_FLOOR = 0.70
WINDOW_S = 60.0
ADJUST_S = 20.0
BUSY = ("materialize_s", "oracle_s", "kernel_s", "compare_s")  # a row's time; compile_s is part of kernel_s
COUNTED = ("generate", "shrink", "replay")
# The allowance never falls under this many workers' worth of builds: where evaluation cannot reach its floor even
# without builds (harness time alone over 1 - floor), pausing would only stop new keys.
LEAST_BUILD_WORKERS = 0.5


def row_split(row: dict) -> tuple[float, float, float] | None:
    """(end, evaluation seconds, build seconds) of an example's row (generation, shrink or replay); None for other
    rows and rows without time."""
    if row.get("phase") not in COUNTED or row.get("t") is None:
        return None
    busy = sum(row.get(p) or 0.0 for p in BUSY)
    if busy <= 0:
        return None
    built = min(row.get("compile_s") or 0.0, busy)
    return row["t"], busy - built, built


def inside(end: float, busy: float, lo: float, hi: float) -> float:
    """The share of a row's span [end - busy, end] that lies in [lo, hi]."""
    return max(0.0, min(end, hi) - max(end - busy, lo)) / busy


class CompileBudget:
    """Compile slots over a campaign of `workers` whose compile share is `share` (the ceiling after warm-up)."""

    def __init__(self, share: float, workers: int, floor: float = EVALUATION_FLOOR, window_s: float = WINDOW_S,
                 adjust_s: float = ADJUST_S) -> None:
        self.share, self.workers, self.floor = share, workers, floor
        self.window_s, self.adjust_s = window_s, adjust_s
        self.ceiling = compile_slots(share, workers)
        self.current = self.ceiling
        self._rows: deque[tuple[float, float, float]] = deque()  # (end, evaluation s, build s), oldest first
        self._adjusted_at: float | None = None
        self.history: list[tuple[float, int, float]] = []  # (elapsed, slots, evaluation share) at each change
        self.warm_end: float | None = None  # wall clock of the warm-up's end (set by the first `slots`)
        self.evaluated = self.built = 0.0  # worker-seconds of rows since the warm-up: evaluation, first calls
        self.paused = False
        self.pauses: list[tuple[float, bool, float]] = []  # (elapsed, paused, allowed share) at each change

    def record(self, row: dict) -> None:
        """A row from a worker: its evaluation and build seconds, if it is an example's."""
        split = row_split(row)
        if split is not None:
            self._rows.append(split)
            end, evaluated, built = split
            if self.warm_end is not None and end > self.warm_end:
                share = inside(end, evaluated + built, self.warm_end, end)
                self.evaluated += evaluated * share
                self.built += built * share

    def evaluation_share(self, now: float) -> float:
        """Evaluation's share of workers x the last WINDOW_S before `now`."""
        lo = now - self.window_s
        while self._rows and self._rows[0][0] < lo:
            self._rows.popleft()
        seconds = 0.0
        for end, evaluated, built in self._rows:
            seconds += evaluated * inside(end, evaluated + built, lo, now)
        return seconds / (self.workers * self.window_s)

    def slots(self, elapsed: float, now: float) -> int:
        """The compile slots `elapsed` seconds into the campaign (wall clock `now`)."""
        if self.warm_end is None:
            self.warm_end = now - elapsed + WARMUP_S
        if elapsed < WARMUP_S:
            return compile_slots_at(elapsed, self.share, self.workers)
        if self._adjusted_at is None or now - self._adjusted_at >= self.adjust_s:
            before = self.current
            # judged from the warm-up's end on, its last minute in the window: builds started late in it ran on to
            # 230-274 s in the cold FlashInfer campaign, while the ceiling held until a post-warm-up window was full
            share = self.evaluation_share(now)
            if share < self.floor and self.current > 1:
                self.current -= 1
            elif share >= self.floor + 1.0 / self.workers and self.current < self.ceiling:
                self.current += 1
            self._adjusted_at = now
            if self.current != before or not self.history:
                self.history.append((round(elapsed, 1), self.current, round(share, 3)))
        return self.current

    def _since_warm_up(self, now: float, running: Iterable[float]) -> tuple[float, float]:
        """(workers x the seconds since the warm-up ended, first calls' seconds in them: finished rows' and those of
        the first calls still running, by their start times)."""
        assert self.warm_end is not None
        built = self.built + sum(now - max(s, self.warm_end) for s in running if s < now)
        return self.workers * (now - self.warm_end), built

    def allowed_share(self, now: float, running: Iterable[float] = ()) -> float:
        """The share of the worker time since the warm-up that builds may take: with E seconds of evaluation and B of
        first calls in T = workers x the time since, the rest (drawing, messages, idle) grows with evaluation, so
        builds taking b of the time leave evaluation at (1 - b) E / (T - B), at the floor while
        b <= 1 - floor (T - B) / E. At least LEAST_BUILD_WORKERS workers' worth."""
        if self.warm_end is None or now <= self.warm_end:
            return 1.0
        return self._allowed(*self._since_warm_up(now, running))

    def _allowed(self, total: float, built: float) -> float:
        least = LEAST_BUILD_WORKERS / self.workers
        if self.evaluated <= 0:
            return least
        return min(1.0, max(least, 1.0 - self.floor * max(total - built, 0.0) / self.evaluated))

    def builds_paused(self, now: float, running: Iterable[float] = ()) -> bool:
        """Whether new builds wait: after the warm-up, first calls (finished, and `running`: the start times of those
        still running) have taken more than `allowed_share` of the worker time since it ended."""
        if self.warm_end is None or now <= self.warm_end:
            return False
        total, built = self._since_warm_up(now, running)
        allowed = self._allowed(total, built)
        paused = built > allowed * total
        if paused != self.paused:
            self.pauses.append((round(now - self.warm_end + WARMUP_S, 1), paused, round(allowed, 3)))
        self.paused = paused
        return paused
