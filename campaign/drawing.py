"""How a campaign shard draws its cases: hypothesis' settings, which draws count as examples, and the fixed prefix
of cases every seed draws early (skipped by all shards but the warm-up), kept on disk for the campaign's other
processes and the next campaign (`PrefixStore`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

from reference.case import Case

# Below about 100 max_examples hypothesis orders its first draws by max_examples (measured on a sliced strategy: 3 of
# the first 12 draws alike at 12 as at 1,000, 7 at 61, all 12 from 100 up). A campaign's shards (100 examples, a
# budget over 130) draw above it; the fixed-prefix calibration draws there too, so it sees the shards' early cases.
STEADY_MAX_EXAMPLES = 100
PREFIX_DRAWS = 12  # early draws per calibration seed
PREFIX_SEEDS = 16  # calibration seeds: a case 2 of them draw early is skipped
# A borrowed pinned shape's prefix (one key, one shape: few simplest cases) needs fewer: without one, 190 of 1,400 early
# draws of fa4-varlen shards borrowing a shape repeated the first shard's; with 4 seeds none did, in 0.08 s against
# 0.39 s with 16 on the 2-core CPU (benchmarks/pinned_prefix.py, results/throughput/pinned-prefix-cpu-2026-11-27.md).
# On an H200 a borrowing shard's 16-seed prefix raised FA4's strategy setup from 1.5-2.1 % to 3.5-4.0 % of worker time
# (campaigns/jit-untold-cold-warm-h200-2026-11-27.md).
PINNED_PREFIX_SEEDS = 4


class Fresh:
    """Which of a shard's draws count as examples: not the seed-independent early cases (`skip`), not a
    repeat of a case drawn earlier in the same shard. Deterministic per shard (a shard redraws the same
    sequence from its seed), so generation, resume and shrinking number the examples alike."""

    def __init__(self, skip: frozenset[str]) -> None:
        self.skip, self.seen = skip, set()

    def __call__(self, case: Case) -> bool:
        key = case.to_json()
        if key in self.skip or key in self.seen:
            return False
        self.seen.add(key)
        return True

    def budget(self, size: int) -> int:
        """hypothesis' max_examples for a shard of `size` examples: room for the draws that do not count."""
        return size + len(self.skip) + size // 4 + 8


class _Enough(Exception):
    pass


def hypothesis_settings(max_examples: int, phases: list[Phase]) -> settings:
    return settings(max_examples=max_examples, database=None, deadline=None, derandomize=False, phases=phases,
                    report_multiple_bugs=False, suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)


def early_draws(strategy, shard_seed: int, n: int, max_examples: int) -> list[str]:
    """The first `n` cases (as JSON) hypothesis draws from `strategy` under `shard_seed` at `max_examples`, as a
    shard's generation draws them."""
    drawn: list[str] = []

    def draw(case: Case) -> None:
        if len(drawn) == n:
            raise _Enough
        drawn.append(case.to_json())

    try:
        hypothesis_settings(max_examples, [Phase.generate])(seed(shard_seed)(given(strategy)(draw)))()
    except _Enough:
        pass
    return drawn


class PrefixStore:
    """Fixed prefixes on disk, one JSON file each, named by a fingerprint of what the strategy draws: the first
    calibration seed's early cases, with the hypothesis version and the number of seeds. A changed declaration, focus
    or strategy code draws other early cases and misses; one that drew the same first cases and others later would
    only skip a few cases more or fewer, alike in every process. Every process of a campaign (and the next campaign
    on the machine) reads what one computed. Without it each worker computed the prefix of every compile key it
    focused on: strategy setup was 4.7 % of FlashInfer's untold worker time on an H200, 3.3 % with it on an H100
    (campaigns/jit-untold-each-alone-h200-2026-11-27.md, jit-untold-flashinfer-cold-warm-h100-2026-11-27.md); on the
    2-core CPU a hit costs a sixteenth of the draws."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)

    @staticmethod
    def fingerprint(first: list[str], seeds: int) -> str:
        text = json.dumps([hypothesis.__version__, seeds, PREFIX_DRAWS, STEADY_MAX_EXAMPLES, first])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def get(self, fingerprint: str) -> frozenset[str] | None:
        try:
            return frozenset(json.loads((self.folder / f"{fingerprint}.json").read_text()))
        except (OSError, ValueError, TypeError):  # absent, or half written by a process that died: compute it
            return None

    def put(self, fingerprint: str, prefix: frozenset[str]) -> None:
        """Write atomically (a temporary file renamed), so a reader sees the whole prefix or none; a folder that
        cannot be written leaves the prefix uncached."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(sorted(prefix), f)
            os.replace(tmp, self.folder / f"{fingerprint}.json")
        except OSError:
            pass


