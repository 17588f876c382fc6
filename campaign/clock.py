"""Where a campaign's worker time goes: its tasks' seconds by backend, kind and part, the workers' start-up, and tasks
that never ended. compile_draws.json keeps it (`time`, `startup_s`); benchmarks/jit_campaign.py splits the campaign's
worker time (workers x span) by it, and what none of it covers is a worker idle between tasks."""
from __future__ import annotations

import time

from .worker import SPENT

# compile_draws.json `time` keys of generation tasks by the kind of shard they drew (campaign.tasks.Task.shard_kind):
# "shard:KIND:tasks", ":stalled" (ended by STALL_DRAWS waiting draws), ":rows" and ":s" (the tasks' seconds); flat, so
# the seconds by part stay a dict of numbers
SHARD_PREFIX = "shard:"
SHARD_FIELDS = ("tasks", "stalled", "rows", "s")


def by_shard(spent: dict) -> dict[str, dict[str, float]]:
    """One backend's `time` entry (WorkerClock.spent) read back per kind of shard: {kind: {field: count or seconds}}."""
    kinds = sorted({k[len(SHARD_PREFIX):].rsplit(":", 1)[0] for k in spent if k.startswith(SHARD_PREFIX)})
    return {kind: {f: spent.get(f"{SHARD_PREFIX}{kind}:{f}", 0) for f in SHARD_FIELDS} for kind in kinds}


class WorkerClock:
    """The driver's account of worker time, fed by its events (start, ready, a task handed out, done, exit)."""

    def __init__(self) -> None:
        self.spent: dict[str, dict[str, float]] = {}  # per backend: its tasks' seconds, by kind and by part (`done`)
        self.startup_s = 0.0  # the workers' seconds from their start to `ready` (imports, the CUDA context)
        self._launched: dict[int, float] = {}  # worker -> when it was started, until its `ready`
        self._running: dict[int, tuple[str, float]] = {}  # worker -> (its task's backend, when it was handed out)

    def started(self, wid: int) -> None:
        self._launched[wid] = time.time()

    def ready(self, wid: int) -> None:
        launched = self._launched.pop(wid, None)
        if launched is not None:
            self.startup_s += time.time() - launched

    def assigned(self, wid: int, backend: str) -> None:
        self._running[wid] = (backend, time.time())

    def done(self, wid: int, msg: dict) -> None:
        """A finished task's seconds, as its worker timed them: per kind of task, a generation task's parts, and per
        kind of shard its tasks, stalled tasks, rows and seconds."""
        self._running.pop(wid, None)
        spent = self.spent.setdefault(msg["backend"], {"tasks": 0})
        spent["tasks"] += 1
        spent[f"{msg['kind']}_tasks"] = spent.get(f"{msg['kind']}_tasks", 0) + 1
        for part, seconds in [(f"{msg['kind']}_task_s", msg["task_s"]), *((k, msg[k]) for k in SPENT)]:
            spent[part] = spent.get(part, 0.0) + seconds
        if "shard_kind" in msg:  # a generation task: what its shard drew, whether it stalled, its rows
            values = (1, int(bool(msg.get("stalled"))), msg.get("rows", 0), msg["task_s"])
            for field, value in zip(SHARD_FIELDS, values):
                name = f"{SHARD_PREFIX}{msg['shard_kind']}:{field}"
                spent[name] = spent.get(name, 0) + value

    def gone(self, wid: int, now: float | None = None) -> None:
        """The worker exited, or the campaign ended with it still in a task: a task without its `done` (a death, a kill,
        a JIT build longer than the campaign's rest) counts its seconds so far as `unfinished_task_s`; a worker that
        never got ready counts as start-up."""
        now = time.time() if now is None else now
        if wid in self._running:
            backend, since = self._running.pop(wid)
            spent = self.spent.setdefault(backend, {"tasks": 0})
            spent["unfinished_task_s"] = spent.get("unfinished_task_s", 0.0) + now - since
        launched = self._launched.pop(wid, None)
        if launched is not None:
            self.startup_s += now - launched

    def close(self, now: float) -> None:
        """The campaign ended: every worker still in a task or starting is counted up to `now`."""
        for wid in list(self._running) + list(self._launched):
            self.gone(wid, now)
