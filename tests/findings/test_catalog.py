"""The findings catalog, FINDINGS.md, the committed cases and the ledger cannot drift apart."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from backends.registry import get
from findings.model import CASES_DIR, RESULTS_DIR, Kind
from findings.render import all_entries, render
from fuzz.ledger import KNOWN
from reference.case import Case

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = sorted(f for f in os.listdir(os.path.join(ROOT, CASES_DIR)) if f.endswith(".json"))


def test_findings_md_is_the_rendered_catalog():
    with open(os.path.join(ROOT, "FINDINGS.md")) as f:
        committed = f.read()
    assert committed == render(), "FINDINGS.md is stale: run `attnref findings > FINDINGS.md`"


def test_every_committed_case_belongs_to_exactly_one_row():
    listed = Counter(case for e in all_entries() for case in e.cases)
    assert not [c for c, n in listed.items() if n > 1], "a case listed twice"
    assert sorted(listed) == CASES, (f"cases without a row: {sorted(set(CASES) - set(listed))}; "
                                     f"rows naming missing cases: {sorted(set(listed) - set(CASES))}")


def test_rows_are_well_formed():
    keys = [e.key for e in all_entries()]
    assert len(keys) == len(set(keys))
    for e in all_entries():
        assert e.cases or e.kind in (Kind.CONVENTION, Kind.LIMITATION), f"{e.key}: a defect needs a minimal case"
        assert e.results == "" or os.path.exists(os.path.join(ROOT, RESULTS_DIR, e.results)), e.results
        assert e.repro == "" or os.path.exists(os.path.join(ROOT, RESULTS_DIR, "repro", e.repro)), e.repro
        assert {case for case, _ in e.moved} <= set(e.cases), e.key


def test_every_ledger_entry_has_a_catalog_row():
    statuses = " ".join(e.status for e in all_entries())
    assert [f.link for f in KNOWN if f.link not in statuses] == []


@pytest.mark.parametrize("name", CASES)
def test_case_replays_inside_its_declaration_or_its_row_says_why(name):
    with open(os.path.join(ROOT, CASES_DIR, name)) as f:
        saved = json.load(f)
    backend = get(saved["backend"], include_mutants=True)
    device = sorted(backend.caps.devices)[-1]  # judge the declaration as the backend's own device would
    backend.device = lambda: device
    reasons = backend.not_supported_reasons(Case.from_dict(saved["case"]))
    (entry,) = [e for e in all_entries() if name in e.cases]
    if reasons:
        assert entry.why_moved(name), f"{name} falls outside {saved['backend']}'s declaration: {reasons}"
    else:
        assert entry.why_moved(name) is None, f"{name} replays inside its declaration: drop its 'moved' note"
