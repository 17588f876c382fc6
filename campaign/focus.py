"""Which compile key a JIT backend's new generation shard draws (campaign.scheduler.Scheduler's focus): a tour of an
undrawn key, a key the asking worker has loaded, or the whole space; and whether a backend has nothing worth drawing
while its first build runs."""
from __future__ import annotations

from .pins import FocusedShard


# A JIT backend's new shards drawn from one compile key the asking worker has loaded, per shard drawn from its whole
# space (which finds new keys and feeds the builds): on a cold cache few of hundreds of keys exist, and whole-space
# shards then spend their time drawing cases that wait (campaign.compiles).
FOCUSED_PER_WHOLE = 2
# A tour shard draws TOUR_SIZE cases of one declared compile key no case has been drawn for yet, in the place of a
# whole-space shard: every declared key gets drawn (and queued for its build) for a few draws each, where whole-space
# shards drew 36,789 prefill cases that waited or were dropped for 1,507 rows in ten minutes on an H100
# (campaigns/jit-untold-h100-2026-11-26.md). Once every key has been drawn, a whole-space shard is due only while fewer
# unbuilt keys wait than there are compile slots. Two draws, not four: with four, tours under TOUR_SHARE drew 1,843 of
# fa4-varlen's 2,304 declared keys in ten minutes on an H100 (the tree of 0d16bb9 in the same file).
TOUR_SIZE = 2
# Tours take up to this share of a JIT backend's planned cases while declared keys are still undrawn, beside focused
# shards too: a tour's draws cost ~15 ms (key_limits draws only the key, and a tour skips the shard prefix that
# cost ~1 s per key and worker), against tens of seconds of evaluation in a focused shard, and its cases wait for
# builds the compile slots bound. One tour per two focused shards drew 78 of vLLM's 1,536 unified-attention keys and
# 95 of FA4's 2,304 in ten minutes on an H100 (campaigns/jit-untold-h100-2026-11-26.md).
TOUR_SHARE = 0.5


