"""reference/one_key.py is a second formulation of attention under a one-key mask change: row by row from the
oracle's output and LSE. It must give the largest change a fresh pass under the shifted mask gives, and the same
answer to whether any mask changed, on drawn cases and on rows whose dropped key holds nearly all the weight."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings

from fuzz.blind import shift_by_one_key
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference.attention import attention
from reference.case import Case, SequenceSpec, Values, ValueDistribution
from reference.inputs import materialize
from reference.one_key import key_changes


def fresh(inputs) -> tuple[float, bool]:
    """The readable answer: the oracle again under every sequence's shifted mask."""
    changes = []

    def shift(mask):
        moved = shift_by_one_key(mask)
        changes.append(bool((moved != mask).any()))
        return moved

    expected = attention(inputs)
    shifted = attention(inputs, mask_transform=shift)
    diff = (shifted.output - expected.output).abs()
    return (float(diff.max()) if diff.numel() else 0.0), any(changes)


def agrees(case: Case) -> None:
    inputs = materialize(case)
    worst, changed = key_changes(inputs, attention(inputs), shift_by_one_key)
    want, want_changed = fresh(inputs)
    assert bool(changed) == want_changed
    assert float(worst) == pytest.approx(want, rel=1e-7, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(cases(ORACLE_CAPS, Limits(max_sequences=4, tiers=("small", "tile"))))
def test_one_key_change_equals_a_fresh_pass(case):
    agrees(case)


@settings(max_examples=40, deadline=None)
@given(cases(replace(ORACLE_CAPS, alibi_in_model_dtype=True), Limits(max_sequences=4, tiers=("small", "tile"),
                                                                     features_on=("alibi",))))
def test_one_key_change_equals_a_fresh_pass_with_the_bias_held_in_the_model_dtype(case):
    agrees(case)


@pytest.mark.parametrize("logit_scale", [1.0, 50.0])
def test_dropping_a_key_that_holds_the_row(logit_scale):
    # a decode row sees every key, so the shift drops its last one; at logit scale 50 with recent-key weight that
    # key holds all but ~e-50 of the row, 1 - w rounds to 0, and the row is attended again
    case = Case(sequences=(SequenceSpec(query_len=1, context_len=40), SequenceSpec(query_len=3, context_len=9)),
                num_heads=4, num_kv_heads=2, head_size=16, sinks=(0.0, 1.0, -2.0, 3.0),
                values=Values(distribution=ValueDistribution.EDGE, logit_scale=logit_scale))
    agrees(case)