def fixed_prefix(strategy, seeds: int = PREFIX_SEEDS, store: PrefixStore | None = None) -> frozenset[str]:
    """Cases hypothesis draws early whatever the seed (its simplest examples, which every shard would
    start with again): those 2 of `seeds` calibration seeds draw among their first PREFIX_DRAWS, at a shard's
    max_examples. Shard 0 evaluates them; later shards skip them. Measured: 11-16 % of generated rows repeated
    an earlier case without this; 2.0-3.6 % on the GPU and 2.2-2.4 % in benchmarks/repeats.py with 4 seeds
    drawing at max_examples 12; 0.2-0.4 % now (about 1 s per strategy and process; `store`: once per machine)."""
    first = early_draws(strategy, 1, PREFIX_DRAWS, STEADY_MAX_EXAMPLES)
    fingerprint = PrefixStore.fingerprint(first, seeds)
    known = store.get(fingerprint) if store is not None else None
    if known is not None:
        return known
    counts: Counter[str] = Counter(set(first))
    for s in range(2, seeds + 1):
        counts.update(set(early_draws(strategy, s, PREFIX_DRAWS, STEADY_MAX_EXAMPLES)))
    prefix = frozenset(case for case, n in counts.items() if n >= 2)
    if store is not None:
        store.put(fingerprint, prefix)
    return prefix


def pin_hypothesis_constants() -> None:
    """Make what a seed draws independent of the process's history.

    Hypothesis mixes constants found in the source of every *local* module imported so far into its
    draws, so the same seed drew different cases in a local worker and in a Ray actor (which import
    different modules). Campaign workers draw with hypothesis' own constants only. (Internal API:
    where it is missing, nothing changes.)"""
    try:
        from hypothesis.internal.conjecture import providers

        empty = providers.Constants()
        providers._get_local_constants = lambda: empty
    except (ImportError, AttributeError):
        pass


def _unseeded(seed: int = 0) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


@contextlib.contextmanager
def global_prngs_left_alone() -> Iterator[None]:
    """Inside it, hypothesis runs each example without seeding and restoring the global PRNGs (`random`'s and
    numpy's: `hypothesis.internal.entropy.deterministic_PRNG`, which copies both generators' states out and back in).

    Hypothesis seeds them so that a test which calls `random` repeats itself; what a seed draws comes from the engine's
    own generator and is the same either way, and nothing a campaign evaluates reads a global PRNG (materialization
    is seeded from the case, `fuzz.shapes` and the sinks' spread use their own `random.Random`). Without the seeding a
    drawn case takes 0.67-0.91x the CPU time on the 2-core CPU (benchmarks/draw_prngs.py;
    benchmarks/results/throughput/drawing-prngs-cpu-h200-2026-12-03.md); drawing is 16-17 % of an untold FlashInfer
    campaign's worker time. Restored on leaving, so the process's other tests seed as before. (Internal API: where it
    is missing, nothing changes.)"""
    try:
        from hypothesis import core
        seeded = core.deterministic_PRNG
    except (ImportError, AttributeError):
        yield
        return
    core.deterministic_PRNG = _unseeded
    try:
        yield
    finally:
        core.deterministic_PRNG = seeded
