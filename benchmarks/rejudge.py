"""Recorded kernel errors against the tolerance rule as it stands, on the CPU: for each failing output row of a
campaign's rows (rows.jsonl, whose rows carry their case) or of saved cases, the max / mean error the kernel made on
the device beside the limits recomputed here, with the baseline's probabilities plain and held as the backend declares
(Capabilities.fp8_probabilities; `--scale` tries a rounding a backend does not declare). The kernel is not run again:
its errors against the float64 oracle do not depend on the baseline.

    python benchmarks/rejudge.py --backend vllm-layer-flashinfer ROWS.jsonl [CASE.json ...] [--scale 1]

Prints one Markdown line per row and a summary by feature set. `limit (row)` is the limit the campaign computed; a
recomputed plain limit far from it says the row attended over codes its library wrote (fuzz.compare.attended_writes).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.registry import get  # noqa: E402
from fuzz.compare import oracle_and_baseline  # noqa: E402
from fuzz.tolerance import (baseline_dtype, finite_abs_max, limits, probability_rounding, rule_for,  # noqa: E402
                            soft_cap_shift)
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402


def judged_rows(paths: list[str], every: bool = False) -> list[dict]:
    """Output-mismatch rows (`every`: every row judged on its output: pass, blind and mismatch) with their case, of
    rows.jsonl files and saved case files."""
    out = []
    for path in paths:
        text = Path(path).read_text()
        if path.endswith(".json"):
            saved = json.loads(text)
            out.append({**saved["row"], "case": saved["case"], "source": Path(path).name})
            continue
        for line in text.splitlines():
            row = json.loads(line)
            judged = row.get("verdict") in ("pass", "blind") if every else False
            if (judged or row.get("verdict") == "mismatch" and row.get("symptom") == "output") and "case" in row:
                out.append({**row, "source": Path(path).name})
    return out


def limits_of(case: Case, rounding, tanh_error: float = 0.0) -> tuple[float, float, float]:
    """(max limit, mean limit, the baseline's max error) of `case` with the baseline's probabilities held as
    `rounding` says, and the soft-cap term of a tanh off by `tanh_error` (Capabilities.soft_cap_tanh_error)."""
    inputs = materialize(case, "cpu")
    expected, baseline, _ = oracle_and_baseline(inputs, baseline_dtype(case.dtype, case.kv_cache_dtype), True, rounding)
    seen = expected.num_visible.flatten() > 0
    exp_seen, base_seen = expected.output.flatten(0, 1)[seen], baseline.output.double().flatten(0, 1)[seen]
    spread = 0.0 if expected.logit_spread is None else float(expected.logit_spread)
    shift = soft_cap_shift(case, tanh_error, finite_abs_max(expected.lse))
    lim = limits(rule_for(case.dtype, case.kv_cache_dtype), exp_seen, base_seen, case.dtype.torch, expected.lse, spread,
                 shift)
    return lim.max_limit, lim.mean_limit, lim.baseline_max


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--scale", type=float, default=None, help="round P so although the backend does not declare it")
    ap.add_argument("--every", action="store_true", help="every row judged on its output, not only the failing ones")
    ap.add_argument("--only", default=None, help="rows whose features include this one")
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    declared, tanh_error = get(a.backend).caps.fp8_probabilities, get(a.backend).caps.soft_cap_tanh_error
    scale = a.scale if a.scale is not None else declared
    torch.set_num_threads(1)
    print(f"backend {a.backend}, declared fp8_probabilities {declared}, rejudged with {scale}\n")
    print("| source | features | max err | limit (row) | limit plain | limit rounded | mean err / rounded limit | "
          "max err / rounded baseline's | verdict now |")
    print("|---|---|---|---|---|---|---|---|---|")
    tally: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seen_cases = set()
    for row in judged_rows(a.paths, a.every):
        if a.only and a.only not in row["features"].split(","):
            continue
        key = json.dumps(row["case"], sort_keys=True)
        if key in seen_cases:  # a shrink repeats its rows' cases
            continue
        seen_cases.add(key)
        case = Case.from_dict(json.loads(row["case"]) if isinstance(row["case"], str) else row["case"])
        plain, _, _ = limits_of(case, None, tanh_error)
        rounded, mean_limit, base = limits_of(case, probability_rounding(case, scale), tanh_error)
        ok = row["max_err"] <= rounded and row["mean_err"] <= mean_limit
        tally[row["features"]]["pass" if ok else "mismatch"] += 1
        print(f"| {row['source']} | {row['features']} | {row['max_err']:.4g} | {row['limit']:.4g} | {plain:.4g} | "
              f"{rounded:.4g} | {row['mean_err']:.3g} / {mean_limit:.3g} | {row['max_err'] / base if base else float('inf'):.2f} | "
              f"{'pass' if ok else 'mismatch'} |")
    print("\n| features | distinct cases | pass now | mismatch now |\n|---|---|---|---|")
    for features, counts in sorted(tally.items()):
        print(f"| {features} | {sum(counts.values())} | {counts['pass']} | {counts['mismatch']} |")


if __name__ == "__main__":
    main()
