"""An untold campaign of a CPU stand-in JIT backend, this tree against another, in one run (issue #35's measure, on
the CPU): rows/s, where worker time went (benchmarks/jit_campaign.py's split) and the deferred / dropped draws.

Usage: python benchmarks/jit_standin.py [--backend test-fake-jit-pinned-variants ...] [--seconds 60] [--workers 2]
                                        [--rounds 2] [--after 20] [--base DIR]

--backend, repeated: the stand-ins one campaign runs side by side (two that both need compile slots show whether one
starves the other: `--backend test-fake-jit-variants --backend test-fake-jit`).

--base DIR: a checkout of another tree (e.g. `git worktree add /tmp/base HEAD~1`); its runs alternate with this tree's,
each in a fresh build folder, the stand-ins taken from this tree (tests/campaign/fake_jit.py: a variant's build sleeps
VARIANT_COMPILE_S, a load of one another process built VARIANT_LOAD_S). Prints a Markdown table per run and the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jit_campaign import failed_builds, load, per_backend, worker_time  # noqa: E402

STANDINS = ROOT / "tests" / "campaign" / "fake_jit.py"


@contextmanager
def standin_campaign(tree: Path, backends: list[str], seconds: int, workers: int, seed: int) -> Iterator[Path]:
    """An untold `attnref fuzz` of the stand-in `backends` by the checkout `tree`, in a fresh folder it yields: the
    results under out/, the stand-ins' build logs ($FAKE_JIT_DIR) beside them."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        spec = tmp / "standin"  # this tree's stand-ins, importable beside either tree's packages
        spec.mkdir()
        shutil.copy(STANDINS, spec / "fake_jit_standin.py")
        env = dict(os.environ, FAKE_JIT_DIR=str(tmp), PYTHONPATH=f"{tree}{os.pathsep}{spec}")
        subprocess.run([sys.executable, "-m", "cli", "--backend-spec", "fake_jit_standin:backends", "fuzz",
                        *[arg for b in backends for arg in ("--backend", b)], "--time", str(seconds),
                        "--workers", str(workers), "--seed", str(seed),
                        "--out", str(tmp / "out"), "--no-replay", "--cache-dir", str(tmp / "cache"), "--quiet"],
                       cwd=tree, env=env, check=False, capture_output=True)
        yield tmp


def run(tree: Path, backends: list[str], seconds: int, workers: int, seed: int, after: float) -> list[dict]:
    """One campaign's figures, a dict per backend (the worker-time split is the campaign's)."""
    with standin_campaign(tree, backends, seconds, workers, seed) as tmp:
        rows, declared, record = load(tmp / "out")
    w = worker_time(rows, record, after)
    failed = failed_builds(rows, record, after)
    tables = {t["backend"]: t for t in per_backend(rows, declared, record)}
    return [{"backend": b, "rows": tables[b]["rows"], "rows_s": tables[b]["rate"], "built": tables[b]["built"],
             "drawn": tables[b]["drawn"], "declared": tables[b]["declared"], "dropped": tables[b]["dropped"],
             "waiting": tables[b]["waiting"], "deferred": sum(record["backends"][b]["deferred"].values()),
             "failed_s": failed.get(b, (0, 0.0))[1], **w}
            for b in backends if b in tables]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append", help="a stand-in (repeat for several; default "
                    "test-fake-jit-pinned-variants)")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--after", type=float, default=20.0, help="seconds left out of the worker-time split")
    ap.add_argument("--base", type=Path, help="another tree, run alternately with this one")
    a = ap.parse_args()
    a.backend = a.backend or ["test-fake-jit-pinned-variants"]
    trees = [("this", ROOT)] + ([("base", a.base.resolve())] if a.base else [])
    results = [(name, r) for seed in range(a.rounds) for name, tree in trees
               for r in run(tree, a.backend, a.seconds, a.workers, seed, a.after)]
    print(f"{', '.join(a.backend)}, {a.seconds} s, {a.workers} workers; worker time after {a.after:.0f} s\n")
    print("| tree | backend | rows | rows/s | keys built / drawn / declared | draws deferred | dropped | compile % | "
          "evaluation % | rest % | builds that failed, worker s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results:
        print(f"| {name} | {r['backend']} | {r['rows']} | {r['rows_s']:.1f} | {r['built']} / {r['drawn']} / "
              f"{r['declared']} | {r['deferred']} | {r['dropped']} | {r['compile']:.0f} | {r['evaluation']:.0f} | "
              f"{r['rest']:.0f} | {r['failed_s']:.0f} |")
    print()
    for b in a.backend:
        for field in ("rows_s", "evaluation", "deferred", "failed_s"):
            med = {n: statistics.median(r[field] for m, r in results if m == n and r["backend"] == b)
                   for n, _ in trees}
            print(f"{b} median {field}: " + ", ".join(f"{n} {v:.1f}" for n, v in med.items()))
    print(json.dumps({"args": vars(a) | {"base": str(a.base) if a.base else None}}))


if __name__ == "__main__":
    main()
