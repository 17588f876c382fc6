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

A JIT backend's cases that waited for their module (campaign.compiles) go out before generation, to a worker that
has the module loaded; while a compile slot is free (campaign.claims), the unbuilt module with the most waiting cases
goes out as a compile task beside generation. While declared keys are undrawn, tours (TOUR_SIZE cases of one such key)
take up to TOUR_SHARE of a JIT backend's planned cases; two of every three other new shards (FOCUSED_PER_WHOLE) draw only
cases of one compile key the worker has loaded, so workers evaluate while few of the backend's keys are built; the
third is a tour while keys are undrawn, then, once every key has been drawn, the whole space while the build queue
runs short (campaign.focus). A backend with nothing built whose whole space stalled gets no new shard while a first
call runs: its workers take other work, a build, or wait.

A backend whose focused shards pin a shape (Backend.jit_shape_per) gets two of every three of a key's focused shards
with the pins of a shard of that key that got rows (campaign.pins), one the asking worker ran first, and every one
while its new builds pause; a shard whose draws all wait ends early (the worker's `stalled`), as an exhausted one. A
key whose fresh-pinned shard stalled without a row while builds paused is focused again only when the worker has no
other loaded key and no built key with a shape to lend, until a shard of it gets rows. Backends in `late` get no
compile task: their builds would outlast the campaign (campaign.compiles.BuildTimes).

With --compile-slices, a JIT backend's space is cut into compile slices (Backend.compiled_per and
compiled_features: one dtype, head size, kv dtype and set of compile-keyed features each): shard j >= 1
draws from slice (j - 1) % n, and a worker gets shards of the slice it drew last
until that slice is SLICE_SLACK shards ahead of the least-drawn one, so each variant compiles in a few
workers, not in all. A slice whose shard ran out of cases is not drawn again.
"""
from __future__ import annotations

import itertools
from collections import defaultdict, deque
from dataclasses import dataclass

from .compiles import Backlog
from .focus import TOUR_SIZE, ShardFocus
from .pins import PinLender
from .tasks import Task, TaskKind


# Shard 0 of every backend is a short warm-up that the worker draws from the small size tier: shallow bugs
# show in milliseconds before the tile-crossing and long-context tiers start costing time.
WARMUP_SHARD = 20
SLICE_SLACK = 2


@dataclass
class _Shard:
    size: int
    done: int = 0
    running: bool = False
    closed: bool = False  # ran to its end (or hypothesis had nothing more to draw)
    key: str = ""  # a focused shard's compile key (every case it evaluates is of that key)
    tour: bool = False  # a tour shard: a few draws of a key nothing was drawn of (TOUR_SIZE)
    pins_of: int = 0  # a focused shard that draws the pinned shape of that earlier shard (0: its own; fuzz.shapes)
    worker: int | None = None  # the worker that ran it last


class Scheduler(ShardFocus):
    def __init__(self, backends: list[str], *, examples: int | None, shard_size: int = 100,
                 done: dict[tuple[str, int], tuple[int, int, str, bool, int]] | None = None,
                 replays: dict[str, tuple[str, ...]] | None = None, max_shrinking: int = 1,
                 shrink_share: float = 0.25, slices: dict[str, int] | None = None,
                 declared: dict[str, list[str]] | None = None, compile_slots: int = 0) -> None:
        """`examples`: per backend (None: until stop()); `done`: (backend, shard) -> (examples done,
        shard size, focus key, tour, the shard whose pins it draws) from an earlier run being resumed; `replays`: saved
        case JSONs per backend; `slices`: the number of compile slices per JIT backend (others: 1); `declared`: a JIT
        backend's compile keys within the campaign's focus (tour shards draw each); `compile_slots`: the campaign's
        compile slots (campaign.claims); all but one run compile tasks beside generation (0: compile tasks only once
        generation is over)."""
        self.backends = list(backends)
        self.slices = {b: max(1, (slices or {}).get(b, 1)) for b in self.backends}
        self.spent: dict[str, set[int]] = {b: set() for b in self.backends}  # slices hypothesis ran out of
        self.last_slice: dict[int, tuple[str, int | None]] = {}
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
        for (backend, shard), (n, size, focus, tour, pins_of) in (done or {}).items():
            if backend in self.shards:  # a focused shard continues on its key: the same draws, the same examples
                self.shards[backend][shard] = _Shard(size=size, done=n, closed=n >= size, key=focus, tour=tour,
                                                     pins_of=pins_of)
        self.pending: deque[Task] = deque(Task(TaskKind.REPLAY, b, cases=tuple(c))
                                          for b, c in (replays or {}).items() if c and b in self.shards)
        self.running: dict[int, Task] = {}
        self.idle: list[int] = []
        self.last_backend: dict[int, str] = {}
        self.stopped = False
        self.broken: dict[str, str] = {}  # backend -> why no more tasks are given to it
        self.backlog = Backlog()
        self.loaded: dict[int, set[tuple[str, str]]] = defaultdict(set)  # worker -> (backend, compile key) it ran
        self.modules: dict[int, set[tuple[str, str]]] = defaultdict(set)  # worker -> (backend, module) it ran
        self.declared = {b: list((declared or {}).get(b, ())) for b in self.backends}
        self.drawn: dict[str, set[str]] = defaultdict(set)  # compile keys a case was drawn of (a row or a deferral)
        self.compile_slots = compile_slots
        self.compiling: set[int] = set()  # workers running a compile task beside generation
        self.slots_busy = False  # a compile task found no free slot: none goes out before a first call ends
        self.pins = PinLender()
        self.late: set[str] = set()  # backends whose builds would outlast the campaign (campaign.compiles.BuildTimes)
        # backends whose new builds pause (campaign.budget's allowance): compile tasks only of keys with new values
        self.paused: set[str] = set()
        # backend -> its modules built when a whole-space shard of it last stalled without a row (_focus)
        self.whole_stalled: dict[str, int] = {}
        # backend -> keys whose focused shard of fresh pins stalled without a row while its builds paused (campaign.focus)
        self.shape_starved: dict[str, set[str]] = defaultdict(set)
        self.first_calls_running: set[str] = set()  # backends whose first call of a module runs in a worker (engine)

    # --- events ---------------------------------------------------------------------------------
    def add_worker(self, wid: int) -> None:
        if wid not in self.idle and wid not in self.running:
            self.idle.append(wid)

    def example_done(self, backend: str, shard: int, index: int, sticky: bool = False) -> None:
        """A generated example of `shard` got its row (a crash or timeout row counts too); `sticky`: a crash that left
        the worker's CUDA context unusable (`crashed`)."""
        s = self.shards.get(backend, {}).get(shard)
        if s is not None:
            s.done = max(s.done, index)
            if s.key and not s.tour:
                self.pins.got_rows(backend, s.key, shard, s.pins_of)
                self.shape_starved[backend].discard(s.key)
            if sticky:
                self.crashed(backend, shard)
        self.generated_rows += 1

    def crashed(self, backend: str, shard: int) -> None:
        """A case of focused shard `shard` left a sticky CUDA error: the shard ends at its examples done, and its shape
        is not lent (its other cases draw the same key and shape: campaign.pins.PinLender.crashed). Also for the rows
        of a resumed campaign."""
        s = self.shards.get(backend, {}).get(shard)
        if s is not None and s.key and not s.tour:
            self.pins.crashed(backend, s.key, shard, s.pins_of)
            s.size = min(s.size, s.done)
            s.closed = s.closed or (not s.running and s.done >= s.size)

    def shrink_example_done(self) -> None:
        self.shrink_rows += 1

    def defer(self, backend: str, key: str, case: str, where: dict, returned: bool = False, unit: str = "") -> None:
        """A generated case of compile key `key` waits for its module `unit` (default: the key; campaign.compiles): its
        example number is used, so the shard goes on past it (its row comes from the deferred task). `returned`: a
        compile task without a slot gave it back."""
        self.backlog.defer(backend, key, case, where, returned=returned, unit=unit)
        self.drawn[backend].add(key)
        self.slots_busy = self.slots_busy or returned
        s = self.shards.get(backend, {}).get(where.get("shard"))
        if s is not None:
            s.done = max(s.done, where.get("index") or 0)

    def first_call_done(self) -> None:
        """A first call of a module in some worker returned: its compile slot is free again."""
        self.slots_busy = False
        self.backlog.unhold()

    def key_drawn(self, backend: str, key: str) -> None:
        """A row of compile key `key` came back: a case of it was drawn."""
        self.drawn[backend].add(key)

    def key_failed(self, backend: str, key: str) -> None:
        """A first call of compile key `key` built nothing: its values may stop counting as new (Backlog.tried)."""
        self.backlog.mark_failed(backend, key)

    def key_built(self, backend: str, key: str, wid: int | None = None, unit: str = "") -> None:
        """A row of `backend` ran a case of compile key `key` through module `unit` (default: the key) in worker `wid`:
        the module exists now, and is loaded in that worker."""
        self.backlog.mark_built(backend, key, unit)
        if wid is not None:
            self.loaded[wid].add((backend, key))
            self.modules[wid].add((backend, unit or key))

    def task_done(self, wid: int, exhausted: bool = False, stalled: bool = False, rows: int | None = None) -> None:
        """`wid` finished its task; `exhausted`: hypothesis had no more cases to draw for the shard; `stalled`: its last
        draws all waited for modules (campaign.worker.STALL_DRAWS), so the shard ends there, as an exhausted one;
        `rows`: a generation task's rows (its draws that waited count as the shard's examples, not as rows)."""
        task = self.running.pop(wid, None)
        self.compiling.discard(wid)
        if task is not None and task.kind == TaskKind.DEFERRED:
            self.backlog.release(task.backend, task.unit or task.key)
        if task is not None and task.kind == TaskKind.GENERATE:
            s = self.shards[task.backend][task.shard]
            s.running = False
            if (exhausted or stalled) and s.done < s.size:  # the budget moves on to a new shard
                s.size = s.done
            if stalled and rows == 0 and not task.key and task.shard > 0:
                self.whole_stalled[task.backend] = len(self.backlog.built[task.backend])
            if (stalled and rows == 0 and task.key and not task.tour and not task.pins_of
                    and self._no_new_builds(task.backend)):
                self.shape_starved[task.backend].add(task.key)
            if exhausted and self.slice_of(task.backend, task.shard) is not None:
                self.spent[task.backend].add(self.slice_of(task.backend, task.shard))
            s.closed = s.done >= s.size
        self.idle.append(wid)

    def worker_lost(self, wid: int) -> Task | None:
        """`wid` died or was killed; its task (if any) is returned. A generation shard continues
        later in another worker; a shrink or replay is not retried (its rows say what happened)."""
        if wid in self.idle:
            self.idle.remove(wid)
        self.loaded.pop(wid, None)
        self.modules.pop(wid, None)
        self.compiling.discard(wid)
        task = self.running.pop(wid, None)
        if task is not None and task.kind == TaskKind.GENERATE:
            s = self.shards[task.backend][task.shard]
            s.running = False
            s.closed = s.done >= s.size
        if task is not None and task.kind == TaskKind.DEFERRED:
            self.backlog.release(task.backend, task.unit or task.key)
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
                self.shards[task.backend][task.shard].worker = wid
                self.last_slice[wid] = (task.backend, self.slice_of(task.backend, task.shard))
            self.last_backend[wid] = task.backend
            out.append((wid, task))
        return out

    @property
    def finished(self) -> bool:
        if self.running:
            return False
        if self.stopped:
            return True
        return (not self.pending and self._generation_over()
                and not any(self.backlog.waiting(b) for b in self.backends if b not in self.broken))

    def _generation_over(self) -> bool:
        return all(b in self.broken or self._generate_for(b) is None for b in self.backends)

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
        choices = [b for b in self.backends if b not in self.broken and self._generate_for(b) is not None]
        elsewhere = set().union(*(v for w, v in self.modules.items() if w != wid))
        # cases whose module exists now: cheap where it is loaded, and owed a row
        # beside generation a first call of their module in this worker takes a compile slot (campaign.worker)
        beside = self.compile_slots > 0 and bool(choices)
        deferred = self._deferred_task(built=True, needs_slot=beside, here=self.modules[wid], elsewhere=elsewhere,
                                       loads=not (beside and self.slots_busy), fresh=beside)
        if deferred is not None:
            return deferred
        # a build beside generation, one slot kept for first calls of built modules where there are several
        if len(self.compiling) < max(1, self.compile_slots - 1) and self.compile_slots and not self.slots_busy:
            deferred = self._deferred_task(built=False, needs_slot=True, fresh=True)
            if deferred is not None:
                self.compiling.add(wid)
                return deferred
        active = defaultdict(int)
        for t in self.running.values():
            active[t.backend] += 1
        if not choices:  # while generation has work, workers build keys where they draw them (campaign.claims)
            deferred = self._deferred_task(built=True) or self._deferred_task(built=False)
            if deferred is not None:
                return deferred
        # a backend whose new shard could only draw cases waiting for its first build leaves the worker to another
        # backend, or to a build, or idle: its cores go to the builds
        held = [b for b in choices if self._awaits_first_build(b)]
        choices = [b for b in choices if b not in held]
        if not choices:
            # every backend with work waits for its first build: no built module needs the slot kept for first calls
            if held and len(self.compiling) < self.compile_slots and not self.slots_busy:
                deferred = self._deferred_task(built=False, needs_slot=True, fresh=True)
                if deferred is not None:
                    self.compiling.add(wid)
                    return deferred
            return None
        warm = self.last_backend.get(wid)
        backend = min(choices, key=lambda b: (active[b], self.generated(b), b != warm, self.backends.index(b)))
        return self._generate_for(backend, create=True, wid=wid)

    def _deferred_task(self, built: bool, needs_slot: bool = False, **where) -> Task | None:
        taken = self.backlog.take(built=built, skip=set(self.broken) | (set() if built else self.late),
                                  breadth_only=set() if built else self.paused, **where)
        if taken is None:
            return None
        backend, key, unit, cases = taken
        return Task(TaskKind.DEFERRED, backend, key=key, unit=unit, cases=tuple(c for c, _ in cases),
                    wheres=tuple(w for _, w in cases), needs_slot=needs_slot)

    def _may_shrink(self, backend: str) -> bool:
        if backend not in self.shrunk_backends:
            return True
        if self.shrink_rows <= self.shrink_share * self.generated_rows:
            return True
        return all(b in self.broken or self._generate_for(b) is None for b in self.backends)  # nothing else to do

    def slice_of(self, backend: str, shard: int) -> int | None:
        """The compile slice shard `shard` draws from (None: the warm-up shard, or no slices)."""
        n = self.slices[backend]
        return None if n == 1 or shard == 0 else (shard - 1) % n

    def _last_slice_on(self, backend: str, wid: int | None) -> int | None:
        """The slice of `backend` that worker `wid` drew last (None: another backend, or none yet)."""
        last = self.last_slice.get(wid) if wid is not None else None
        return last[1] if last is not None and last[0] == backend else None

    def _slice_for(self, backend: str, wid: int | None) -> int | None:
        """The slice of `backend`'s next new shard for worker `wid`: its last one while that is at most
        SLICE_SLACK shards ahead of the least-drawn live slice, else the least-drawn (None: all spent)."""
        live = [p for p in range(self.slices[backend]) if p not in self.spent[backend]]
        if not live:
            return None
        count = dict.fromkeys(live, 0)
        for j in self.shards[backend]:
            if self.slice_of(backend, j) in count:
                count[self.slice_of(backend, j)] += 1
        mine = self._last_slice_on(backend, wid)
        if mine in count and count[mine] <= min(count.values()) + SLICE_SLACK:
            return mine
        return min(live, key=lambda p: (count[p], p))

    def _generate_for(self, backend: str, create: bool = False, wid: int | None = None) -> Task | None:
        """The next generation task of `backend`: an unfinished shard first (of `wid`'s last slice if
        any), else a new shard. Without `create` only whether there is one counts: a new shard's focus is left
        undecided."""
        shards = self.shards[backend]
        mine = self._last_slice_on(backend, wid)
        for j in sorted(shards, key=lambda j: (self.slice_of(backend, j) != mine, j)):
            s = shards[j]
            if not s.closed and not s.running and s.done < s.size:
                return Task(TaskKind.GENERATE, backend, shard=j, size=s.size, start=s.done, built=self._built(backend),
                            key=s.key, tour=s.tour, pins_of=s.pins_of)
        planned = sum(s.size for s in shards.values())
        if self.examples is not None and planned >= self.examples:
            return None
        size = self.shard_size if self.examples is None else min(self.shard_size, self.examples - planned)
        j = max(shards, default=-1) + 1
        if j == 0:
            size = min(size, WARMUP_SHARD)
        elif self.slices[backend] > 1:
            p = self._slice_for(backend, wid)
            if p is None:
                return None
            j = next(j for j in itertools.count(1) if j not in shards and (j - 1) % self.slices[backend] == p)
        key, tour = self._focus(backend, wid) if create and j > 0 and self.slices[backend] == 1 else ("", False)
        if tour:
            size = min(size, TOUR_SIZE)
        pins_of = self._pins_for(backend, key, wid) if create and key and not tour else 0
        if create:
            shards[j] = _Shard(size=size, key=key, tour=tour, pins_of=pins_of)
        return Task(TaskKind.GENERATE, backend, shard=j, size=size, start=0, built=self._built(backend), key=key,
                    tour=tour, pins_of=pins_of)

    def _built(self, backend: str) -> tuple[str, ...]:
        return tuple(sorted(self.backlog.built[backend]))
