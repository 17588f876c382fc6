"""fuzz/summary.py is the judge's common path as one vector of reductions: where it takes a case it must write the
row `fuzz.judge.judge` writes (the same verdict, symptoms and messages; the metrics to rounding), and it must leave
to the full judge every case it does not take (an empty row, a non-finite element)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings

from backends.base import PTX_TANH_APPROX, Unsupported
from backends.registry import get
from fuzz.compare import oracle_and_baseline
from fuzz.judge import judge
from fuzz.strategies import Limits, cases
from fuzz.summary import judge_on_device
from fuzz.tolerance import baseline_dtype
from reference.case import Case, SequenceSpec
from reference.inputs import materialize

BACKENDS = ("torch-naive-paged", "mutant-window-off-by-one", "mutant-lse-base2", "mutant-empty-merge-nan",
            "mutant-soft-cap-ignored")
NUMBERS = ("limit", "mean_limit", "floor", "baseline_max_err", "baseline_mean_err", "max_err", "mean_err", "max_rel_err",
           "rmse", "cosine", "worst_expected", "worst_actual", "error_ratio", "lse_max_err", "lse_limit")
SAME = ("verdict", "symptom", "message", "contract", "symptoms", "nan_count", "inf_count", "worst_seq", "worst_token",
        "worst_token_flat", "worst_head", "worst_dim")


@settings(max_examples=60, deadline=None)
@given(cases(get("torch-naive-paged").caps, Limits(max_sequences=3, tiers=("small", "tile"))))
def test_the_device_summary_writes_the_judges_row(case):
    inputs = materialize(case)
    expected, baseline, _ = oracle_and_baseline(inputs, baseline_dtype(case.dtype, case.kv_cache_dtype))
    for name in BACKENDS:
        backend = get(name)
        if backend.not_supported_reasons(case):
            continue
        try:
            actual = backend.run(inputs)
        except Unsupported:
            continue
        # a soft-capped case also as a backend whose tanh is approximate would be judged (fuzz.tolerance.soft_cap_shift)
        approximate = [replace(backend.caps, soft_cap_tanh_error=PTX_TANH_APPROX)] if case.soft_cap else []
        for caps in [backend.caps] + approximate:
            full, fast = {}, {}
            judge(full, caps, inputs, expected, baseline, actual)
            if judge_on_device(fast, caps, inputs, expected, baseline, actual) is None:
                assert fast == {}
                empty = bool((expected.num_visible == 0).any())
                failed = full["nan_count"] or full["inf_count"] or full["symptom"] in ("output-nan", "lse-nan")
                assert empty or failed, name
                continue
            assert {k: full.get(k) for k in SAME} == {k: fast.get(k) for k in SAME}, name
            for k in NUMBERS:
                if k in full or k in fast:
                    assert fast[k] == pytest.approx(full[k], rel=1e-9, abs=1e-300) or (
                        math.isnan(fast[k]) and math.isnan(full[k])), (name, k)
            assert set(full) == set(fast), name


def test_extra_tensors_come_back_with_the_row():
    case = Case(sequences=(SequenceSpec(query_len=3, context_len=5), SequenceSpec(query_len=1, context_len=2)),
                num_heads=4, num_kv_heads=2, head_size=16)
    inputs = materialize(case)
    expected, baseline, _ = oracle_and_baseline(inputs, baseline_dtype(case.dtype))
    backend = get("torch-sdpa-math")
    row: dict = {}
    read = judge_on_device(row, backend.caps, inputs, expected, baseline, backend.run(inputs),
                           (torch.tensor(0.25, dtype=torch.float64), torch.tensor(True)))
    assert read == [0.25, 1.0] and row["verdict"] == "pass"
