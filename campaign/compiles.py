"""JIT compiles off the critical path: a backlog of deferred cases per module.

A JIT backend (FA4, FlashInfer, vLLM's Triton kernels, compiled flex) builds one module per compile key
(`fuzz.compile_keys.compile_key`: dtype, head size, kv dtype, keyed features). Built once, a key's module is cheap for
every worker (FA4's and FlashInfer's modules and Triton's / inductor's kernels are kept on disk:
campaign/caches.py); building it takes seconds to minutes. Measured on an H100 (benchmarks/results/campaigns/
compile-budget-flashinfer-h100-2026-11-25.md): FlashInfer untold from a cold cache, 211 s, gave 1,471 rows with
deferring and 33 with every case compiled where drawn, the same keys built in both.

- Worker side (campaign.worker with campaign.claims): a drawn case whose module is not in the worker's process is
  built (under the key's lock) or loaded there when the worker gets a compile slot; otherwise the case is *deferred*:
  sent to the driver with its example number, and the worker draws on, evaluating the cases whose modules it has.
- Driver side (`Backlog`, kept by campaign.scheduler): deferred cases wait per *module*: the backend's finer variant
  where it declares one (Backend.jit_variant), else the key. Once a row shows a module built (or an earlier campaign's
  marker says so), its cases become a cheap task for a worker that has the module loaded. An unbuilt module becomes a
  *compile task* (evaluate its cases, the first one building), a new key's and the largest backlog's in turn, the
  backend with the fewest builds first (`Backlog._build_order`): beside generation while a
  compile slot is free (a task that finds none gives its cases back, and they stay held until some first call ends),
  and for every remaining module once generation has nothing left (an example budget reached), so every drawn case
  gets its row. Waiting per compile key instead sent a built key's cases to workers that lacked their variant, which
  gave them back for want of a slot and got them again at once: up to 142,000 tasks without a row per backend in ten
  minutes on an H100, 27-35 % of the workers' time between tasks (campaigns/jit-untold-h100-2026-11-26.md).
"""
from __future__ import annotations

import bisect
import functools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# A build that would outlast a time-boxed campaign is not started: once less time is left than BUILD_QUANTILE of a
# backend's first calls so far took (BUILD_SAMPLES of them at least), neither its compile tasks nor its generation
# tasks' first calls build (loads of built modules go on); one that ends just before the deadline gives the campaign
# few rows anyway. On an H200, FlashInfer's untold 10-minute campaign spent 1,034 and 576 worker seconds (11 and 6 % of
# the workers' time) in builds its end killed (campaigns/jit-untold-side-by-side-h200-2026-11-27.md); with the 90th
# percentile of first calls (104-106 s) still 10.2 and 5.7 %, its builds taking up to 185 s
# (campaigns/jit-untold-cold-warm-h200-2026-11-27.md): the longest first call so far bounds it now, and so does a first
# call still running (one of prefill-fa2's builds outlasted every earlier one, and its killed builds took 11.0 % of
# the worker time: campaigns/jit-untold-budget-h200-2026-11-27.md).
BUILD_QUANTILE = 1.0
BUILD_SAMPLES = 5

# A backend with unbuilt modules waiting whose last first call ended STARVED_S ago (or never), while another backend's
# did since, is starved of compile slots: its compile tasks then wait for one (Task.slot_wait). Generation's claims
# come at every draw, a compile task's once: on an H200, fa4-varlen's first calls won every freed slot and fa4-paged
# had no row after 84 s of a cold campaign (campaigns/jit-untold-late-builds-h200-2026-11-27.md). With every compile
# task waiting, the CPU stand-in's test-fake-jit made 898 and 1,260 rows in 90 s against 1,536 and 1,657 without the
# wait; with a starved backend's alone, 757-1,592 against 997-1,566 over five rounds (benchmarks/jit_standin.py, in
# the same file).
STARVED_S = 30.0

