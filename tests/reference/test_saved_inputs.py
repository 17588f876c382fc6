"""Every saved case file materializes to the tensors it did when its digest was written (saved_inputs.py says how)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .saved_inputs import digest, saved_cases

PINNED = json.loads((Path(__file__).parent / "saved_inputs.json").read_text())
CASES = saved_cases()


def test_every_saved_case_has_a_pinned_digest():
    assert sorted(CASES) == sorted(PINNED), "a case file was added or removed: write saved_inputs.json again"


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_saved_case_replays_the_same_tensors(name):
    assert digest(CASES[name]) == PINNED[name], f"{name}: its host inputs changed; a saved reproducer would not replay"
