"""A case is judged in one read, wherever its oracle ran (fuzz.compare.judge_in_one_read): the kernel's outputs come
beside the oracle inside the kernel's own try (kernel_on), so a device error in that copy is the case's crash, and
the blind check's answer comes back with the judge's summary."""
from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import given, settings

from backends.base import Actual
from backends.registry import get
from fuzz.compare import evaluate, kernel_on
from fuzz.strategies import Limits, cases
from tests.repro_scripts import drawn_cases


def test_outputs_already_beside_the_oracle_are_not_copied():
    actual = Actual(torch.randn(3, 2, 4), torch.randn(3, 2), None, notes={"x": 1})
    assert kernel_on(actual, torch.device("cpu")) is actual


def test_a_failing_copy_of_the_kernels_outputs_is_the_cases_crash(monkeypatch):
    # a meta tensor cannot be copied out, as a GPU's output cannot after an illegal memory access: the copy now runs
    # in the kernel's try, where judging it outside raised out of evaluate() as attnref's own error
    backend = get("torch-naive-paged")
    case = drawn_cases(backend.caps, Limits(max_sequences=2, max_context=16, max_query=4), 1)[0]
    run = backend.run
    monkeypatch.setattr(backend, "run", lambda inputs: replace(run(inputs), output=torch.empty(
        case.num_tokens, case.num_heads, case.value_size, device="meta")))
    row = evaluate(backend, case, "cpu").row
    assert row["verdict"] == "crash" and row["symptom"] == "crash" and "meta" in row["message"]


@settings(max_examples=40, deadline=None)
@given(cases(get("torch-naive-paged").caps, Limits(max_sequences=4, tiers=("small",))))
def test_the_blind_check_read_with_the_summary_calls_what_the_row_by_row_one_calls(case):
    # packed: the shifted mask over the packed scores, read back with the judge's summary; chunked: row by row
    backend = get("mutant-window-off-by-one")
    packed, chunked = evaluate(backend, case, "cpu").row, evaluate(backend, case, "cpu", packed=False).row
    assert packed["verdict"] == chunked["verdict"]
    if packed["verdict"] in ("pass", "blind"):
        assert (packed["mask_shift_error"] is None) == (chunked["mask_shift_error"] is None)
