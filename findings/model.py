"""One catalog row: a defect in a released kernel, an API convention, or another committed case."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# The versions every finding was measured on (the GPU machines' stack and this project's CPU pin).
TORCH_CUDA = "torch 2.11.0+cu130"
TORCH_CPU = "torch 2.13.0+cpu"
FA4 = "flash-attn-4 4.0.0b36"
FLASHINFER = "flashinfer-python 0.7.2.post1"
XFORMERS = "xformers 0.0.35"
VLLM = "vllm 0.26.0"

CASES_DIR = "benchmarks/results/cases"
RESULTS_DIR = "benchmarks/results"


class Kind(str, Enum):
    DEFECT = "defect"            # the kernel is wrong against its own documented semantics
    CONVENTION = "convention"    # libraries disagree; each backend declares its own (not a bug)
    LIMITATION = "limitation"    # the library refuses or cannot build what its API accepts; declarations narrowed
    OPEN = "open"                # a failing case not yet separated from tolerance or not matched to a mechanism
    HARNESS = "harness"          # a defect of attnref itself, fixed; the case stays as a regression case


@dataclass(frozen=True)
class Entry:
    key: str                     # a stable short name: the row's anchor in FINDINGS.md
    kind: Kind
    library: str                 # package and version it was measured on
    entry: str                   # the kernel or API entry point
    what: str                    # what is wrong (or what differs), in one or two sentences
    cases: tuple[str, ...] = ()  # file names under benchmarks/results/cases/, the minimal one first
    results: str = ""            # the results file (under benchmarks/results/) that analyses it
    repro: str = ""              # a committed reproducer under benchmarks/results/repro/; "" : attnref repro or replay
    device: str = "H100"
    status: str = "not reported"  # upstream link, "in the ledger", "fixed in X", ...
    moved: tuple[tuple[str, str], ...] = ()  # (case, why it now replays outside its backend's declaration)

    def why_moved(self, case: str) -> str | None:
        return dict(self.moved).get(case)
