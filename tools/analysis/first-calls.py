"""Where a JIT campaign's first calls went: per backend, the first calls of a module (Backend.jit_variant, else the
compile key) new to the host, of a module another worker had already run, and of a variant new to the host within a
compile key some worker had run, with their seconds; and the timeout rows of each kind (a first call that the
example timeout killed mid-build leaves a `timeout` row and no compile time).

A campaign gates the first two by its claims and slots (campaign.claims); the third is a build that passes the slots
when the backend declares no finer `jit_variant` than its compile key. The variants come from the backend's own
declaration in this checkout, so reading old rows with a new declaration shows what it would have gated.

Usage: python tools/analysis/first-calls.py ROWS.jsonl[.xz] [--long 10]
"""
from __future__ import annotations

import argparse
import collections
import json
import lzma
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backends.registry import get  # noqa: E402
from fuzz.strategies import compile_key  # noqa: E402
from reference.case import Case  # noqa: E402


def read_rows(path: str) -> list[dict]:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return sorted((json.loads(line) for line in f), key=lambda r: r["t"])


def module_of(backend, case: Case) -> tuple:
    key = compile_key(case, backend.compiled_per, backend.compiled_features)
    variant = backend.jit_variant(case)
    return (tuple(map(str, key)), None if variant is None else tuple(map(str, variant)))


def classify(rows: list[dict], long_s: float) -> dict:
    """{backend: Counter of (kind, 'first calls' | 'long' | 'seconds' | 'timeouts')}."""
    backends, seen_modules, seen_keys = {}, set(), set()
    out: dict = collections.defaultdict(collections.Counter)
    for r in rows:
        if r.get("phase") == "minimal" or not r.get("case"):
            continue
        name = r["backend"]
        backend = backends.setdefault(name, get(name))
        if not backend.compiled_per:
            continue
        key, variant = module_of(backend, Case.from_json(r["case"]))
        module = (name, key, variant)
        kind = ("module run elsewhere" if module in seen_modules else
                "new variant of a run key" if (name, key) in seen_keys else "new module")
        if r["verdict"] == "timeout":
            out[name][(kind, "timeouts")] += 1
            continue
        if r["verdict"] not in ("unsupported", "crash"):
            seen_modules.add(module)
            seen_keys.add((name, key))
        if r.get("first_of_key"):
            seconds = r.get("compile_s") or 0.0
            out[name][(kind, "first calls")] += 1
            out[name][(kind, "long")] += seconds > long_s
            out[name][(kind, "seconds")] += seconds
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows")
    ap.add_argument("--long", type=float, default=10.0, help="a first call longer than this many seconds is long")
    a = ap.parse_args()
    table = classify(read_rows(a.rows), a.long)
    print(f"| backend | kind | first calls | longer than {a.long:g} s | seconds | timeout rows |")
    print("|---|---|---|---|---|---|")
    for name, c in sorted(table.items()):
        for kind in ("new module", "module run elsewhere", "new variant of a run key"):
            print(f"| {name} | {kind} | {c[(kind, 'first calls')]} | {c[(kind, 'long')]} | "
                  f"{c[(kind, 'seconds')]:.0f} | {c[(kind, 'timeouts')]} |")


if __name__ == "__main__":
    main()