# Deferred cases kept per module: beyond it a drawn case of that module is dropped (its example number gets no row).
BACKLOG_PER_MODULE = 64
CASES_PER_TASK = 32
LOAD_BATCH = 8  # waiting cases for which a worker without the key's module loads it (see Backlog.take)

# A value no built key has stops counting as new (Backlog.tried) once FAILED_BUILDS keys with it had a first call
# that built nothing (crashed, refused, hung): a value that never builds, such as one of FA4's head-size pairs whose
# compiles end in CUDADialectError, would otherwise be offered as breadth again with every key it is in, and while
# builds pause (campaign.budget) breadth is all that builds. On one H100, FA4's six such pairs were each tried on two
# keys, then no more: 13 failed keys, 186 worker s after minute 2 (campaigns/jit-untold-fa4-failed-builds-h100-
# 2026-12-07.md); two, as a pair's plain key and one with a feature both failed there.
FAILED_BUILDS = 2


def key_text(key: tuple) -> str:
    """A compile key as the JSON text rows and task messages carry."""
    return json.dumps(list(key))


@functools.lru_cache(maxsize=8192)
def key_values(text: str) -> frozenset:
    """The values a compile key (as key_text writes it) is made of: its dtype, head sizes, kv dtype, features."""
    try:
        key = json.loads(text)
    except ValueError:
        return frozenset({text})
    items = key if isinstance(key, list) else [key]
    return frozenset(json.dumps(v) if isinstance(v, (list, dict)) else v for v in items)


class BuildTimes:
    """The seconds of each backend's first calls (builds and loads of modules) as rows bring them, kept sorted: the
    driver asks `late` at every turn of its loop."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)

    def record(self, backend: str, seconds: float) -> None:
        bisect.insort(self.seconds[backend], seconds)

    def expected(self, backend: str, samples: int = BUILD_SAMPLES) -> float | None:
        """BUILD_QUANTILE of the backend's first calls; None before `samples` of them."""
        xs = self.seconds.get(backend, ())
        return xs[int(BUILD_QUANTILE * (len(xs) - 1))] if xs and len(xs) >= samples else None

    def late(self, remaining: float, running: Mapping[str, float] | None = None,
             samples: int = BUILD_SAMPLES) -> set[str]:
        """The backends whose builds would likely outlast `remaining` seconds: their longest first call so far (once
        `samples` of them ended), or the age of the oldest one still running (`running`: backend -> seconds), is
        longer."""
        running = running or {}
        return {b for b in set(self.seconds) | set(running)
                if max(self.expected(b, samples) or 0.0, running.get(b, 0.0)) > remaining}


class FirstCalls:
    """When each backend's last first call of a module ended, as rows bring them: which backends are starved."""

    def __init__(self, started: float) -> None:
        self.started = started  # the campaign's start: a backend with no first call yet counts from it
        self.last: dict[str, float] = {}

    def ended(self, backend: str, t: float) -> None:
        self.last[backend] = max(self.last.get(backend, t), t)

    def starved(self, now: float, waiting: Iterable[str]) -> set[str]:
        """The backends of `waiting` (those of compile tasks going out: unbuilt modules that cases wait for) with no
        first call for STARVED_S while another backend had one."""
        recent = {b for b, t in self.last.items() if now - t < STARVED_S}
        return {b for b in waiting if now - self.last.get(b, self.started) >= STARVED_S and recent - {b}}


@dataclass
class _Module:
    key: str  # the compile key the module is of (the coverage unit; a claim covers it)
    cases: list[tuple[str, dict]] = field(default_factory=list)  # (case JSON, where: shard / index / shard_size)
    building: bool = False  # a compile task holds it
    # a task gave its cases back (no free slot): not handed out beside generation before a first call ends
    held: bool = False
    dropped: int = 0


