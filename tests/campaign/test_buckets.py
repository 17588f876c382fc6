"""Buckets on rows alone: one bug is one bucket, shrunk once; later hits are counted."""
from __future__ import annotations

from campaign.buckets import Buckets, Decision, assign, crash_class, signature


def _row(features="window", verdict="mismatch", symptom="output", backend="k", index=1, **kw):
    symptoms = kw.pop("symptoms", [{"verdict": verdict, "symptom": symptom, "message": "m"}])
    return dict(backend=backend, verdict=verdict, symptom=symptom, features=features, phase="generate",
                shard=0, index=index, shard_size=10, example_id=f"{backend}/0/{index}", t=float(index),
                symptoms=symptoms, case="{}", **kw)


def test_the_first_failure_is_shrunk_and_the_others_wait_for_it():
    b = Buckets()
    assert b.observe(_row("window,gqa", index=1)) == Decision.SHRINK
    assert b.observe(_row("window,alibi", index=2)) == Decision.COUNT  # held back: a shrink is in flight
    minimal = dict(_row("window", index=1), phase="minimal", bucket_symptom=("mismatch", "output"))
    bucket, new, still = b.shrunk(("k", "mismatch", "output"), minimal, origin=_row("window,gqa", index=1))
    assert new and still == [] and bucket.count == 2  # origin and the held-back one
    assert b.observe(_row("window,soft_cap", index=3)) == Decision.COUNT and bucket.count == 3


def test_a_failure_the_minimal_case_does_not_explain_gets_its_own_shrink():
    b = Buckets()
    b.observe(_row("window", index=1))
    minimal = dict(_row("window", index=1), phase="minimal", bucket_symptom=("mismatch", "output"))
    b.shrunk(("k", "mismatch", "output"), minimal)
    assert b.observe(_row("alibi", index=2)) == Decision.SHRINK  # no window: another bug
    assert b.observe(_row("window", verdict="nan", symptom="output-nan", index=3)) == Decision.SHRINK


def test_one_bug_breaking_output_and_lse_is_one_bucket():
    b = Buckets()
    both = [{"verdict": "mismatch", "symptom": "output", "message": ""}, {"verdict": "mismatch", "symptom": "lse", "message": ""}]
    b.observe(_row("kv_fp8_e4m3", index=1, symptoms=both))
    minimal = dict(_row("kv_fp8_e4m3", index=1, symptoms=both), phase="minimal", bucket_symptom=("mismatch", "output"))
    b.shrunk(("k", "mismatch", "output"), minimal)
    lse_only = _row("kv_fp8_e5m2,gqa", symptom="lse", index=2)  # e5m2: the same fp8 dequantization family
    assert b.observe(lse_only) == Decision.COUNT


def test_a_gqa_failure_whose_shrink_ends_at_one_kv_head_is_one_bucket():
    """Hypothesis draws kv heads down to one: the minimal case of a GQA bug is an MQA case (campaign.buckets.FAMILY)."""
    b = Buckets()
    origin = _row("gqa,paged", index=1)
    assert b.observe(origin) == Decision.SHRINK
    minimal = dict(_row("mqa,paged", index=1), phase="minimal", bucket_symptom=("mismatch", "output"))
    bucket, new, still = b.shrunk(("k", "mismatch", "output"), minimal, origin=origin)
    assert new and still == [] and bucket.count == 1  # the origin counted: no second shrink, no second bucket
    assert b.observe(_row("gqa,paged,window", index=2)) == Decision.COUNT and bucket.count == 2
    assert b.observe(_row("paged", index=3)) == Decision.SHRINK  # no shared kv heads: maybe another bug
    buckets, ids = assign([origin, minimal, _row("gqa,paged", index=4)])
    assert len(buckets) == 1 and ids[0] == ids[2] == bucket.id


def test_two_shrinks_ending_at_the_same_case_merge():
    b = Buckets(per_bucket=1)
    b.observe(_row("window,gqa", index=1))
    m1 = dict(_row("window", index=1), phase="minimal", bucket_symptom=("mismatch", "output"))
    first, new1, _ = b.shrunk(("k", "mismatch", "output"), m1)
    m2 = dict(_row("window,alibi", index=7), phase="minimal", bucket_symptom=("mismatch", "output"))
    second, new2, _ = b.shrunk(("k", "mismatch", "output"), m2)
    assert new1 and not new2 and first is second


def test_crashes_that_kill_the_process_are_saved_as_found_once():
    b = Buckets()
    r = _row("gqa", verdict="crash", symptom="crash", message="worker died (exit -11)", worker_died=True)
    assert b.observe(r) == Decision.SAVE
    assert b.observe(dict(r, index=2)) == Decision.COUNT


