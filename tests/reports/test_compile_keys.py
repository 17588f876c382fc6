"""The report's compile-key table: when each JIT key was first built, and that a crashed first call built nothing."""
from __future__ import annotations

import math

import pandas as pd

from reports.compile_keys import built_over_time, compile_key_table, summary_lines


def _row(t, key, verdict="pass", first=False, deferred=False, backend="jit", phase="generate"):
    return dict(backend=backend, phase=phase, t=t, compile_key=key, verdict=verdict, first_of_key=first, deferred=deferred)


def test_a_key_is_built_by_its_first_call_that_did_not_crash():
    df = pd.DataFrame([
        _row(100.0, None, phase="replay"),  # the campaign's start: its first row
        _row(130.0, "a", first=True), _row(131.0, "a"), _row(200.0, "a", first=True, deferred=True),  # a second worker
        _row(140.0, "b", verdict="crash", first=True), _row(150.0, "b", verdict="mismatch"),
        _row(400.0, "c", first=True, deferred=True),
    ])
    table = compile_key_table(df).set_index("compile_key")
    assert table.loc["a", "built_s"] == 30.0 and table.loc["a", "examples"] == 3 and table.loc["a", "deferred"] == 1
    assert math.isnan(table.loc["b", "built_s"]) and table.loc["b", "failed"] == 2
    assert table.loc["c", "first_run_s"] == 300.0
    (keys,) = built_over_time(compile_key_table(df))
    assert keys["run"] == 3 and keys["built"] == 2
    assert keys["by"] == [(60, 1), (120, 1), (300.0, 2)]
    assert "| jit | 3 | 2 | 1 by 60 s, 1 by 120 s, 2 by 300 s |" in summary_lines(compile_key_table(df))


def test_rows_without_compile_keys_give_an_empty_table_and_no_section():
    df = pd.DataFrame([dict(backend="aot", phase="generate", t=1.0, verdict="pass")])
    assert compile_key_table(df).empty and summary_lines(compile_key_table(df)) == []
