"""FlashInfer adapters' own logic, on the CPU with a stand-in for the library."""
from __future__ import annotations

import sys
import types

import pytest
from hypothesis import HealthCheck, given, settings

from backends.base import Unsupported
from backends.registry import get
from fuzz.strategies import Limits, cases
from reference.inputs import materialize


class _BackendPlanUnsupportedError(RuntimeError):  # the name FlashInfer's MLA plan() raises under
    pass


def _fake_mla(error: Exception) -> types.ModuleType:
    class Wrapper:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def plan(self, **kwargs) -> None:
            raise error

    module = types.ModuleType("flashinfer.mla")
    module.BatchMLAPagedAttentionWrapper = Wrapper
    module.MLAPlanMetadata = types.SimpleNamespace(csr=lambda **kwargs: None)
    return module


@pytest.mark.parametrize("error, expected", [
    (_BackendPlanUnsupportedError("fa3 MLA causal tile boundary is unsupported: ..."), Unsupported),
    (RuntimeError("CUDA error: an illegal memory access"), RuntimeError)])
def test_mla_plan_refusals_are_unsupported_and_other_errors_stay_crashes(monkeypatch, error, expected):
    backend = get("flashinfer-mla-fa3")
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.mla", _fake_mla(error))
    drawn = []

    @settings(max_examples=1, database=None, suppress_health_check=list(HealthCheck))
    @given(cases(backend.caps, Limits(max_sequences=2, max_context=8, max_query=2)))
    def one(case):
        drawn.append(case)

    one()
    with pytest.raises(expected):
        backend.run(materialize(drawn[0]))
