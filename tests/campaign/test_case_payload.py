"""A failing case is saved even when its tensors cannot be copied off a device that just died."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings

from backends.registry import get
from campaign.store import case_payload
from fuzz.compare import evaluate
from fuzz.strategies import Limits, cases

NAIVE = get("torch-naive-paged")


class _DeadTensor:
    def detach(self):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore lines")


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(NAIVE.caps, Limits(max_sequences=2, max_context=8, max_query=3, tiers=("small",))))
def test_a_dead_device_loses_the_tensors_not_the_case(case):
    evaluation = evaluate(NAIVE, case)
    row = dict(evaluation.row)
    stem, payload, tensors = case_payload(NAIVE.name, row, evaluation)
    assert tensors is not None and "tensors_lost" not in payload
    dead = replace(evaluation, actual=replace(evaluation.actual, output=_DeadTensor()))
    stem2, payload2, tensors2 = case_payload(NAIVE.name, row, dead)
    assert stem2 == stem and tensors2 is None and payload2["case"] == payload["case"]
    assert payload2["tensors_lost"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
