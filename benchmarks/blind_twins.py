"""CPU twins of GPU backends: their declared region, drawn as a campaign draws it, run by torch-naive-paged.

Whether a passing example is `blind` (a one-key mask shift stays under its tolerance) depends on the case and
the tolerance rule only, not on the kernel's output; so the blind share of a GPU backend's region can be
measured, and a strategy change tried, on a CPU without device time:

    attnref --backend-spec benchmarks.blind_twins:twins fuzz --backend vllm-merge-cuda-on-naive --time 120

Each twin keeps the GPU backend's region (dtypes, sizes, features, layouts, kv dtypes, encodings) and
`not_supported_reasons` (not naive's: naive computes any head or block size), and takes the output contract
(LSE base, empty rows, output buffer, cache writes) from torch-naive-paged, which computes every case it draws.
"""
from __future__ import annotations

from dataclasses import replace

from backends.base import Backend
from backends.naive import NaivePaged
from backends.registry import builtin_backends
from reference.case import Case
from reference.inputs import Inputs


class OnNaive(Backend):
    """`inner`'s region under the name INNER-on-naive, computed by torch-naive-paged on the CPU."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.naive = inner, NaivePaged()
        self.name, self.library = f"{inner.name}-on-naive", "attnref"
        self.description = f"{inner.name}'s declared region, run by torch-naive-paged (blind-share twin)"
        contract = self.naive.caps
        self.caps = replace(inner.caps, devices=frozenset({"cpu"}), lse_base=contract.lse_base,
                            empty_row_lse=contract.empty_row_lse, writes_output_buffer=contract.writes_output_buffer,
                            writes_cache=False, finite_canaries_only=contract.finite_canaries_only)
        self.compiled_per, self.compiled_features = (), ()

    def availability(self) -> str | None:
        return None

    def device(self) -> str:
        return "cpu"

    def not_supported_reasons(self, case: Case) -> list[str]:
        # naive's own region is narrower only to keep its draws small: its reference loop computes any size
        return [r for r in self.inner.not_supported_reasons(case) if not r.startswith("device=")]

    def run(self, inputs: Inputs):
        return self.naive.run(inputs)


def twins() -> list[Backend]:
    """Every built-in CUDA-only backend that reads a paged cache, as NAME-on-naive."""
    return [OnNaive(b) for b in builtin_backends() if b.caps.devices == frozenset({"cuda"}) and b.caps.reads_paged_cache]
