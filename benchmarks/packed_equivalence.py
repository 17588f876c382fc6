"""The packed oracle against the chunked one on many drawn cases: float64 agreement and identical verdicts.

Usage: python benchmarks/packed_equivalence.py [--examples 10000] [--backends torch-naive-paged,mutant-...]
       [--tiers small,tile]

Cases are drawn from torch-naive-paged's declaration (every cache layout and dtype the oracle takes) and each is
evaluated by every listed backend (the correct twin and planted-bug mutants) twice: with the packed pass where the
case is packable and with the chunked per-sequence oracle only. Prints, in Markdown, how many cases were packable,
the largest float64 difference of output and LSE between the two oracles, and every row whose verdict or symptoms
differ (tests/reference/test_packed.py runs a small sample of the same in `make test`).
"""
from __future__ import annotations

import argparse
import collections
import time

import torch
from hypothesis import HealthCheck, Phase, given, settings

from backends.registry import get
from campaign.drawing import pin_hypothesis_constants
from fuzz.compare import evaluate
from fuzz.strategies import Limits, cases
from reference.attention import attention
from reference.inputs import materialize
from reference.packed import packable, packed_attention

DEFAULT_BACKENDS = ("torch-naive-paged,mutant-window-off-by-one,mutant-soft-cap-ignored,mutant-alibi-sign-flipped,"
                    "mutant-gqa-modulo,mutant-kv-scales-swapped,mutant-lse-base2,mutant-causal-top-left")


def verdict_of(row: dict) -> tuple:
    """What a row decides: its verdict and every symptom (the messages quote limits, which the baseline moves)."""
    return row["verdict"], row.get("symptom"), tuple((s["verdict"], s["symptom"]) for s in row.get("symptoms") or ())


def largest_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    both = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return float("inf")
    return float((a[both] - b[both]).abs().max()) if both.any() else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("--backends", default=DEFAULT_BACKENDS)
    ap.add_argument("--tiers", default="small,tile")
    a = ap.parse_args()
    torch.set_num_threads(1)
    pin_hypothesis_constants()  # the same command draws the same cases whatever modules the tree gained
    backends = [get(name) for name in a.backends.split(",")]
    drawn = []

    @settings(max_examples=a.examples, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate], database=None, derandomize=True)
    @given(cases(backends[0].caps, Limits(tiers=tuple(a.tiers.split(",")))))
    def collect(case):
        drawn.append(case)

    collect()
    t0 = time.perf_counter()
    packed_cases, worst_out, worst_lse, differ = 0, 0.0, 0.0, []
    verdicts: collections.Counter = collections.Counter()
    for case in drawn:
        inputs = materialize(case)
        if packable(inputs):
            packed_cases += 1
            p, c = packed_attention(inputs), attention(inputs)
            worst_out = max(worst_out, largest_difference(p.output, c.output))
            worst_lse = max(worst_lse, largest_difference(p.lse, c.lse))
        for backend in backends:
            if backend.not_supported_reasons(case):
                continue
            one, two = evaluate(backend, case, "cpu").row, evaluate(backend, case, "cpu", packed=False).row
            verdicts[one["verdict"]] += 1
            if verdict_of(one) != verdict_of(two):
                differ.append((backend.name, case.seed, verdict_of(one), verdict_of(two)))
    elapsed = time.perf_counter() - t0
    rows = sum(verdicts.values())
    print(f"{len(drawn)} drawn cases (tiers {a.tiers}), {packed_cases} packable; {rows} evaluations on "
          f"{len(backends)} backends in {elapsed:.0f} s\n")
    print("| largest float64 difference, output | LSE | rows whose verdict or symptoms differ | verdicts (packed) |")
    print("|---|---|---|---|")
    print(f"| {worst_out:.3g} | {worst_lse:.3g} | {len(differ)} of {rows} | "
          + ", ".join(f"{v} {n}" for v, n in verdicts.most_common()) + " |")
    for name, seed, one, two in differ:
        print(f"- {name} seed {seed}: packed {one}, chunked {two}")


if __name__ == "__main__":
    main()
