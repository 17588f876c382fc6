"""The xformers adapters' masks mean what the oracle means (backends/xformers_masks.py), checked without xformers:
each attn_bias class is materialized by the rule its xformers 0.0.35 docstring states, for cases drawn from the
packed operators' declarations (decoder, encoder and the raw kernel region, every window spelling)."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from backends import xformers_masks as xm
from backends.xformers_ops import XformersOp
from fuzz.strategies import Limits
from reference.case import AttentionType
from reference.visibility import visible
from reports.repro import write_repro
from tests.repro_scripts import drawn_cases

LIMITS = Limits(max_sequences=3, max_context=24, max_query=12, max_kv_heads=2, tiers=("small",))


def documented_mask(plan: xm.MaskPlan, queries: int, keys: int) -> torch.Tensor:
    """[queries, keys] as the attn_bias docstrings state it (i a query's index, k a key's, s = keys - queries)."""
    i = torch.arange(queries)[:, None]
    k = torch.arange(keys)[None, :]
    s = keys - queries
    if plan.cls == xm.LOCAL_TWO_SIDED:  # "q - window_left <= k + s <= q + window_right", s = queries - keys there
        left, right = plan.sides
        return (i - left <= k - s) & (k - s <= i + right)
    if plan.cls == xm.PLAIN and plan.local is None:
        return torch.ones(queries, keys, dtype=torch.bool)
    top = i if plan.cls == xm.CAUSAL_TOP_LEFT else i + s  # the last key the query sees
    mask = k <= top
    if plan.local is not None:  # "greater than i - window_size and less than or equal to i"
        mask &= k > top - plan.local
    return mask


@pytest.mark.parametrize("name,operator", [("xformers-cutlass", "cutlass"), ("xformers-fa2", "flash")])
def test_every_admitted_case_s_mask_is_the_oracle_s(name, operator):
    backend = XformersOp(name)
    plans, kernel_cases = Counter(), 0
    for case in drawn_cases(backend.caps, LIMITS, 400):
        if backend.not_supported_reasons(case):
            continue
        plan = xm.plan(case)
        plans[(plan.cls, plan.local is not None)] += 1
        kernel_cases += case.attn_type == AttentionType.KERNEL
        for index, seq in enumerate(case.sequences):
            want = visible(case, seq, index)[0]
            got = documented_mask(plan, want.shape[0], want.shape[1])
            assert torch.equal(got, want), (plan, seq, case.window, case.causal, case.causal_alignment)
    assert kernel_cases >= 15  # of ~400 draws, a third kernel cases before the refusals
    drawn = {cls for cls, _ in plans}
    assert {xm.PLAIN, xm.CAUSAL_BOTTOM_RIGHT} <= drawn and (xm.CAUSAL_BOTTOM_RIGHT, True) in plans, plans
    # fa2F takes a top-left causal mask only where it is the bottom-right one (equal lengths), which few draws are;
    # cutlassF-pt has no two-sided window mask
    if operator == "cutlass":
        assert (xm.CAUSAL_TOP_LEFT, True) in plans and xm.LOCAL_TWO_SIDED not in drawn, plans
    else:
        assert xm.LOCAL_TWO_SIDED in drawn, plans


def test_an_unbounded_side_is_spelled_as_the_case_says():
    backend = XformersOp("xformers-fa2")
    spelled = Counter()
    for case in drawn_cases(backend.caps, LIMITS, 300):
        if case.attn_type == AttentionType.KERNEL and case.window is None and not case.causal:
            plan = xm.plan(case)
            spelled[(case.encoding("unbounded_window", "none"), plan.cls)] += 1
    assert set(spelled) == {("none", xm.PLAIN), ("edge", xm.LOCAL_TWO_SIDED), ("beyond", xm.LOCAL_TWO_SIDED)}, spelled


@pytest.mark.parametrize("name", ["xformers-cutlass", "xformers-fa2", "xformers-triton-splitk"])
def test_each_repro_script_compiles(name):
    backend = XformersOp(name)
    for case in drawn_cases(backend.caps, LIMITS, 40):
        if not backend.not_supported_reasons(case):
            compile(write_repro(case, name), "repro.py", "exec")
