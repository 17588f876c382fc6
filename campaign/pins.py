"""Which pinned shape a new focused shard draws: its own (fresh pins, fuzz.shapes) or one that got rows (borrowed).

A backend whose JIT builds per shape (Backend.jit_shape_per) draws, in each focused shard, one shape pinned by a shard's
seed. Fresh pins mostly name a variant no one built, and such a shard's draws wait for its build; a borrowed shape's
variant is built. On an H200, FA4's 10-minute untold campaigns drew 83,000-84,000 cases that waited, 6 ms each, 51,260
and 27,738 of them dropped: 12 % of the workers' time (campaigns/jit-untold-side-by-side-h200-2026-11-27.md); with
borrowed pins 11,436 and 6,932, and 90 % of FA4's rows came from borrowed shapes
(campaigns/jit-untold-cold-warm-h200-2026-11-27.md).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

# Per focused shard of a key with fresh pins, up to this many that borrow the pins of a shard of that key which got rows
REUSED_PINS_PER_FRESH = 2


@dataclass(frozen=True)
class FocusedShard:
    """What the lender reads of a focused shard of one key: whose pins it draws (0: its own), where it ran last."""
    shard: int
    pins_of: int
    worker: int | None


class PinLender:
    """The shards whose pinned shapes got rows, per (backend, compile key), in the order they did."""

    def __init__(self) -> None:
        self.productive: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.barred: set[tuple[str, str, int]] = set()  # shapes that crashed their worker's CUDA context

    def got_rows(self, backend: str, key: str, shard: int, pins_of: int) -> None:
        """A row of focused shard `shard` of `key` came back: the shape it drew (its own, or `pins_of`'s) is built."""
        source = pins_of or shard
        if source not in self.productive[backend, key] and (backend, key, source) not in self.barred:
            self.productive[backend, key].append(source)

    def crashed(self, backend: str, key: str, shard: int, pins_of: int) -> None:
        """A case of that shape left a sticky CUDA error: it is not lent again. Lent, it crashed one borrowing case
        after another, each a worker restart: on an H200, 290 illegal-memory-access rows of fa4-paged in a 10-minute
        untold campaign, 220 of them in shards that borrowed two such shapes, and 8.5 % of the workers' time starting
        workers (campaigns/jit-untold-budget-h200-2026-11-27.md)."""
        source = pins_of or shard
        self.barred.add((backend, key, source))
        if source in self.productive[backend, key]:
            self.productive[backend, key].remove(source)

    def lend(self, backend: str, key: str, focused: list[FocusedShard], wid: int | None, fresh: bool = True) -> int:
        """The shard whose pins a new focused shard of `key` draws (0: fresh pins): while the key's `focused` shards
        with borrowed pins are fewer than REUSED_PINS_PER_FRESH per fresh one, a shape that got rows, one `wid` has
        drawn first (its variant is loaded there: FA4 loads one in 2-5 s per process on an H100), then the least
        borrowed. `fresh` False (the backend's new builds pause, or would outlast the campaign): a shape that got rows
        whatever the ratio, since a fresh shape's variant would not be built. With fresh pins through the pause, 2,456
        of fa4-paged's 2,481 such shards stalled at about one row each in a 10-minute untold campaign on an H200, and
        their tasks left 7 % of the workers' time between tasks
        (benchmarks/results/campaigns/jit-untold-fa4-cold-pins-h200-2026-12-03.md)."""
        sources = self.productive.get((backend, key))
        if not sources:
            return 0
        borrowed = [s.pins_of for s in focused if s.pins_of]
        if fresh and len(borrowed) >= REUSED_PINS_PER_FRESH * (len(focused) - len(borrowed)):
            return 0
        here = {s.pins_of or s.shard for s in focused if s.worker == wid}
        return min(sources, key=lambda j: (j not in here, borrowed.count(j), sources.index(j)))