def test_ledger_failures_and_passes_are_not_bucketed():
    b = Buckets()
    assert b.observe(_row(known_issue="https://x")) == Decision.IGNORE
    assert b.observe(_row(verdict="pass")) == Decision.IGNORE


def test_leftovers_keep_one_case_per_symptom():
    b = Buckets()
    b.observe(_row("window,gqa", index=1))
    for i, f in enumerate(["window,alibi", "window", "window,gqa,sinks"], start=2):
        b.observe(_row(f, index=i))
    kept = b.leftovers([_row("window,gqa", index=1)])
    assert [r["features"] for r in kept] == ["window"]
    assert sum(x.count for x in b.buckets.values()) == 4


def test_assign_recomputes_the_live_buckets_from_rows():
    rows = [_row("window,gqa", index=1), _row("window,alibi", index=2), _row("alibi", index=3),
            dict(_row("window", index=1), phase="minimal", bucket_symptom=["mismatch", "output"], case_file="c.json")]
    buckets, ids = assign(rows)
    window = signature(rows[3]).bucket_id
    assert ids[:2] == [window, window] and ids[2] != window and ids[3] is None
    assert buckets[window].count == 2 and buckets[window].minimal["case_file"] == "c.json"
    assert buckets[window].others == {"gqa": 1, "alibi": 1}  # what else its rows had: a second bug may hide there


def test_a_bucket_lists_the_other_features_of_the_rows_it_counts():
    """The live state and the report both say which features the counted rows had beyond the minimal case's (an
    H200 campaign's [paged, window] bucket counted 503 rows of other families' features: vllm/flashinfer-sm90-...)."""
    from reports.build import bucket_table

    b = Buckets()
    first = _row("window", index=1)
    assert b.observe(first) == Decision.SHRINK
    b.shrunk(signature(first).coarse, dict(first, phase="minimal", bucket_symptom=["mismatch", "output"]), first)
    for i, extra in enumerate(["prefix_lm", "prefix_lm,sinks", "prefix_lm"], start=2):
        assert b.observe(_row(f"window,{extra}", index=i)) == Decision.COUNT
    (bucket,) = b.summary()
    assert bucket.others == {"prefix_lm": 3, "sinks": 1}
    rows = [dict(first, phase="minimal", bucket_symptom=["mismatch", "output"], case_file="c.json"), first,
            *(_row(f"window,{e}", index=i) for i, e in enumerate(["prefix_lm", "prefix_lm,sinks"], start=2))]
    (line,) = bucket_table(rows)
    assert line["others"] == "prefix_lm 2, sinks 1"


def test_crash_classes_ignore_numbers_and_addresses():
    assert crash_class("RuntimeError: CUDA error at 0x7f00 line 12") == crash_class("RuntimeError: CUDA error at 0xdead line 99")


def test_a_bucket_does_not_hide_a_second_symptom():
    b = Buckets()
    empty = [{"verdict": "contract", "symptom": "empty-row-output", "message": ""}]
    both = empty + [{"verdict": "mismatch", "symptom": "output", "message": ""}]
    b.observe(_row("", verdict="contract", symptom="empty-row-output", symptoms=empty, index=1))
    minimal = dict(_row("", verdict="contract", symptom="empty-row-output", symptoms=empty, index=1),
                   phase="minimal", bucket_symptom=("contract", "empty-row-output"))
    contract, _, _ = b.shrunk(("k", "contract", "empty-row-output"), minimal)
    two = _row("more_queries_than_keys", verdict="mismatch", symptom="output", symptoms=both, index=2)
    # the contract bucket shows one of its symptoms, not the mismatch: a second bug, shrunk toward the mismatch
    assert b.covering(two) is None and b.observe(two) == Decision.SHRINK
    assert b.target(two).coarse == ("k", "mismatch", "output")
    m2 = dict(_row("more_queries_than_keys", symptoms=both[1:], index=2), phase="minimal",
              bucket_symptom=("mismatch", "output"))
    mismatch, new, _ = b.shrunk(("k", "mismatch", "output"), m2, origin=two)
    assert new and mismatch is not contract and mismatch.count == 1
    # a row with both bugs is explained by the two together, counted under its main symptom's bucket
    assert b.observe(dict(two, index=3)) == Decision.COUNT and mismatch.count == 2
    # and the report's re-bucketing agrees
    rows = [minimal, m2, dict(two, index=4), _row("", verdict="contract", symptom="empty-row-output",
                                                 symptoms=empty, index=5)]
    buckets, ids = assign([dict(r, case_file=f"c{i}.json") if r["phase"] == "minimal" else r
                           for i, r in enumerate(rows)])
    assert len(buckets) == 2 and ids[2] == signature(m2).bucket_id and ids[3] == signature(minimal).bucket_id


