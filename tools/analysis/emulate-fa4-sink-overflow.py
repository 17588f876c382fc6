"""Does "FA4's sink term overflows float32" explain a backend's sinks rows with an infinite LSE?

FA4 folds a learnable sink into its softmax statistics at the end of the key loop: row_sum += exp2((sink - m) *
log2 e), m being the row's largest visible score (flash_attn/cute/softmax.py, `finalize` and
`apply_learnable_sink`). The running max never takes the sink in, so a sink more than 128 ln 2 = 88.72 above
every score of a row overflows float32: row_sum = inf, the output is scaled to 0 (right to within e^-88) and the
LSE comes out +inf where the answer is about the sink's logit. Empty rows are handled apart (LSE = sink) and
are not predicted to fail.

For each generated row with sinks, `fuzz.ledger.largest_sink_excess` (the ledger's predicate for this finding) takes
every (token, head)'s largest visible score in float64 and the model predicts an infinite LSE where sink - max >
88.72 (within `--band` of the threshold: "edge", where the kernel's bf16 scores and fast exp2 decide).
The 2026-11-24 FA4 / flex / xformers run (H100, flash-attn-4 4.0.0b36): 481 of 481 failing rows predicted, 4,833 passes predicted finite, 1 edge.

Usage: python tools/analysis/emulate-fa4-sink-overflow.py ROWS.jsonl [ROWS.jsonl ...] [--backend B] [--sample N]
"""
from __future__ import annotations

import argparse
import collections
import random
import sys

sys.path.insert(0, ".")
import reference as r  # noqa: E402
from campaign.store import read_jsonl  # noqa: E402
from fuzz.ledger import SINK_OVERFLOW, largest_sink_excess  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--backend", default=None, help="only this backend's rows (default: every backend)")
    ap.add_argument("--sample", type=int, default=0, help="rows in all, at random (default: every row)")
    ap.add_argument("--band", type=float, default=0.5, help="|excess - 88.72| below this is 'edge'")
    a = ap.parse_args()
    rows = [x for f in a.rows for x in read_jsonl(f)
            if x.get("phase") == "generate" and "sinks" in (x["features"] or "")
            and x["verdict"] in ("pass", "mismatch", "nan") and a.backend in (None, x["backend"])]
    random.seed(0)
    if a.sample:
        rows = random.sample(rows, min(a.sample, len(rows)))
    counts: collections.Counter = collections.Counter()
    for row in rows:
        case = r.Case.from_dict(row["case"]) if isinstance(row["case"], dict) else r.Case.from_json(row["case"])
        excess = largest_sink_excess(case)
        model = "edge" if abs(excess - SINK_OVERFLOW) < a.band else ("inf" if excess > SINK_OVERFLOW else "finite")
        actual = row["verdict"] if row["verdict"] != "nan" else row.get("symptom") or "nan"
        counts[(row["backend"], model, actual)] += 1
    for (backend, model, actual), n in sorted(counts.items()):
        print(f"{backend:12s} model={model:6s} actual={actual:10s} {n}")


if __name__ == "__main__":
    main()
