"""Two independent bugs in one kernel give two buckets, each shrunk to a case of its own symptom, in the
live campaign and in the report's re-bucketing (tests/fuzz/two_bugs.py)."""
from __future__ import annotations


from campaign.buckets import assign, row_symptoms
from campaign.engine import CampaignConfig, run_campaign
from reference.case import Case


def test_two_bugs_make_two_buckets_each_with_its_own_minimal_case(tmp_path):
    cfg = CampaignConfig(out=tmp_path, backends=["test-two-bugs"], examples=120, workers=2, progress=False,
                         specs=("tests.fuzz.two_bugs:backends",))
    result = run_campaign(cfg)
    generated = [r for r in result.rows if r.get("phase") == "generate"]
    both = [r for r in generated if {("contract", "empty-row-output"), ("mismatch", "output")} <= row_symptoms(r)]
    assert both, "the draw never put both bugs in one case: the test would prove nothing"
    symptoms = {tuple(b.signature.coarse[1:]) for b in result.buckets}
    assert symptoms == {("contract", "empty-row-output"), ("mismatch", "output")}
    minimal = {tuple(r["bucket_symptom"]): r for r in result.rows if r.get("phase") == "minimal" and r.get("case_file")}
    assert set(minimal) == symptoms
    mismatch = Case.from_json(minimal[("mismatch", "output")]["case"])
    assert mismatch.causal and any(s.query_len > s.key_len >= 2 for s in mismatch.sequences)
    empty = Case.from_json(minimal[("contract", "empty-row-output")]["case"])
    assert ("mismatch", "output") not in row_symptoms(minimal[("contract", "empty-row-output")]), empty
    report, _ = assign(result.rows)
    assert {b.signature.coarse[1:] for b in report.values()} == symptoms
    assert sum(b.count for b in report.values()) == sum(1 for r in generated if r["verdict"] not in ("pass", "blind"))