def test_a_symptom_seen_without_the_bucket_s_own_is_a_second_bug_whichever_shrink_ends_first():
    """The order the test above does not take: the mismatch's shrink ends first, at a case whose empty rows also break
    their contract (q > k, causal). A later row that breaks the contract alone is not the mismatch bucket's: under load,
    a two-bug campaign once ended with that bucket only (tests/campaign/test_two_bugs.py). An LSE-only row of an output
    bucket whose case moves both stays its own (test_one_bug_breaking_output_and_lse_is_one_bucket)."""
    b = Buckets()
    empty = [{"verdict": "contract", "symptom": "empty-row-output", "message": ""}]
    both = [{"verdict": "mismatch", "symptom": "output", "message": ""}, *empty]
    two = _row("more_queries_than_keys", symptoms=both, index=1)
    assert b.observe(two) == Decision.SHRINK
    m1 = dict(two, phase="minimal", bucket_symptom=("mismatch", "output"))
    mismatch, _, _ = b.shrunk(("k", "mismatch", "output"), m1, origin=two)
    alone = _row("more_queries_than_keys", verdict="contract", symptom="empty-row-output", symptoms=empty, index=2)
    assert b.covering(alone) is None and b.observe(alone) == Decision.SHRINK
    assert b.target(alone).coarse == ("k", "contract", "empty-row-output")
    assert b.observe(dict(two, index=3)) == Decision.COUNT and mismatch.count == 2
    m2 = dict(alone, phase="minimal", bucket_symptom=("contract", "empty-row-output"))
    rows = [dict(m1, case_file="a.json"), dict(m2, case_file="b.json"), dict(two, index=4), dict(alone, index=5)]
    buckets, ids = assign(rows)
    assert len(buckets) == 2 and ids[2] == signature(m1).bucket_id and ids[3] == signature(m2).bucket_id


def test_a_row_whose_symptoms_no_bucket_shows_is_its_own_leftover():
    b = Buckets()
    lse = [{"verdict": "mismatch", "symptom": "lse", "message": ""}]
    b.observe(_row("window", index=1))
    b.shrunk(("k", "mismatch", "output"), dict(_row("window", index=1), phase="minimal",
                                               bucket_symptom=("mismatch", "output")))
    b.deferred[("k", "mismatch", "lse")].append(_row("window", symptom="lse", symptoms=lse, index=2))
    kept = b.leftovers()
    assert len(kept) == 1 and len(b.buckets) == 2


def test_a_second_bugs_bucket_says_how_many_rows_show_it():
    """Rows with a NaN and a mismatch count in the NaN bucket (their main symptom); the mismatch's own bucket, made by a
    shrink toward it, counts none of them and says that they show it (an H100 FA4 campaign listed such a bucket with
    count 0: campaigns/jit-untold-fa4-cold-warm-h100-2026-11-27.md)."""
    from reports.build import bucket_table

    nan = {"verdict": "nan", "symptom": "output-nan", "message": ""}
    off = {"verdict": "mismatch", "symptom": "output", "message": ""}
    both = [_row("paged", verdict="nan", symptom="output-nan", symptoms=[nan, off], index=i) for i in (1, 2, 3)]
    minimals = [dict(_row("paged", verdict="nan", symptom="output-nan", symptoms=[nan], index=1), phase="minimal",
                     bucket_symptom=["nan", "output-nan"], case_file="n.json"),
                dict(_row("paged", symptoms=[off], index=2), phase="minimal", bucket_symptom=["mismatch", "output"],
                     case_file="m.json")]
    lines = {line["verdict"]: line for line in bucket_table([*minimals, *both])}
    assert (lines["nan"]["count"], lines["nan"]["showing"]) == (3, 3) and lines["nan"]["counted"] == "3"
    assert (lines["mismatch"]["count"], lines["mismatch"]["showing"]) == (0, 3)
    assert lines["mismatch"]["counted"] == "0 (shown by 3)"
    from pathlib import Path

    from cli.summary import summary_lines

    printed = "\n".join(summary_lines([*minimals, *both], Path("out"), 1))
    assert "mismatch/output [paged] x0 (shown by 3)" in printed and "nan/output-nan [paged] x3," in printed
