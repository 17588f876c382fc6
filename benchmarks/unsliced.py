"""Twins of the JIT-compiled backends without compile slices (Backend.compiled_per = ()), for an A/B of
the campaign engine's slicing in one campaign, side by side:

    attnref --backend-spec benchmarks.unsliced:twins fuzz --backend fa4-varlen --backend fa4-varlen-unsliced ...

`tools/gpu-slices-ab.sh` runs it on the GPU machine; its results are in benchmarks/results/.
"""
from __future__ import annotations

from backends.base import Backend
from backends.registry import builtin_backends
from reference.case import Case
from reference.inputs import Inputs


class Unsliced(Backend):
    """`inner` under the name INNER-unsliced, drawn from its whole space in every shard."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name, self.library, self.caps = f"{inner.name}-unsliced", inner.library, inner.caps
        self.description = f"{inner.description} (no compile slices)"
        self.compiled_per, self.compiled_features = (), ()

    def availability(self) -> str | None:
        return self.inner.availability()

    def device(self) -> str:
        return self.inner.device()

    def not_supported_reasons(self, case: Case) -> list[str]:
        return self.inner.not_supported_reasons(case)

    def run(self, inputs: Inputs):
        return self.inner.run(inputs)


def twins() -> list[Backend]:
    """Every built-in backend with compile slices, again as NAME-unsliced without them."""
    return [Unsliced(b) for b in builtin_backends() if b.compiled_per]
