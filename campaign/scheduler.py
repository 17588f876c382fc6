"""The campaign scheduler: which worker runs which task next. State only, no I/O, no clock.

The process plumbing (campaign.pool, campaign.ray_pool) turns OS events into calls here:
`add_worker` when a worker is ready, `example_done` per generated row, `task_done` when a task
ends, `worker_lost` when a worker died or was killed, `add` for shrink tasks, `stop` at the
deadline or on an interrupt; `schedule` hands tasks to idle workers.

Policy: replays of saved cases first, then shrinks (at most `max_shrinking` at once, so most
workers keep generating), then generation. Generation goes to the backend with the fewest workers
on it, then the fewest examples so far, so backends run side by side and, with fewer workers than
backends, take turns; remaining ties go to the backend the worker ran last (a JIT library's
compiled kernels live in that process). A shard cut short (deadline, dead worker) continues where
it stopped; with an example budget, shards are added until every backend has exactly that many.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from .tasks import Task, TaskKind


# Shard 0 of every backend is a short warm-up that the worker draws from the small size tier: shallow bugs
# show in milliseconds before the tile-crossing and long-context tiers start costing time.
WARMUP_SHARD = 20


@dataclass
class _Shard:
    size: int
    done: int = 0
    running: bool = False
    closed: bool = False  # ran to its end (or hypothesis had nothing more to draw)


class Scheduler:
    def __init__(self, backends: list[str], *, examples: int | None, shard_size: int = 100,
                 done: dict[tuple[str, int], tuple[int, int]] | None = None,
                 replays: dict[str, tuple[str, ...]] | None = None, max_shrinking: int = 1,
                 shrink_share: float = 0.25) -> None:
        """`examples`: per backend (None: until stop()); `done`: (backend, shard) -> (examples done,
        shard size) from an earlier run being resumed; `replays`: saved case JSONs per backend."""
        self.backends = list(backends)
        self.examples = examples
        self.shard_size = max(1, shard_size)
        self.max_shrinking = max(1, max_shrinking)
        # Shrink evaluations may be at most this share of generated ones (beyond each backend's first
        # shrink, which is what a kill needs), so >= 80% of worker time goes to new examples.
        self.shrink_share = shrink_share
        self.generated_rows = 0
        self.shrink_rows = 0
        self.shrunk_backends: set[str] = set()
        self.shards: dict[str, dict[int, _Shard]] = {b: {} for b in self.backends}
        for (backend, shard), (n, size) in (done or {}).items():
            if backend in self.shards:
                self.shards[backend][shard] = _Shard(size=size, done=n, closed=n >= size)
        self.pending: deque[Task] = deque(Task(TaskKind.REPLAY, b, cases=tuple(c))
                                          for b, c in (replays or {}).items() if c and b in self.shards)
        self.running: dict[int, Task] = {}
        self.idle: list[int] = []
        self.last_backend: dict[int, str] = {}
        self.stopped = False
        self.broken: dict[str, str] = {}  # backend -> why no more tasks are given to it

    # --- events ---------------------------------------------------------------------------------
    def add_worker(self, wid: int) -> None:
        if wid not in self.idle and wid not in self.running:
            self.idle.append(wid)

    def example_done(self, backend: str, shard: int, index: int) -> None:
        """A generated example of `shard` got its row (a crash or timeout row counts too)."""
        s = self.shards.get(backend, {}).get(shard)
        if s is not None:
            s.done = max(s.done, index)
        self.generated_rows += 1

    def shrink_example_done(self) -> None:
        self.shrink_rows += 1

    def task_done(self, wid: int, exhausted: bool = False) -> None:
        """`wid` finished its task; `exhausted`: hypothesis had no more cases to draw for the shard."""
        task = self.running.pop(wid, None)
        if task is not None and task.kind == TaskKind.GENERATE:
            s = self.shards[task.backend][task.shard]
            s.running = False
            if exhausted and s.done < s.size:  # the budget moves on to a new shard
                s.size = s.done
            s.closed = s.done >= s.size
        self.idle.append(wid)

    def worker_lost(self, wid: int) -> Task | None:
        """`wid` died or was killed; its task (if any) is returned. A generation shard continues
        later in another worker; a shrink or replay is not retried (its rows say what happened)."""
        if wid in self.idle:
            self.idle.remove(wid)
        task = self.running.pop(wid, None)
        if task is not None and task.kind == TaskKind.GENERATE:
            s = self.shards[task.backend][task.shard]
            s.running = False
            s.closed = s.done >= s.size
        return task

    def add(self, task: Task) -> None:
        self.pending.append(task)

    def stop(self) -> None:
        """No new task from now on (deadline or interrupt); running ones are left to the plumbing."""
        self.stopped = True
        self.pending.clear()

    def give_up(self, backend: str, why: str) -> None:
        """Stop giving out `backend`'s tasks (its worker cannot even start a case)."""
        self.broken[backend] = why
        self.pending = deque(t for t in self.pending if t.backend != backend)

    # --- decisions ------------------------------------------------------------------------------
    def schedule(self) -> list[tuple[int, Task]]:
        """Assign tasks to idle workers; returns the new (worker, task) pairs."""
        out = []
        for wid in list(self.idle):
            task = self._next_for(wid)
            if task is None:
                continue
            self.idle.remove(wid)
            self.running[wid] = task
            if task.kind == TaskKind.GENERATE:
                self.shards[task.backend][task.shard].running = True
            self.last_backend[wid] = task.backend
            out.append((wid, task))
        return out

    @property
    def finished(self) -> bool:
        if self.running:
            return False
        if self.stopped:
            return True
        return not self.pending and all(b in self.broken or self._generate_for(b) is None for b in self.backends)

    def generated(self, backend: str) -> int:
        return sum(s.done for s in self.shards[backend].values())

    def _next_for(self, wid: int) -> Task | None:
        if self.stopped:
            return None
        shrinking = sum(1 for t in self.running.values() if t.kind == TaskKind.SHRINK)
        for task in list(self.pending):
            if task.kind == TaskKind.REPLAY or (shrinking < self.max_shrinking and self._may_shrink(task.backend)):
                self.pending.remove(task)
                if task.kind == TaskKind.SHRINK:
                    self.shrunk_backends.add(task.backend)
                return task
        active = defaultdict(int)
        for t in self.running.values():
            active[t.backend] += 1
        choices = [b for b in self.backends if b not in self.broken and self._generate_for(b) is not None]
        if not choices:
            return None
        warm = self.last_backend.get(wid)
        backend = min(choices, key=lambda b: (active[b], self.generated(b), b != warm, self.backends.index(b)))
        return self._generate_for(backend, create=True)

    def _may_shrink(self, backend: str) -> bool:
        if backend not in self.shrunk_backends:
            return True
        if self.shrink_rows <= self.shrink_share * self.generated_rows:
            return True
        return all(b in self.broken or self._generate_for(b) is None for b in self.backends)  # nothing else to do

    def _generate_for(self, backend: str, create: bool = False) -> Task | None:
        """The next generation task of `backend`: an unfinished shard first, else a new shard."""
        shards = self.shards[backend]
        for j in sorted(shards):
            s = shards[j]
            if not s.closed and not s.running and s.done < s.size:
                return Task(TaskKind.GENERATE, backend, shard=j, size=s.size, start=s.done)
        planned = sum(s.size for s in shards.values())
        if self.examples is not None and planned >= self.examples:
            return None
        size = self.shard_size if self.examples is None else min(self.shard_size, self.examples - planned)
        j = max(shards, default=-1) + 1
        if j == 0:
            size = min(size, WARMUP_SHARD)
        if create:
            shards[j] = _Shard(size=size)
        return Task(TaskKind.GENERATE, backend, shard=j, size=size, start=0)
