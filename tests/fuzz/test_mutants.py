"""The fuzzer kills every planted bug within a small budget; the correct kernel shows no failure."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from backends.naive import Bug, NaivePaged
from fuzz.compare import Verdict, evaluate
from fuzz.strategies import cases

BUDGET = 300


def _first_failure(backend, budget: int):
    """The first failing example's (index, verdict, message), or None. Recorded rather than raised: a
    mutant whose output depends on uninitialised memory need not fail again when hypothesis replays it."""
    seen: dict = {"n": 0, "kill": None}

    @seed(0)
    @settings(max_examples=budget, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck),
              derandomize=False)
    @given(cases(backend.caps))
    def run(case):
        if seen["kill"] is not None:
            return
        seen["n"] += 1
        row = evaluate(backend, case).row
        if Verdict(row["verdict"]).is_failure:
            seen["kill"] = (seen["n"], row["verdict"], row.get("message"))

    run()
    return seen["kill"]


@pytest.mark.parametrize("bug", list(Bug), ids=lambda b: b.value)
def test_fuzzer_kills_the_mutant(bug):
    assert _first_failure(NaivePaged(bug), BUDGET) is not None, f"{bug.value} survived {BUDGET} examples"


def test_correct_kernel_has_no_failure_on_the_same_budget():
    assert _first_failure(NaivePaged(), 150) is None
