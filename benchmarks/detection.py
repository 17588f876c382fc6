"""Planted-bug detection: examples and seconds to the first kill of each mutant, and false alarms
of the correct backends in the same run. Usage: python benchmarks/detection.py [--seeds N] [--budget B]

Each mutant is fuzzed with the same strategies a campaign uses, in its order (the warm-up shard's small cases,
then every tier; in-process, generation phase only),
once per seed; the table gives the median over seeds. Correct backends get the same budget.
"""
from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from backends.naive import NaivePaged, mutants  # noqa: E402
from backends.registry import listings  # noqa: E402
from fuzz.compare import Verdict, evaluate  # noqa: E402
from fuzz.ledger import known_for  # noqa: E402
from campaign.allocator import keep_freed_memory  # noqa: E402
from campaign.drawing import global_prngs_left_alone  # noqa: E402
from campaign.scheduler import WARMUP_SHARD  # noqa: E402
from fuzz.strategies import Limits, cases, limits_from_json  # noqa: E402
from fuzz.warm_up import warm_up_cases  # noqa: E402
from reference.values import normal_table  # noqa: E402


class Killed(Exception):
    pass


def first_kill(backend, seed_value: int, budget: int, limits: Limits = Limits(), seeded_prngs: bool = False):
    """(examples, seconds, verdict, message) of the first failing verdict, or None. As a campaign draws them:
    the warm-up shard's WARMUP_SHARD small cases first, then the full strategy for the rest of the budget.
    Taken when the failing row is judged, as a campaign records it: hypothesis then runs the failing example once
    more and prints it before it stops, which a campaign's worker does not wait for (its rows are sent as judged);
    that replay is answered at once and counted neither as an example nor in the seconds. The global PRNGs are left
    alone as in a campaign's worker (campaign.drawing.global_prngs_left_alone) unless `seeded_prngs`."""
    n = {"i": 0}
    kill: list[tuple] = []
    start = time.perf_counter()

    def phase(strategy, examples: int) -> None:
        @seed(seed_value)
        @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def run(case):
            if kill:  # hypothesis' replay of the failing example
                raise Killed(*kill[0])
            known = known_for(backend.name, case)
            if known is not None:
                return
            n["i"] += 1
            row = evaluate(backend, case).row
            if Verdict(row["verdict"]).is_failure:
                kill.append((n["i"], time.perf_counter() - start, row["verdict"], row.get("message", "")[:100]))
                raise Killed(*kill[0])

        run()

    warm = min(WARMUP_SHARD, budget)
    try:
        with contextlib.nullcontext() if seeded_prngs else global_prngs_left_alone():
            phase(warm_up_cases(backend.caps, limits), warm)
            if budget > warm:
                phase(cases(backend.caps, limits), budget - warm)
    except Killed as k:
        return k.args
    return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=300)
    p.add_argument("--correct", action="append", help="correct backends to check for false alarms")
    p.add_argument("--limits", default="{}", help='as attnref fuzz --limits, e.g. \'{"tiers": ["small"]}\'')
    p.add_argument("--default-malloc", action="store_true",
                   help="glibc's malloc defaults, not a campaign worker's kept freed memory (campaign.allocator)")
    p.add_argument("--seeded-prngs", action="store_true",
                   help="hypothesis seeding the global PRNGs for each example, which a campaign's worker leaves alone")
    a = p.parse_args()
    malloc = "glibc's defaults" if a.default_malloc else keep_freed_memory()  # as a campaign's worker
    normal_table()  # made once a process, as a campaign's worker makes it at its first large tensor (0.1-0.3 s here)
    limits = limits_from_json(a.limits)
    warnings.simplefilter("ignore")
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    prngs = "global PRNGs seeded by hypothesis" if a.seeded_prngs else "global PRNGs left alone"
    print(f"# detection benchmark: {dev}, torch {torch.__version__}, seeds={a.seeds}, budget={a.budget}, limits={a.limits}; "
          f"{malloc}; {prngs}")
    print("| mutant | killed | median examples | median seconds | first verdict |")
    print("|---|---|---|---|---|")
    medians = []
    for m in mutants():
        kills = [first_kill(m, s, a.budget, limits, a.seeded_prngs) for s in range(a.seeds)]
        got = [k for k in kills if k]
        ex = statistics.median(k[0] for k in got) if got else float("nan")
        sec = statistics.median(k[1] for k in got) if got else float("nan")
        medians.append(sec)
        print(f"| {m.name} | {len(got)}/{a.seeds} | {ex} | {sec:.2f} | {got[0][2] if got else '-'} |", flush=True)
    print(f"\nmedian time to first kill over all mutants: {statistics.median(medians):.3f} s")
    names = a.correct or [NaivePaged().name] + [x.backend.name for x in listings() if x.available
                                                and x.backend.name not in ("flex-compiled", "torch-naive-paged")]
    print("\n| correct backend | seeds x budget | false alarms |\n|---|---|---|")
    by_name = {x.backend.name: x.backend for x in listings()}
    for name in names:
        alarms = [first_kill(by_name[name], s, a.budget, limits, a.seeded_prngs) for s in range(a.seeds)]
        bad = [x for x in alarms if x]
        print(f"| {name} | {a.seeds} x {a.budget} | {len(bad)}{' ' + str(bad[0]) if bad else ''} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
