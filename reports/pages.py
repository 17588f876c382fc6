"""One page per saved minimal case: message, symptoms, replay command, repro script, metrics,
error heatmap beside the oracle's visibility mask, the worst row and elements, LSE, the case."""
from __future__ import annotations

import json
from pathlib import Path

from .figures import failure_figures, lse_table, worst_elements

METRICS = ("max_err", "limit", "mean_err", "mean_limit", "baseline_max_err", "max_rel_err", "rmse", "cosine",
           "nan_count", "inf_count", "lse_max_err", "lse_limit", "worst_seq", "worst_token", "worst_head",
           "worst_dim", "known_issue", "bucket", "note")


def _flatten(d, prefix="") -> list[tuple[str, str]]:
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out += _flatten(v, key + ".")
        else:
            out.append((key, json.dumps(v) if not isinstance(v, str) else v))
    return out


def _case(payload: dict):
    from reference.case import Case, CaseError

    try:
        return Case.from_dict(payload.get("case", {}))
    except (CaseError, TypeError, ValueError, AttributeError):
        return None  # a hand-edited or older case file: the page still shows its JSON


def _repro(case, backend: str | None) -> str:
    from .repro import ReproUnsupported, write_repro

    if case is None or not backend:
        return ""
    try:
        return write_repro(case, backend)
    except ReproUnsupported as e:
        return f"# no repro script: {e}"
    except Exception as e:  # a template's defect must not cost the report its other pages
        return f"# no repro script: the template failed ({type(e).__name__}: {e}); replay the case with attnref"


def _figures(tensors: dict, row: dict, case) -> dict[str, str]:
    """The page's figures; one matplotlib cannot draw leaves the page its tables and says why (the report is built
    whatever a kernel wrote into its output)."""
    try:
        return failure_figures(tensors, row, case)
    except Exception as e:  # noqa: BLE001 - any drawing failure
        return {"error": f"{type(e).__name__}: {e}"}


def case_pages(results: Path) -> list[dict]:
    """The page data of every case file in results/cases (tensors from its .pt, loaded weights-only)."""
    import torch

    pages = []
    for path in sorted((results / "cases").glob("*.json")) if (results / "cases").exists() else []:
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(payload, dict):
            continue
        row = payload.get("row", {}) or {}
        tensors = {}
        pt = path.with_suffix(".pt")
        if pt.exists():
            try:
                tensors = torch.load(pt, weights_only=True)
            except Exception:  # a torn or foreign file: the page says nothing about tensors
                tensors = {}
        case = _case(payload)
        pages.append(dict(
            id=path.stem, backend=payload.get("backend"), verdict=payload.get("verdict"),
            message=row.get("message", ""), contract=row.get("contract", ""), replay=payload.get("replay", ""),
            symptoms=row.get("symptoms") or [], sanitizer=payload.get("sanitizer") or {},
            case_fields=_flatten(payload.get("case", {})), case_json=json.dumps(payload.get("case", {}), indent=1),
            metrics={k: row[k] for k in METRICS if k in row},
            figures=_figures(tensors, row, case) if tensors else {},
            worst=worst_elements(tensors) if tensors else [], lse=lse_table(tensors) if tensors else [],
            repro=_repro(case, payload.get("backend")), traceback=row.get("traceback", "")))
    return pages
