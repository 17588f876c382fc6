"""JIT compiles off the critical path: a backlog of deferred cases per compile key.

A JIT backend (FA4, FlashInfer, vLLM's Triton kernels, compiled flex) builds one module per compile key
(`fuzz.strategies.compile_key`: dtype, head size, kv dtype, keyed features). Built once, a key's module is cheap for
every worker (FA4's and FlashInfer's modules and Triton's / inductor's kernels are kept on disk:
campaign/caches.py); building it takes seconds to minutes. Measured on an H100 (benchmarks/results/campaigns/
compile-budget-flashinfer-h100-2026-11-25.md): FlashInfer untold from a cold cache, 211 s, gave 1,471 rows with
deferring and 33 with every case compiled where drawn, the same keys built in both.

- Worker side (campaign.worker with campaign.claims): a drawn case whose module is not in the worker's process is
  built (under the key's lock) or loaded there when the worker gets a compile slot; otherwise the case is *deferred*:
  sent to the driver with its example number, and the worker draws on, evaluating the cases whose modules it has.
- Driver side (`Backlog`, kept by campaign.scheduler): deferred cases wait per key. Once a row shows a key built (or
  an earlier campaign's marker says so), its cases become a cheap task for a worker that has the module loaded. An
  unbuilt key becomes a *compile task* (evaluate its cases, the first one building), largest backlog first: beside
  generation while a compile slot is free (a task that finds none gives its cases back), and for every remaining key
  once generation has nothing left (an example budget reached), so every drawn case gets its row.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

# Deferred cases kept per key: beyond it a drawn case of that key is dropped (its example number gets no row).
BACKLOG_PER_KEY = 64
CASES_PER_TASK = 32
LOAD_BATCH = 8  # waiting cases for which a worker without the key's module loads it (see Backlog.take)


def key_text(key: tuple) -> str:
    """A compile key as the JSON text rows and task messages carry."""
    return json.dumps(list(key))


@dataclass
class _Key:
    cases: list[tuple[str, dict]] = field(default_factory=list)  # (case JSON, where: shard / index / shard_size)
    building: bool = False  # a compile task holds it
    dropped: int = 0


class Backlog:
    """Deferred cases per (backend, compile key), and which keys are built."""

    def __init__(self, per_key: int = BACKLOG_PER_KEY) -> None:
        self.per_key = per_key
        self.built: dict[str, set[str]] = defaultdict(set)
        self.deferred: Counter[tuple[str, str]] = Counter()  # every deferral, kept or dropped: keys drawn without a row
        self.keys: dict[tuple[str, str], _Key] = {}

    def defer(self, backend: str, key: str, case: str, where: dict, returned: bool = False) -> None:
        """A case waits for its key; `returned`: a compile task gave it back (no slot was free), not a new draw."""
        entry = self.keys.setdefault((backend, key), _Key())
        if not returned:
            self.deferred[backend, key] += 1
        if len(entry.cases) >= self.per_key:
            entry.dropped += 1
        else:
            entry.cases.append((case, where))

    def mark_built(self, backend: str, key: str) -> None:
        self.built[backend].add(key)

    def release(self, backend: str, key: str) -> None:
        """A compile task of the key ended (built or not): its remaining cases may be handed out again."""
        entry = self.keys.get((backend, key))
        if entry is not None:
            entry.building = False

    def take(self, *, built: bool, skip: set[str] = frozenset(), here: set[tuple[str, str]] | None = None,
             elsewhere: set[tuple[str, str]] = frozenset(),
             loads: bool = True) -> tuple[str, str, list[tuple[str, dict]]] | None:
        """(backend, key, cases) of a built key's waiting cases (built=True), or of the unbuilt key with the most
        cases, marked building (built=False); None when there is none. Backends in `skip` are left out.

        With `here` (the keys the asking worker has loaded) a built key goes to it when it has the key loaded, when
        no live worker has (not in `elsewhere`), or when LOAD_BATCH cases wait: a first call costs seconds in each
        process (FA4: 2-5 s on an H100), so cases follow the workers that hold their module. `loads=False` (every
        compile slot was busy lately): only to a worker that has the key loaded."""
        ready = [(b, k) for (b, k), e in self.keys.items()
                 if e.cases and not e.building and b not in skip and (k in self.built[b]) == built]
        if built and here is not None:
            ready = [bk for bk in ready if bk in here or loads and (
                bk not in elsewhere or len(self.keys[bk].cases) >= LOAD_BATCH)]
        if not ready:
            return None
        backend, key = max(ready, key=lambda bk: (here is not None and bk in here, len(self.keys[bk].cases)))
        entry = self.keys[backend, key]
        cases, entry.cases = entry.cases[:CASES_PER_TASK], entry.cases[CASES_PER_TASK:]
        entry.building = not built
        return backend, key, cases

    def waiting(self, backend: str | None = None) -> int:
        return sum(len(e.cases) for (b, _), e in self.keys.items() if backend in (None, b))

    def unbuilt_keys(self, backend: str) -> int:
        return sum(1 for (b, k), e in self.keys.items() if b == backend and e.cases and k not in self.built[b])

    def dropped(self, backend: str) -> int:
        return sum(e.dropped for (b, _), e in self.keys.items() if b == backend)

    def record(self, backends: list[str]) -> dict:
        """Per backend: how often each key's cases were deferred, how many wait and were dropped at the end; the
        rows do not show deferred cases that never got one (benchmarks/jit_campaign.py reads it)."""
        return {b: {"deferred": {k: n for (b2, k), n in sorted(self.deferred.items()) if b2 == b},
                    "waiting": self.waiting(b), "dropped": self.dropped(b), "built": sorted(self.built[b])}
                for b in backends}
