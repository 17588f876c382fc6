"""JIT compile keys over a campaign: which of a backend's compile keys (Backend.compiled_per / compiled_features)
were drawn, when each was first drawn and first built, how many examples ran on it and how many failed.

Read from the rows a campaign writes (`compile_key`, `first_of_key`, `deferred`, `t`); the campaign's start is its
first row. `compile_keys.csv` holds one row per (backend, key); the summary and the report show, per backend,
the keys built over time, so a campaign that compiles instead of evaluating shows it.
"""
from __future__ import annotations

import pandas as pd

from .coverage import FAILURES
COLUMNS = ["backend", "compile_key", "examples", "failed", "deferred", "first_run_s", "built_s"]


def compile_key_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (backend, compile key) of the generated rows: examples run on it, failed, deferred (waited for
    its build), seconds from the campaign's start to its first row and to its first build (a worker's first call of
    the key that did not crash; NaN: none)."""
    if df.empty or "compile_key" not in df or "t" not in df:
        return pd.DataFrame(columns=COLUMNS)
    start = df["t"].min()
    g = df[(df["phase"].fillna("generate") == "generate") & df["compile_key"].notna()]
    out = []
    for (backend, key), rows in g.groupby(["backend", "compile_key"], sort=True):
        first = (rows["first_of_key"].fillna(False).astype(bool) if "first_of_key" in rows
                 else pd.Series(False, index=rows.index))
        built = rows[first & (rows["verdict"] != "crash")]  # a first call that crashed built nothing
        deferred = int(rows["deferred"].fillna(False).astype(bool).sum()) if "deferred" in rows else 0
        out.append(dict(backend=backend, compile_key=key, examples=len(rows), failed=int(rows["verdict"].isin(FAILURES).sum()),
                        deferred=deferred, first_run_s=round(rows["t"].min() - start, 1),
                        built_s=round(built["t"].min() - start, 1) if not built.empty else float("nan")))
    return pd.DataFrame(out, columns=COLUMNS)


def built_over_time(table: pd.DataFrame, marks: tuple[float, ...] = (60, 120, 300, 600)) -> list[dict]:
    """Per backend: keys run, keys built, and keys built by each mark (seconds) the campaign reached."""
    out = []
    for backend, part in table.groupby("backend", sort=True):
        built = part["built_s"].dropna()
        last = max(part["first_run_s"].max(), built.max() if not built.empty else 0.0)
        by = [(m, int((built <= m).sum())) for m in marks if m < last] + [(last, len(built))]  # and at the end
        out.append(dict(backend=backend, run=len(part), built=len(built), by=by))
    return out


def summary_lines(table: pd.DataFrame) -> list[str]:
    """The summary's section: per JIT backend, keys run and built and when they were built."""
    rows = built_over_time(table)
    if not rows:
        return []
    lines = ["", "## JIT compile keys (built by: seconds from the start)", "", "| backend | keys run | keys built | built by |",
             "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['run']} | {r['built']} | "
                     f"{', '.join(f'{n} by {s:.0f} s' for s, n in r['by'])} |")
    return lines