class Backlog:
    """Deferred cases per (backend, module), and which modules and keys are built."""

    def __init__(self, per_module: int = BACKLOG_PER_MODULE) -> None:
        self.per_module = per_module
        self.built: dict[str, set[str]] = defaultdict(set)  # modules
        self.built_keys: dict[str, set[str]] = defaultdict(set)  # compile keys some module of which is built
        self.failed_keys: dict[str, set[str]] = defaultdict(set)  # keys a first call of which built nothing
        self.deferred: Counter[tuple[str, str]] = Counter()  # every deferral per compile key, kept or dropped
        self.modules: dict[tuple[str, str], _Module] = {}
        self.builds_handed = 0  # compile tasks handed out (Backlog._build_order alternates on it)

    def defer(self, backend: str, key: str, case: str, where: dict, returned: bool = False, unit: str = "") -> None:
        """A case waits for module `unit` (default: its compile key `key`); `returned`: a compile task gave it back (no
        slot was free), not a new draw."""
        entry = self.modules.setdefault((backend, unit or key), _Module(key))
        if returned:
            entry.held = True
        else:
            self.deferred[backend, key] += 1
        if len(entry.cases) >= self.per_module:
            entry.dropped += 1
        else:
            entry.cases.append((case, where))

    def mark_built(self, backend: str, key: str, unit: str = "") -> None:
        self.built[backend].add(unit or key)
        self.built_keys[backend].add(key)
        entry = self.modules.get((backend, unit or key))
        if entry is not None:  # its cases now go to workers that have it loaded
            entry.held = False

    def mark_failed(self, backend: str, key: str) -> None:
        """A first call of compile key `key` built nothing (its verdict: campaign.claims.NOT_BUILT)."""
        self.failed_keys[backend].add(key)

    def unhold(self) -> None:
        """A first call ended somewhere: a compile slot may be free, so given-back cases may go out again."""
        for entry in self.modules.values():
            entry.held = False

    def release(self, backend: str, unit: str) -> None:
        """A compile task of the module ended (built or not): its remaining cases may be handed out again."""
        entry = self.modules.get((backend, unit))
        if entry is not None:
            entry.building = False

    def take(self, *, built: bool, skip: set[str] = frozenset(), here: set[tuple[str, str]] | None = None,
             elsewhere: set[tuple[str, str]] = frozenset(), loads: bool = True, fresh: bool = False,
             breadth_only: set[str] = frozenset()) -> tuple[str, str, str, list[tuple[str, dict]]] | None:
        """(backend, compile key, module, cases) of a built module's waiting cases (built=True), or of the unbuilt
        module with the most cases, marked building (built=False); None when there is none. Backends in `skip` are left
        out, those in `breadth_only` offer only modules of keys with a value (dtype, head sizes, kv dtype, feature) not
        yet tried (`Backlog.tried`: their builds pause, campaign.budget); `fresh`: not modules whose cases were given
        back since the last first call ended (held).

        With `here` (the modules the asking worker has loaded) a built module goes to it when it has it loaded, when
        no live worker has (not in `elsewhere`), or when LOAD_BATCH cases wait: a first call costs seconds in each
        process (FA4: 2-5 s on an H100), so cases follow the workers that hold their module. `loads=False` (every
        compile slot was busy lately): only to a worker that has the module loaded."""
        tried = {b: self.tried(b) for b in breadth_only}
        ready = [(b, u) for (b, u), e in self.modules.items()
                 if e.cases and not e.building and b not in skip and (u in self.built[b]) == built
                 and not (fresh and e.held) and (b not in tried or key_values(e.key) - tried[b])]
        if built and here is not None:
            ready = [bu for bu in ready if bu in here or loads and (
                bu not in elsewhere or len(self.modules[bu].cases) >= LOAD_BATCH)]
        if not ready:
            return None
        if built:
            backend, unit = max(ready, key=lambda bu: (here is not None and bu in here, len(self.modules[bu].cases)))
        else:
            backend, unit = max(ready, key=self._build_order())
            self.builds_handed += 1
        entry = self.modules[backend, unit]
        cases, entry.cases = entry.cases[:CASES_PER_TASK], entry.cases[CASES_PER_TASK:]
        entry.building = not built
        return backend, entry.key, unit, cases

    def _build_order(self):
        """The sort key of the next build (the largest first). Every other build is of a compile key no module of which
        is built yet (a tour's key: the campaign's breadth), the others of the largest backlog (rows soon); either way
        of the backend with the fewest modules built first; among full backlogs, the one that dropped most cases (a
        built key's new variant its focused shards keep drawing: vLLM's FLASHINFER layer's prefill-only modules gave 20
        of an e4m3 campaign's 17,959 rows beside its decode ones, with 241,516 draws dropped,
        campaigns/jit-untold-side-by-side-h200-2026-11-26.md). Largest backlog alone, on an H200, built 267-280 FA4
        modules within 10-12 of its 2,304 keys (focused shards keep feeding their keys' new variants), and 3 keys of
        vllm-triton-unified against 93 of vllm-backend-triton beside it, whose backlogs, capped alike, came first
        (campaigns/jit-untold-side-by-side-h200-2026-11-27.md). Among new keys, the one with the most values (dtype,
        head sizes, kv dtype, feature) that no built key of its backend has comes first: by backlog alone, an H200's
        FlashInfer campaign built 27 of its 864 keys in 10 minutes and eight declared values, such as decode-tc's fp8
        caches and soft-cap, got no row (campaigns/jit-untold-each-alone-h200-2026-11-27.md)."""
        breadth = self.builds_handed % 2 == 0
        # values each backend's keys have tried: only a breadth turn ranks new keys by them
        tried = {b: self.tried(b) for b in set(self.built_keys) | set(self.failed_keys)} if breadth else {}

        def order(bu: tuple[str, str]) -> tuple:
            backend, _ = bu
            entry = self.modules[bu]
            new_key = entry.key not in self.built_keys[backend]
            new_values = len(key_values(entry.key) - tried.get(backend, frozenset())) if new_key else 0
            return (new_key if breadth else 0, new_values if breadth else 0, -len(self.built[backend]),
                    len(entry.cases), entry.dropped, new_key)
        return order

    def covered(self, backend: str) -> frozenset:
        """The values (campaign.compiles.key_values) of `backend`'s built keys."""
        return frozenset().union(*map(key_values, self.built_keys[backend]))

    def failed(self, backend: str) -> set[str]:
        """`backend`'s keys a first call of which built nothing and no later one built."""
        return self.failed_keys[backend] - self.built_keys[backend]

    def tried(self, backend: str) -> frozenset:
        """The values of `backend`'s built keys, and those that FAILED_BUILDS keys not built had: no longer new."""
        failed = Counter(v for k in self.failed(backend) for v in key_values(k))
        return self.covered(backend) | {v for v, n in failed.items() if n >= FAILED_BUILDS}

    def waiting(self, backend: str | None = None) -> int:
        return sum(len(e.cases) for (b, _), e in self.modules.items() if backend in (None, b))

    def unbuilt_modules(self, backend: str) -> int:
        return sum(1 for (b, u), e in self.modules.items() if b == backend and e.cases and u not in self.built[b])

    def dropped(self, backend: str) -> int:
        return sum(e.dropped for (b, _), e in self.modules.items() if b == backend)

    def record(self, backends: list[str]) -> dict:
        """Per backend: how often each key's cases were deferred, how many wait and were dropped at the end; the
        rows do not show deferred cases that never got one (benchmarks/jit_campaign.py reads it)."""
        return {b: {"deferred": {k: n for (b2, k), n in sorted(self.deferred.items()) if b2 == b},
                    "waiting": self.waiting(b), "dropped": self.dropped(b), "built": sorted(self.built_keys[b]),
                    "failed": sorted(self.failed(b)), "modules_built": len(self.built[b])}
                for b in backends}
