"""Reports from a results directory: tables, JUnit XML, Markdown summary, static HTML diff report.

Everything here reads rows (rows.jsonl) and the saved failure tensors (cases/*.pt) exactly as the
campaign wrote them; nothing is recomputed. The HTML is self-contained (images inlined as base64
PNG, no network) and every value shown passes through Jinja's autoescaping.
"""
from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path
from xml.etree import ElementTree as ET

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape

FAILURES = ("mismatch", "nan", "contract", "crash", "timeout")
VERDICTS = ("pass", "blind", "unsupported") + FAILURES


def load_rows(results: Path) -> pd.DataFrame:
    """All rows of rows.jsonl as a DataFrame (generation-phase rows unless `phase` says otherwise)."""
    lines = (results / "rows.jsonl").read_text().splitlines() if (results / "rows.jsonl").exists() else []
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    df = pd.DataFrame(rows)
    for col in ("backend", "verdict", "phase", "features", "dtype", "kv_cache_dtype", "case", "message"):
        if col not in df:
            df[col] = None
    return df


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


def feature_matrix(df: pd.DataFrame) -> pd.DataFrame:
    """Backend x feature verdict counts ('pass/fail/unsupported/blind' per cell)."""
    g = generated(df).copy()
    if g.empty:
        return pd.DataFrame()
    g["feature"] = g["features"].fillna("").map(lambda s: [f for f in s.split(",") if f] or ["(plain)"])
    g = g.explode("feature")
    g["bucket"] = g["verdict"].map(lambda v: "fail" if v in FAILURES else v)
    return g.pivot_table(index=["backend", "feature"], columns="bucket", values="case", aggfunc="count",
                         fill_value=0).reset_index()


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
            values = rows[col].astype(str)
            exploded = values.str.split(",") if col == "features" else values.map(lambda x: [x])
            all_counts = pd.Series([v for vs in exploded for v in vs if v]).value_counts()
            f_values = failed[col].astype(str)
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
    path = results / "probes.jsonl"
    if not path.exists():
        return []
    latest: dict[tuple[str, str], dict] = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a cut last line
        latest[(row["backend"], row["probe"])] = row
    return [latest[k] for k in sorted(latest)]


def markdown_summary(df: pd.DataFrame, tol: pd.DataFrame, failures: list[dict], probes: list[dict] = ()) -> str:
    lines = ["# attnref results", "", "| backend | examples | pass | blind | fail | unsupported |", "|---|---|---|---|---|---|"]
    for backend, rows in generated(df).groupby("backend"):
        v = rows["verdict"]
        lines.append(f"| {backend} | {len(rows)} | {(v == 'pass').sum()} | {(v == 'blind').sum()} | "
                     f"{v.isin(FAILURES).sum()} | {(v == 'unsupported').sum()} |")
    if failures:
        lines += ["", "## Minimal failing cases", ""]
        for f in failures:
            lines.append(f"- **{f['backend']}** `{f['verdict']}`: {f['message']}  \n  replay: `{f['replay']}`")
    off = [p for p in probes if p["verdict"] not in ("pass", "not_applicable")]
    if probes:
        lines += ["", f"## Convention probes: {len(probes) - len(off)} of {len(probes)} ran clean or did not apply", ""]
        lines += [f"- **{p['backend']}** `{p['probe']}` {p['verdict']}: {p.get('detail', '')[:160]}" for p in off]
    return "\n".join(lines) + "\n"


# --- figures -------------------------------------------------------------------------------------

def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def ratio_histogram(df: pd.DataFrame) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = generated(df)
    if "error_ratio" not in g or g["error_ratio"].dropna().empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 3))
    for backend, rows in g.groupby("backend"):
        r = rows["error_ratio"].dropna()
        r = r[(r > 0) & (r < 1e6)]
        if len(r):
            ax.hist(r.clip(lower=1e-4), bins=[10 ** (x / 4) for x in range(-16, 25)], histtype="step", label=str(backend))
    ax.set_xscale("log")
    ax.axvline(1.0, color="red", linestyle="--", linewidth=1)
    ax.set_xlabel("max error / tolerance limit (fails right of the red line)")
    ax.set_ylabel("examples")
    ax.legend(fontsize=6)
    return _png(fig)


