"""The coverage map: per backend, how often each declared value of each dimension was drawn, and failed.

Dimensions: features, argument encodings, size tiers, value classes, attention types, dtypes, kv-cache
dtypes and layouts. The declared values come from `declarations.json`, which a campaign writes at its
start (campaign/declarations.py); a declared value never drawn is a blind spot of the strategies,
shown as 0, never left out. Values the campaign's --limits focus left out are kept, marked `in_focus`
False: not drawn by choice, not a blind spot.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

FAILURES = ("mismatch", "nan", "contract", "crash", "timeout")


def load_declarations(results: Path) -> dict[str, dict[str, list[str]]]:
    path = Path(results) / "declarations.json"
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        return {}


def device_out(declared: dict) -> list[dict]:
    """Per backend, the documented values its device refuses (not drawn, not blind spots) and why."""
    return [dict(backend=b, values=", ".join(f"{dim} {v}" for dim, vs in d["_device_out"]["values"].items() for v in vs),
                 why=d["_device_out"]["why"]) for b, d in sorted(declared.items()) if "_device_out" in d]


def _values(df: pd.DataFrame, dimension: str) -> pd.Series:
    """Per generated row, the list of values it has in `dimension`."""
    if dimension in ("feature", "encoding"):
        column = "features" if dimension == "feature" else "encodings"
        if column not in df:
            return pd.Series([[] for _ in range(len(df))], index=df.index)
        return df[column].fillna("").astype(str).map(lambda s: [x for x in s.split(",") if x])
    if dimension not in df:
        return pd.Series([[] for _ in range(len(df))], index=df.index)
    return df[dimension].map(lambda v: [] if v is None or (isinstance(v, float) and pd.isna(v)) else [str(v)])


def coverage_map(df: pd.DataFrame, declared: dict[str, dict[str, list[str]]]) -> pd.DataFrame:
    """Rows (backend, dimension, value, declared, drawn, failed, share): every declared value, drawn or not,
    plus values drawn without being declared (which `not_supported_reasons` should have refused), and
    whether the campaign's focus included the value (`in_focus`)."""
    g = df[df["phase"].fillna("generate") == "generate"] if not df.empty else df
    out = []
    for backend in sorted(set(g["backend"].dropna()) | set(declared)) if not g.empty else sorted(declared):
        rows = g[g["backend"] == backend] if not g.empty else g
        failed = rows["verdict"].isin(FAILURES) if not rows.empty else pd.Series(dtype=bool)
        dims = declared.get(backend) or {}
        focused_out = dims.get("_focused_out", {})
        for dimension, values in dims.items():
            if dimension.startswith("_"):
                continue
            drawn = _values(rows, dimension) if not rows.empty else pd.Series(dtype=object)
            counts, fails = {}, {}
            for vs, bad in zip(drawn, failed):
                for v in vs:
                    counts[v] = counts.get(v, 0) + 1
                    fails[v] = fails.get(v, 0) + int(bad)
            for value in sorted(set(values) | set(counts)):
                out.append(dict(backend=backend, dimension=dimension, value=value, declared=value in values,
                                drawn=counts.get(value, 0), failed=fails.get(value, 0),
                                share=round(counts.get(value, 0) / max(len(rows), 1), 4),
                                in_focus=value not in focused_out.get(dimension, [])))
    return pd.DataFrame(out, columns=["backend", "dimension", "value", "declared", "drawn", "failed", "share", "in_focus"])


def never_drawn(cov: pd.DataFrame) -> pd.DataFrame:
    """Declared values in the campaign's focus that no example drew: the strategies' blind spots."""
    if cov.empty:
        return cov
    return cov[cov["declared"] & cov["in_focus"] & (cov["drawn"] == 0)]