class ShardFocus:
    """The focus half of campaign.scheduler.Scheduler: it reads the scheduler's shards, declared and drawn keys, loaded
    keys per worker, backlog, compile slots, whole-space stalls and running first calls."""

    def _pins_for(self, backend: str, key: str, wid: int | None) -> int:
        """The shard whose pins a new focused shard of `key` draws (0: fresh pins; campaign.pins), borrowed wherever it
        can be while the backend builds no new module (paused or late). A backend that pins nothing ignores it
        (campaign.worker)."""
        focused = [FocusedShard(j, s.pins_of, s.worker) for j, s in self.shards[backend].items()
                   if j > 0 and s.key == key and not s.tour]
        return self.pins.lend(backend, key, focused, wid, fresh=not self._no_new_builds(backend))

    def _no_new_builds(self, backend: str) -> bool:
        """`backend` builds no new module now: its new builds pause (campaign.budget's allowance) or would outlast the
        campaign (late): a fresh shape's variant would not be built."""
        return backend in self.paused or backend in self.late

    def _undrawn(self, backend: str) -> list[str]:
        """Declared keys of `backend` nothing was drawn of and no tour went out for (a key the focus filter cannot draw
        is toured once and stays undrawn)."""
        toured = {s.key for j, s in self.shards[backend].items() if j > 0 and s.tour}
        return [k for k in self.declared[backend] if k not in self.drawn[backend] and k not in toured]

    def _awaits_first_build(self, backend: str) -> bool:
        """No module of `backend` is built yet, no tour is due, a whole-space shard already stalled without a row since
        the last build, and a first call is running (of its module, or of another backend's that holds the slot its
        build waits for): a new shard could only draw cases that wait. In FlashInfer's untold campaigns on an H200 such
        shards were 892-3,343 per backend, every one stalled, before its first modules were built (35-115 s); they drew
        on the cores nvcc builds with (campaigns/jit-untold-cold-first-builds-h200-2026-11-29.md). Without a first call
        running the whole space goes out as before: a campaign of `--examples N` whose builds fail still draws."""
        stalled = self.whole_stalled.get(backend)
        return (self.compile_slots > 0 and self.slices[backend] == 1 and not self.backlog.built_keys[backend]
                and bool(self.first_calls_running) and stalled is not None
                and len(self.backlog.built[backend]) <= stalled and not self._undrawn(backend))

    def _fed(self, backend: str, loaded: list[str]) -> list[str]:
        """The keys a worker with `loaded` keys focuses on. Not a starved one (no focused shard of it got rows, and its
        fresh shape stalled while builds paused: no shape of it can be lent, and a fresh one's variant will not be
        built): with fresh shapes through the pause FA4 stalled 5,000 shards in ten minutes on an H200
        (benchmarks/results/campaigns/jit-untold-fa4-cold-pins-h200-2026-12-03.md). Where every loaded key is
        starved, the built keys with a shape to lend, loaded in other workers (a variant's load: 2-5 s a process on
        an H100, once, against a stalled shard's setup and draws each time it is drawn); else the starved keys
        still."""
        fed = self._unstarved(backend, loaded)
        if fed or not loaded:
            return fed
        lent = [k for k in self._unstarved(backend, sorted(self.backlog.built_keys[backend]))
                if self.pins.productive.get((backend, k))]
        return lent or loaded

    def _unstarved(self, backend: str, keys: list[str]) -> list[str]:
        """`keys` less those of `backend` whose fresh shape stalled while its builds paused (`_fed`)."""
        return [k for k in keys if k not in self.shape_starved[backend]]

    def _focus(self, backend: str, wid: int | None) -> tuple[str, bool]:
        """(the compile key a new shard of `backend` draws, whether it is a tour shard). A tour of a declared key
        nothing was drawn of while tours are under TOUR_SHARE of the planned cases or `wid` has no key loaded; else a
        key `wid` has loaded, the least focused one, while focused shards are fewer than FOCUSED_PER_WHOLE per other
        shard; else a tour; else the whole space ("") while fewer unbuilt modules wait than there are compile slots and
        a module was built since a whole-space shard last stalled without a row, a loaded key otherwise (a built one for
        a worker with none loaded). Whole-space shards of workers with nothing loaded drew 65-85 % of FlashInfer's
        50,000-62,000 deferred draws per backend in ten minutes on an H200, most of them dropped
        (campaigns/jit-untold-side-by-side-h200-2026-11-26.md)."""
        loaded = sorted(k for b, k in self.loaded.get(wid, ()) if b == backend) if wid is not None else []
        mine = self._fed(backend, loaded)
        shards = [s for j, s in self.shards[backend].items() if j > 0]
        undrawn = self._undrawn(backend)
        planned = sum(s.size for s in self.shards[backend].values())
        if undrawn and (not mine or sum(s.size for s in shards if s.tour) < TOUR_SHARE * planned):
            return undrawn[0], True
        focused = [s.key for s in shards if s.key and not s.tour]

        def least_focused(keys: list[str]) -> str:
            return min(keys, key=lambda k: (focused.count(k), k))

        if mine and len(focused) < FOCUSED_PER_WHOLE * (len(shards) - len(focused) + 1):
            return least_focused(mine), False
        if undrawn:
            return undrawn[0], True
        # a whole-space shard that stalled without a row says the space's new cases wait for modules: the next is due
        # once another module is built. Ungated, FlashInfer's three untold backends ran 858, 1,836 and 3,450 whole-space
        # shards in ten minutes on an H200, each stalled, 9 rows in all, beside 2.0 % of worker time between tasks
        # (campaigns/jit-untold-flashinfer-whole-space-h200-2026-11-28.md)
        stalled = self.whole_stalled.get(backend)
        if (self.backlog.unbuilt_modules(backend) >= max(1, self.compile_slots)
                or stalled is not None and len(self.backlog.built[backend]) <= stalled):
            if mine:
                return least_focused(mine), False
            built = sorted(self.backlog.built_keys[backend]) if self.compile_slots else []  # gated first calls only
            built = self._unstarved(backend, built) or built
            if built:  # a worker with none of them loaded: a built key, not whole-space draws that mostly wait
                return least_focused(built), False
        return "", False

    def focus_of(self, backend: str, shard: int) -> tuple[str, bool, int]:
        """(the compile key shard `shard` of `backend` focuses on, "" for the whole space; whether it is a tour; the
        shard whose pins it draws, 0: its own): its shrinks draw alike."""
        s = self.shards.get(backend, {}).get(shard)
        return (s.key, s.tour, s.pins_of) if s is not None else ("", False, 0)