def failure_figures(tensors: dict, row: dict) -> dict[str, str]:
    """Heatmaps of |actual - expected| (tokens x heads) per sequence and the worst row's profile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    out = {}
    exp, act = tensors.get("expected_output"), tensors.get("actual_output")
    if exp is None or act is None or tuple(exp.shape) != tuple(act.shape) or exp.numel() == 0:
        return out
    err = (act.double() - exp.double()).abs().amax(-1)  # [tokens, heads]
    err = torch.nan_to_num(err, nan=float("inf"))
    finite_max = float(err[torch.isfinite(err)].max()) if torch.isfinite(err).any() else 1.0
    shown = torch.where(torch.isfinite(err), err, torch.full_like(err, finite_max * 1.5 + 1e-12))
    starts = tensors["query_start_loc"].tolist()
    n = max(1, len(starts) - 1)
    fig, axes = plt.subplots(1, n, figsize=(min(3 * n, 14), 3), squeeze=False)
    for i in range(n):
        a, b = starts[i], starts[i + 1]
        ax = axes[0][i]
        if b > a:
            im = ax.imshow(shown[a:b].T.numpy(), aspect="auto", cmap="magma", interpolation="nearest")
            fig.colorbar(im, ax=ax, fraction=0.05)
        ax.set_title(f"seq {i}", fontsize=8)
        ax.set_xlabel("token")
        ax.set_ylabel("head")
    out["heatmap"] = _png(fig)
    t, h = row.get("worst_token_flat"), row.get("worst_head")
    if t is not None and h is not None and not (isinstance(t, float) and math.isnan(t)):
        fig, ax = plt.subplots(figsize=(7, 2.5))
        ax.plot(exp[int(t), int(h)].double().numpy(), label="expected (float64 oracle)")
        ax.plot(act[int(t), int(h)].double().numpy(), label="actual", linestyle="--")
        ax.set_xlabel("dim")
        ax.set_title(f"worst row: token {int(t)}, head {int(h)}", fontsize=8)
        ax.legend(fontsize=7)
        out["worst_row"] = _png(fig)
    return out


def worst_elements(tensors: dict, k: int = 10) -> list[dict]:
    import torch

    exp, act = tensors.get("expected_output"), tensors.get("actual_output")
    if exp is None or act is None or tuple(exp.shape) != tuple(act.shape) or exp.numel() == 0:
        return []
    d = torch.nan_to_num((act.double() - exp.double()).abs(), nan=float("inf"))
    vals, idx = d.flatten().topk(min(k, d.numel()))
    H, D = exp.shape[1], exp.shape[2]
    return [dict(token=int(i) // (H * D), head=(int(i) // D) % H, dim=int(i) % D, expected=float(exp.flatten()[i]),
                 actual=float(act.flatten()[i]), abs_err=float(v)) for v, i in zip(vals, idx)]


def lse_table(tensors: dict, k: int = 8) -> list[dict]:
    import torch

    e, a = tensors.get("expected_lse"), tensors.get("actual_lse")
    if e is None or a is None or tuple(e.shape) != tuple(a.shape) or e.numel() == 0:
        return []
    d = torch.nan_to_num((a.double() - e.double()).abs(), nan=float("inf"), posinf=float("inf"))
    d = torch.where(torch.isneginf(e) & torch.isneginf(a), torch.zeros_like(d), d)
    vals, idx = d.flatten().topk(min(k, d.numel()))
    H = e.shape[1]
    return [dict(token=int(i) // H, head=int(i) % H, expected=float(e.flatten()[i]), actual=float(a.flatten()[i]),
                 abs_err=float(v)) for v, i in zip(vals, idx)]


# --- the whole report ----------------------------------------------------------------------------

def _failure_pages(results: Path) -> list[dict]:
    import torch

    pages = []
    for path in sorted((results / "cases").glob("*.json")) if (results / "cases").exists() else []:
        payload = json.loads(path.read_text())
        row = payload.get("row", {})
        tensors = {}
        pt = path.with_suffix(".pt")
        if pt.exists():
            tensors = torch.load(pt, weights_only=True)
        pages.append(dict(
            id=path.stem, backend=payload.get("backend"), verdict=payload.get("verdict"),
            message=row.get("message", ""), contract=row.get("contract", ""), replay=payload.get("replay", ""),
            case_fields=_flatten(payload.get("case", {})), case_json=json.dumps(payload.get("case", {}), indent=1),
            metrics={k: row[k] for k in ("max_err", "limit", "mean_err", "mean_limit", "baseline_max_err",
                                          "max_rel_err", "rmse", "cosine", "nan_count", "inf_count", "lse_max_err",
                                          "lse_limit", "worst_seq", "worst_token", "worst_head", "worst_dim",
                                          "known_issue") if k in row},
            figures=failure_figures(tensors, row) if tensors else {},
            worst=worst_elements(tensors) if tensors else [], lse=lse_table(tensors) if tensors else [],
            traceback=row.get("traceback", "")))
    return pages


def _flatten(d, prefix="") -> list[tuple[str, str]]:
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out += _flatten(v, key + ".")
        else:
            out.append((key, json.dumps(v) if not isinstance(v, str) else v))
    return out


def build_report(results: Path, out: Path | None = None) -> dict[str, Path]:
    """Write results.parquet/.csv, tolerance.csv, junit.xml, summary.md and report/index.html."""
    out = out or results / "report"
    out.mkdir(parents=True, exist_ok=True)
    df = load_rows(results)
    flat = df.drop(columns=[c for c in ("traceback", "worker_output") if c in df])
    flat.to_csv(results / "results.csv", index=False)
    try:
        flat.astype({c: str for c in flat.columns if flat[c].dtype == object}).to_parquet(results / "results.parquet")
    except ImportError:
        pass
    tol = tolerance_table(df)
    tol.to_csv(results / "tolerance.csv", index=False)
    (results / "junit.xml").write_text(junit_xml(df))
    pages = _failure_pages(results)
    probes = load_probes(results)
    (results / "summary.md").write_text(markdown_summary(df, tol, pages, probes))

    env = Environment(loader=PackageLoader("reports", "templates"), autoescape=select_autoescape(default=True))
    matrix = feature_matrix(df)
    clusters = failure_clusters(df)
    counts = generated(df).groupby("backend")["verdict"].value_counts().unstack(fill_value=0) if not df.empty else pd.DataFrame()
    index = env.get_template("index.html").render(
        counts=counts.reset_index().to_dict("records") if not counts.empty else [],
        verdicts=[v for v in VERDICTS if v in counts.columns] if not counts.empty else [],
        tolerance=tol.to_dict("records"), tolerance_columns=list(tol.columns),
        matrix=matrix.to_dict("records"), matrix_columns=list(matrix.columns),
        clusters=clusters.to_dict("records"), histogram=ratio_histogram(df), failures=pages,
        probes=probes)
    (out / "index.html").write_text(index)
    for page in pages:
        (out / f"{page['id']}.html").write_text(env.get_template("failure.html").render(p=page))
    return {"index": out / "index.html", "csv": results / "results.csv"}
