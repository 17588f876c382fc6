"""Reports from a results directory: tables, JUnit XML, Markdown summary, static HTML diff report.

Everything here reads rows (rows.jsonl) and the saved failure tensors (cases/*.pt) exactly as the
campaign wrote them; nothing is recomputed. The HTML is self-contained (images inlined as base64
PNG, no network) and every value shown passes through Jinja's autoescaping.
"""
from __future__ import annotations

import math
from pathlib import Path
from xml.etree import ElementTree as ET

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape

from campaign.store import read_jsonl, read_rows
from .compile_keys import built_over_time, compile_key_table, summary_lines
from .coverage import FAILURES
VERDICTS = ("pass", "blind", "unsupported") + FAILURES


def frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col in ("backend", "verdict", "phase", "features", "dtype", "kv_cache_dtype", "case", "message"):
        if col not in df:
            df[col] = None
    return df


def load_rows(results: Path) -> pd.DataFrame:
    """All rows of rows.jsonl as a DataFrame."""
    return frame(read_rows(results))


def generated(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["phase"].fillna("generate") == "generate"]


def tolerance_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per backend x dtype x kv dtype: counts, pass rate, error-ratio percentiles and the worst ratio."""
    g = generated(df)
    if g.empty:
        return pd.DataFrame()
    if "error_ratio" not in g:
        g = g.assign(error_ratio=float("nan"))
    out = g.groupby(["backend", "dtype", "kv_cache_dtype"], dropna=False).agg(
        examples=("verdict", "size"),
        passed=("verdict", lambda v: int((v == "pass").sum())),
        blind=("verdict", lambda v: int((v == "blind").sum())),
        failed=("verdict", lambda v: int(v.isin(FAILURES).sum())),
        unsupported=("verdict", lambda v: int((v == "unsupported").sum())),
        ratio_p50=("error_ratio", lambda r: r.quantile(0.5)),
        ratio_p90=("error_ratio", lambda r: r.quantile(0.9)),
        ratio_p99=("error_ratio", lambda r: r.quantile(0.99)),
        worst_ratio=("error_ratio", "max"),
    ).reset_index()
    judged = (out["examples"] - out["unsupported"]).clip(lower=1)
    out["pass_rate"] = (out["passed"] / judged).round(4)
    return out


def failure_clusters(df: pd.DataFrame, top: int = 8) -> pd.DataFrame:
    """Case fields over-represented among failures: share among failures vs among all, per backend."""
    g = generated(df)
    out = []
    for backend, rows in g.groupby("backend"):
        failed = rows[rows["verdict"].isin(FAILURES)]
        if failed.empty:
            continue
        for col in ("features", "dtype", "kv_cache_dtype", "attn_type", "layout", "block_size", "head_size"):
            if col not in rows:
                continue
            values = rows[col].fillna("").astype(str)  # rows written before beats carried summaries lack them
            exploded = values.str.split(",") if col == "features" else values.map(lambda x: [x])
            all_counts = pd.Series([v for vs in exploded for v in vs if v]).value_counts()
            f_values = failed[col].fillna("").astype(str)
            f_exploded = f_values.str.split(",") if col == "features" else f_values.map(lambda x: [x])
            f_counts = pd.Series([v for vs in f_exploded for v in vs if v]).value_counts()
            for value, n in f_counts.items():
                share_f, share_all = n / len(failed), all_counts.get(value, 0) / len(rows)
                out.append(dict(backend=backend, field=col, value=value, failures=int(n),
                                share_in_failures=round(share_f, 3), share_in_all=round(share_all, 3),
                                lift=round(share_f / share_all, 2) if share_all else math.inf))
    if not out:
        return pd.DataFrame(columns=["backend", "field", "value", "failures", "share_in_failures", "share_in_all", "lift"])
    res = pd.DataFrame(out)
    res = res[res["lift"] > 1.2].sort_values(["backend", "lift", "failures"], ascending=[True, False, False])
    return res.groupby("backend").head(top)


def junit_xml(df: pd.DataFrame) -> str:
    """One testsuite per backend, one testcase per generated example (failures with their message)."""
    suites = ET.Element("testsuites", name="attnref")
    for backend, rows in generated(df).groupby("backend"):
        suite = ET.SubElement(suites, "testsuite", name=str(backend), tests=str(len(rows)),
                              failures=str(int(rows["verdict"].isin(FAILURES).sum())),
                              skipped=str(int(rows["verdict"].isin(["unsupported", "blind"]).sum())))
        for i, r in enumerate(rows.itertuples()):
            case = ET.SubElement(suite, "testcase", classname=str(backend), name=f"example-{i}-{r.features or 'plain'}")
            if r.verdict in FAILURES:
                ET.SubElement(case, "failure", type=str(r.verdict), message=str(r.message or "")[:500]).text = str(r.case)
            elif r.verdict in ("unsupported", "blind"):
                ET.SubElement(case, "skipped", message=f"{r.verdict}: {str(r.message or '')[:300]}")
    return ET.tostring(suites, encoding="unicode")


def load_probes(results: Path) -> list[dict]:
    """Convention-probe rows (`attnref probe --out DIR`), the last run of each backend and probe."""
    latest: dict[tuple[str, str], dict] = {}
    for row in read_jsonl(results / "probes.jsonl"):  # (a cut last line is skipped)
        latest[(row["backend"], row["probe"])] = row
    return [latest[k] for k in sorted(latest)]


def markdown_summary(df: pd.DataFrame, tol: pd.DataFrame, failures: list[dict], probes: list[dict] = (),
                     buckets: list[dict] = (), blind_spots: pd.DataFrame | None = None,
                     compile_keys: pd.DataFrame | None = None) -> str:
    lines = ["# attnref results", "", "| backend | examples | pass | blind | fail | unsupported |", "|---|---|---|---|---|---|"]
    for backend, rows in generated(df).groupby("backend"):
        v = rows["verdict"]
        lines.append(f"| {backend} | {len(rows)} | {(v == 'pass').sum()} | {(v == 'blind').sum()} | "
                     f"{v.isin(FAILURES).sum()} | {(v == 'unsupported').sum()} |")
    if buckets:
        lines += ["", f"## New failure buckets: {len(buckets)}", "",
                  "| bucket | backend | symptom | features | count | rows' other features | minimal case |",
                  "|---|---|---|---|---|---|---|"]
        replay = {f["id"]: f["replay"] for f in failures}
        lines += [f"| {b['id']} | {b['backend']} | {b['verdict']}/{b['symptom'][:60]} | {b['features']} | "
                  f"{b['counted']} | "
                  f"{b.get('others', '')} | "
                  f"{('`' + replay.get(b['page'], b['page']) + '`') if b['page'] else 'not shrunk'} |" for b in buckets]
    if blind_spots is not None and not blind_spots.empty:
        keys = blind_spots["dimension"] == "compile_key"  # counted per backend: a JIT backend declares hundreds
        lines += ["", f"## Declared but never drawn: {int((~keys).sum())} values, {int(keys.sum())} compile keys", ""]
        lines += [f"- {r.backend}: {r.dimension} = {r.value}" for r in blind_spots[~keys].itertuples()]
        lines += [f"- {backend}: {len(part)} declared compile keys never drawn (coverage.csv lists them)"
                  for backend, part in blind_spots[keys].groupby("backend", sort=True)]
    if compile_keys is not None:
        lines += summary_lines(compile_keys)
    off = [p for p in probes if p["verdict"] not in ("pass", "not_applicable")]
    if probes:
        lines += ["", f"## Convention probes: {len(probes) - len(off)} of {len(probes)} ran clean or did not apply", ""]
        lines += [f"- **{p['backend']}** `{p['probe']}` {p['verdict']}: {p.get('detail', '')[:160]}" for p in off]
    return "\n".join(lines) + "\n"


# --- the whole report ----------------------------------------------------------------------------

def bucket_table(rows: list[dict]) -> list[dict]:
    """One line per failure bucket (campaign.buckets.assign on the rows): count, first seen, minimal case."""
    import time

    from campaign.buckets import assign, count_text

    buckets, _ = assign(rows)
    out = []
    for b in sorted(buckets.values(), key=lambda b: (b.signature.backend, -b.count)):
        case_file = (b.minimal or {}).get("case_file")
        out.append(dict(id=b.id, backend=b.signature.backend, verdict=b.signature.verdict, symptom=b.signature.symptom,
                        features=",".join(sorted(b.signature.features)) or "plain", count=b.count, showing=b.showing,
                        counted=count_text(b.count, b.showing),
                        first_seen=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.first_seen)) if b.first_seen else "",
                        page=Path(case_file).stem if case_file else "", examples=", ".join(b.examples),
                        also=[Path(m["case_file"]).stem for m in b.merged if m.get("case_file")],
                        others=", ".join(f"{f} {n}" for f, n in b.others.most_common(6))))
    return out


def build_report(results: Path, out: Path | None = None) -> dict[str, Path]:
    """Write results.parquet/.csv, tolerance.csv, coverage.csv, compile_keys.csv, junit.xml, summary.md and
    report/index.html."""
    from .coverage import coverage_map, device_out, load_declarations, never_drawn
    from .figures import ratio_histograms
    from .pages import case_pages

    out = out or results / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows = read_rows(results)
    df = frame(rows)
    flat = df.drop(columns=[c for c in ("traceback", "worker_output", "symptoms") if c in df])
    flat.to_csv(results / "results.csv", index=False)
    try:
        flat.astype({c: str for c in flat.columns if flat[c].dtype == object}).to_parquet(results / "results.parquet")
    except ImportError:
        pass
    tol = tolerance_table(df)
    tol.to_csv(results / "tolerance.csv", index=False)
    declared = load_declarations(results)
    coverage = coverage_map(df, declared)
    coverage.to_csv(results / "coverage.csv", index=False)
    keys = compile_key_table(df)
    keys.to_csv(results / "compile_keys.csv", index=False)
    (results / "junit.xml").write_text(junit_xml(df))
    pages = case_pages(results)
    probes = load_probes(results)
    buckets = bucket_table(rows)
    (results / "summary.md").write_text(markdown_summary(df, tol, pages, probes, buckets, never_drawn(coverage), keys))

    env = Environment(loader=PackageLoader("reports", "templates"), autoescape=select_autoescape(default=True))
    clusters = failure_clusters(df)
    counts = generated(df).groupby("backend")["verdict"].value_counts().unstack(fill_value=0) if not df.empty else pd.DataFrame()
    g = generated(df)
    ratios = g[["backend", "error_ratio"]] if "error_ratio" in g else pd.DataFrame(columns=["backend", "error_ratio"])
    index = env.get_template("index.html").render(
        counts=counts.reset_index().to_dict("records") if not counts.empty else [],
        verdicts=[v for v in VERDICTS if v in counts.columns] if not counts.empty else [],
        tolerance=tol.to_dict("records"), tolerance_columns=list(tol.columns),
        coverage=_coverage_grid(coverage), device_out=device_out(declared), compile_keys=built_over_time(keys), buckets=buckets,
        clusters=clusters.to_dict("records"), histogram=ratio_histograms(ratios), failures=pages,
        probes=probes)
    (out / "index.html").write_text(index)
    for page in pages:
        (out / f"{page['id']}.html").write_text(env.get_template("failure.html").render(p=page))
    return {"index": out / "index.html", "csv": results / "results.csv"}


def _coverage_grid(coverage: pd.DataFrame) -> list[dict]:
    """Per backend and dimension, its values as 'value drawn/failed' cells (declared and never drawn: flagged;
    left out by the campaign's focus: marked apart)."""
    grid = []
    for (backend, dimension), part in coverage.groupby(["backend", "dimension"], sort=False):
        if dimension == "compile_key":  # one cell: how many of the declared keys were drawn (coverage.csv: each)
            focus = part[part["declared"] & part["in_focus"]]
            grid.append(dict(backend=backend, dimension=dimension, cells=[dict(
                value=f"{int((focus['drawn'] > 0).sum())} of {len(focus)} declared keys drawn",
                drawn=int(part["drawn"].sum()), failed=int(part["failed"].sum()), declared=True, in_focus=True)]))
            continue
        grid.append(dict(backend=backend, dimension=dimension,
                         cells=[dict(value=r.value, drawn=int(r.drawn), failed=int(r.failed), declared=bool(r.declared),
                                     in_focus=bool(r.in_focus))
                                for r in part.itertuples()]))
    return grid
