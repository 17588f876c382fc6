"""Digests of the inputs every saved case file materializes to on the host (benchmarks/results/cases/*.json).

Usage: python tests/reference/saved_inputs.py > tests/reference/saved_inputs.json

A change to how values are drawn must keep these: a saved case is a finding's reproducer, and a maintainer replays
it long after. `test_saved_inputs.py` checks them; this writes them (run it on the tree whose tensors are the ones to
keep).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from reference.case import Case  # noqa: E402
from reference.inputs import map_tensors, materialize  # noqa: E402

CASES = ROOT / "benchmarks" / "results" / "cases"


def digest(case: Case) -> str:
    """sha1 over every tensor of the case's host inputs: dtype, shape and bytes, in `map_tensors`' order."""
    h = hashlib.sha1()

    def add(t: torch.Tensor) -> torch.Tensor:
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return t

    map_tensors(materialize(case, "cpu"), add)
    return h.hexdigest()


def saved_cases() -> dict[str, Case]:
    return {p.name: Case.from_dict(json.loads(p.read_text())["case"]) for p in sorted(CASES.glob("*.json"))}


if __name__ == "__main__":
    print(json.dumps({name: digest(case) for name, case in saved_cases().items()}, indent=1))
