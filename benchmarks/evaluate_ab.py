"""This tree's evaluation against another checkout's, in alternating processes: CPU milliseconds per case by part, and
whether both judged every case alike.

Usage: python benchmarks/evaluate_ab.py --base DIR [--backend torch-sdpa-math] [--cases-of torch-sdpa-flash]
       [--tiers small] [--examples 300] [--pairs 4] [--standin] [--generator]

Each process puts its tree first on the path, draws the same derandomized cases (`fuzz.sampling.sample_cases`; not
timed) of `--cases-of`'s declaration (a GPU backend's mix of cases, run here by a CPU backend that takes them; cases it
does not take are dropped), evaluates the first once (imports, first calls), then all of them on one thread as a
campaign worker does. Pairs alternate (base first), so the box's drift falls on both; the ratio new / base is taken
pair by pair. Then every case's verdict, symptom and numbers are compared between the trees' last runs.
`--standin`: the kernel is the chunked oracle in the case's dtype under `--cases-of`'s declaration (for a GPU backend no
CPU backend takes every case of: its kernel time is not the finding, the harness's parts are). Against a tree from before
`Values.source`, the drawn cases' tensors differ (the table), and so do the rows; `--generator` draws this tree's with
the generator, the base tree's tensors, so that the rows compare.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("materialize_s", "oracle_s", "kernel_s", "compare_s")
SAME = ("verdict", "symptom")
NUMBERS = ("limit", "max_err", "mean_err", "rmse", "cosine", "baseline_max_err", "mask_shift_error", "lse_max_err")


def child(args: argparse.Namespace) -> dict:
    from dataclasses import replace

    import torch

    from backends.registry import get
    from fuzz.compare import evaluate
    from fuzz.sampling import sample_cases
    from fuzz.strategies import Limits
    from reference import kinds, values

    torch.set_num_threads(1)
    source = get(args.cases_of or args.backend)
    backend = standin(source) if args.standin else get(args.backend)
    drawn = sample_cases(source.caps, Limits(tiers=tuple(args.tiers.split(","))), args.examples)
    drawn = [case for case in drawn if not backend.not_supported_reasons(case)]
    if args.generator and hasattr(kinds, "ValueSource"):  # the tensors of a tree from before the table
        drawn = [case.replace(values=replace(case.values, source=kinds.ValueSource.GENERATOR)) for case in drawn]
    evaluate(backend, drawn[0])
    if hasattr(values, "normal_table"):  # made once a process: a campaign's worker pays it once in thousands of cases
        values.normal_table()
    started = time.process_time()
    rows = [evaluate(backend, case).row for case in drawn]
    seconds = time.process_time() - started
    parts = {p: 1000 * sum(r.get(p) or 0.0 for r in rows) / len(rows) for p in PARTS}
    judged = [{k: r.get(k) for k in SAME + NUMBERS} for r in rows]
    return {"cases": len(rows), "ms": 1000 * seconds / len(rows), **parts, "rows": judged}


def standin(source):
    """A CPU backend declaring `source`'s capabilities whose kernel is the chunked pass in the case's dtype."""
    from dataclasses import replace

    from backends.base import Actual, Backend
    from reference.attention import attention

    class Standin(Backend):
        name, library = f"standin-{source.name}", "attnref"
        caps = replace(source.caps, devices=frozenset({"cpu"}))

        def device(self) -> str:
            return "cpu"

        def run(self, inputs):
            got = attention(inputs, dtype=inputs.case.dtype.torch)
            return Actual(output=got.output, lse=got.lse.float())

    return Standin()


def run(tree: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, str(ROOT / "benchmarks" / "evaluate_ab.py"), "--child", "--backend", args.backend,
               "--tiers", args.tiers, "--examples", str(args.examples)]
    if args.cases_of:
        command += ["--cases-of", args.cases_of]
    command += ["--standin"] * args.standin + ["--generator"] * args.generator
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=tree, env={"PYTHONPATH": str(tree)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def differences(base: list[dict], new: list[dict]) -> tuple[int, float]:
    """(cases whose verdict or symptom differ, the largest relative difference of a number)."""
    verdicts, worst = 0, 0.0
    for a, b in zip(base, new):
        verdicts += any(a[k] != b[k] for k in SAME)
        for k in NUMBERS:
            x, y = a[k], b[k]
            if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
                verdicts += (x is None) != (y is None)
                continue
            worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-300))
    return verdicts, worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, help="the other checkout of this repository")
    ap.add_argument("--backend", default="torch-sdpa-math", help="the backend that runs the kernel here")
    ap.add_argument("--cases-of", default=None, help="draw this backend's declared cases (default: --backend's)")
    ap.add_argument("--tiers", default="small", help="comma-separated size tiers")
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--standin", action="store_true", help="the kernel: the chunked pass in the case's dtype")
    ap.add_argument("--generator", action="store_true",
                    help="this tree's cases with Values.source = generator: the base tree's tensors, rows comparable")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.base is None:
        ap.error("--base: the checkout to compare against")
    results: dict[str, list[dict]] = {"base": [], "new": []}
    for _ in range(args.pairs):
        results["base"].append(run(args.base.resolve(), args))
        results["new"].append(run(ROOT, args))
    print(f"{'a stand-in' if args.standin else args.backend} on {args.cases_of or args.backend}'s cases, tiers {args.tiers}, "
          f"{results['new'][0]['cases']} cases, {args.pairs} pairs (CPU ms a case, median)\n")
    print("| tree | ms | " + " | ".join(p.removesuffix("_s") for p in PARTS) + " |")
    print("|---|---|" + "---|" * len(PARTS))
    for name, runs in results.items():
        cells = [statistics.median(r[k] for r in runs) for k in ("ms",) + PARTS]
        print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    ratios = [n["ms"] / b["ms"] for b, n in zip(results["base"], results["new"])]
    print(f"\nnew / base, pair by pair: {', '.join(f'{r:.3f}' for r in ratios)} "
          f"(median {statistics.median(ratios):.3f})")
    verdicts, worst = differences(results["base"][-1]["rows"], results["new"][-1]["rows"])
    print(f"cases judged otherwise: {verdicts}; largest relative difference of a row's number: {worst:.2e}")


if __name__ == "__main__":
    main()
