"""reference.attention.sequence_kv keeps a sequence's widened keys and values on its Inputs for the next reader (the
blind check reads what the oracle read): the kept ones are the ones a fresh read gives, nothing is kept past
KEPT_BYTES or carried to moved Inputs, and an evaluation leaves none behind."""
from __future__ import annotations

import importlib

import torch
from hypothesis import given, settings

from backends.registry import get
from fuzz.compare import evaluate
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference.inputs import map_tensors, materialize

attention = importlib.import_module("reference.attention")  # the module: the package exports its function too


@settings(max_examples=30, deadline=None)
@given(cases(ORACLE_CAPS, Limits(tiers=("small",))))
def test_a_kept_read_is_a_fresh_read(case):
    inputs = materialize(case)
    for i in range(len(case.sequences)):
        first = attention.sequence_kv(inputs, i, torch.float64)
        assert attention.sequence_kv(inputs, i, torch.float64) is first
        fresh = attention.sequence_kv(materialize(case), i, torch.float64)
        assert all(torch.equal(a, b) for a, b in zip(first, fresh))
    assert not map_tensors(inputs, lambda t: t).widened  # not an input: a moved copy reads its own


@settings(max_examples=10, deadline=None)
@given(cases(ORACLE_CAPS, Limits(tiers=("small",))))
def test_nothing_is_kept_past_the_bound(case):
    inputs = materialize(case)
    old, attention.KEPT_BYTES = attention.KEPT_BYTES, -1
    try:
        attention.sequence_kv(inputs, 0, torch.float64)
    finally:
        attention.KEPT_BYTES = old
    assert not inputs.widened


@settings(max_examples=10, deadline=None)
@given(cases(get("torch-naive-paged").caps, Limits(tiers=("small",))))
def test_an_evaluation_leaves_nothing_kept(case):
    evaluation = evaluate(get("torch-naive-paged"), case)
    if evaluation.inputs is not None:
        assert not evaluation.inputs.widened
