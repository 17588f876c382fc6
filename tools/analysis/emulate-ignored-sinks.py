"""Does "the kernel ignores `sinks`" explain a backend's sinks rows? For each generated row with sinks (a sample),
the oracle with the case's sinks is compared with the oracle without them: the model predicts a failure where the
two differ past the row's limit (output or LSE) or where only the sinks keep an LSE finite (a row with no keys).

Usage: python tools/analysis/emulate-ignored-sinks.py ROWS.jsonl [--backend B] [--sample N]
Prints (predicted, actual) counts; every row on the diagonal means the model explains the bucket (the 2026-11-24 10,000-example run:
400 of 400 sampled flashinfer-prefill-fa3 rows, the family of FlashInfer finding 1 of 2026-11-22).
"""
from __future__ import annotations

import argparse
import collections
import random
import sys
from dataclasses import replace

import torch

sys.path.insert(0, ".")
import reference as r  # noqa: E402
from campaign.store import read_jsonl  # noqa: E402


def predicted_failure(row: dict) -> bool:
    case = r.Case.from_dict(row["case"]) if isinstance(row["case"], dict) else r.Case.from_json(row["case"])
    inputs = r.materialize(case)
    with_sinks = r.attention(inputs)
    without = r.attention(replace(inputs, case=replace(case, sinks=None), sinks=None))
    out_diff = float((with_sinks.output - without.output).abs().max()) if with_sinks.output.numel() else 0.0
    a, b = with_sinks.lse, without.lse
    both = torch.isfinite(a) & torch.isfinite(b)
    lse_diff = float((a - b)[both].abs().max()) if bool(both.any()) else 0.0
    lse_lost = bool((torch.isfinite(a) & ~torch.isfinite(b)).any())
    return out_diff > row["limit"] or lse_lost or (row.get("lse_limit") or float("inf")) < lse_diff


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--backend", default="flashinfer-prefill-fa3")
    ap.add_argument("--sample", type=int, default=400)
    a = ap.parse_args()
    rows = [x for x in read_jsonl(a.rows) if x.get("phase") == "generate" and x["backend"] == a.backend
            and "sinks" in (x["features"] or "") and x["verdict"] in ("pass", "mismatch", "nan")]
    random.seed(0)
    counts = collections.Counter()
    for row in random.sample(rows, min(a.sample, len(rows))):
        counts[("fail" if predicted_failure(row) else "pass", "pass" if row["verdict"] == "pass" else "fail")] += 1
    print(f"{a.backend}: {sum(counts.values())} sinks rows, (predicted, actual): {dict(counts)}")


if __name__ == "__main__":
    main()
