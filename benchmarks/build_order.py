"""Which declared values a JIT backend's first builds cover, by the compile-task order (`Backlog._build_order`), on the
CPU: the campaign's build turns replayed over drawn cases, with and without the rule that puts a new key with values
no built key has first.

Usage: python benchmarks/build_order.py [--backend flashinfer-decode-tc ...] [--draws 3000] [--builds 27]
                                        [--every 100] [--seed 0]

Cases are drawn as an untold shard does (hypothesis, `fuzz.strategies.cases` over the backend's declaration; the
library need not be installed) and deferred into a `Backlog` by compile key in draw order; every `--every` draws one
compile task is handed out (`take(built=False)`) and its key marked built. Prints, per backend and order, the declared
values (dtype, head sizes, kv dtype, keyed feature) covered by the built keys after 5, 10, ... builds. A campaign's
draws also come from focused and tour shards, which this leaves out: it shows the order's effect on one stream.
"""
from __future__ import annotations

import argparse
from contextlib import nullcontext
from unittest import mock

from backends.registry import get
from campaign import compiles
from campaign.compiles import Backlog, key_text, key_values
from campaign.drawing import early_draws
from fuzz.strategies import Limits, cases, compile_key, declared_compile_keys
from reference.case import Case


def drawn_keys(backend, n: int, shard_seed: int) -> list[str]:
    """The compile keys of the first n cases a shard of seed `shard_seed` draws (`campaign.drawing.early_draws`)."""
    return [key_text(compile_key(Case.from_json(text), backend.compiled_per, backend.compiled_features))
            for text in early_draws(cases(backend.caps, Limits()), shard_seed, n, n)]


def covered_after(keys: list[str], builds: int, every: int, checkpoints: list[int]) -> dict[int, int]:
    """Values covered by the built keys after each checkpoint's number of builds."""
    backlog = Backlog()
    where = {"shard": 1, "index": 1, "shard_size": len(keys)}
    built: list[str] = []
    out: dict[int, int] = {}
    for i, key in enumerate(keys, 1):
        backlog.defer("b", key, str(i), where)
        if i % every == 0 and len(built) < builds:
            taken = backlog.take(built=False)
            if taken is not None:
                backlog.mark_built("b", taken[1])
                built.append(taken[1])
                if len(built) in checkpoints:
                    out[len(built)] = len(frozenset().union(*map(key_values, built)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append")
    ap.add_argument("--draws", type=int, default=3000)
    ap.add_argument("--builds", type=int, default=27)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    checkpoints = [n for n in (5, 10, 15, 20, 27, 40) if n <= a.builds]
    print(f"{a.draws} draws, a build every {a.every}, seed {a.seed}\n")
    print("| backend | declared values | order | " + " | ".join(f"after {n}" for n in checkpoints) + " |")
    print("|---|---|---|" + "---|" * len(checkpoints))
    for name in a.backend or ["flashinfer-decode", "flashinfer-decode-tc", "flashinfer-prefill-fa2"]:
        backend = get(name)
        declared = declared_compile_keys(backend.caps, Limits(), backend.compiled_per, backend.compiled_features)
        values = len(frozenset().union(*(key_values(key_text(k)) for k in declared)))
        keys = drawn_keys(backend, a.draws, a.seed)
        # "backlog only": no key has a value no built key has, which is the order before the rule
        for order, rule in (("new values first", nullcontext()),
                            ("backlog only", mock.patch.object(compiles, "key_values", lambda _: frozenset()))):
            with rule:
                got = covered_after(keys, a.builds, a.every, checkpoints)
            print(f"| {name} | {values} | {order} | " + " | ".join(str(got.get(n, "-")) for n in checkpoints) + " |")


if __name__ == "__main__":
    main()
