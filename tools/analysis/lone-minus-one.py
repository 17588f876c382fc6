"""Do a backend's unexplained failures follow a lone -1 in the window it was passed?

flash-attn 2/3 read -1 as an unbounded window side, so (-1, 0) is causal. FA4 (flash_attn.cute, 4.0.0b36) resets
only a pair of negative sides to "no window" (interface.py, `_resolve_causal_local_window`). A lone -1 beside a
bounded side stays a bound: (-1, 0) lets a query see keys j >= i + 1 and j <= i, that is none (block_info.py,
mask.py). A case spelled with `unbounded_window=minus_one` whose window is bounded on one side only (a causal case
spelled as the window (left, 0), or a one-sided window) hands the kernel such a pair.

For each generated row this splits the backend's rows by whether `backends.spellings.window_pair` with a lone -1
allowed (the spelling as it was passed before FA4 declared pairs only) has exactly one -1, and counts the failing
rows the ledger does not explain in each group, by symptom.

Usage: python tools/analysis/lone-minus-one.py ROWS.jsonl [ROWS.jsonl ...] [--backend fa4-varlen]
"""
from __future__ import annotations

import argparse
import collections
import sys

sys.path.insert(0, ".")
from backends import spellings  # noqa: E402
from campaign.store import read_jsonl  # noqa: E402
from reference.case import Case  # noqa: E402

JUDGED = ("pass", "blind", "mismatch", "nan")


def lone_minus_one(case: Case) -> bool:
    left, right = spellings.window_pair(case)
    return (left == -1) != (right == -1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--backend", action="append", help="default: every backend in the rows")
    a = ap.parse_args()
    counts: collections.Counter[tuple] = collections.Counter()
    symptoms: collections.Counter[tuple] = collections.Counter()
    for path in a.rows:
        for row in read_jsonl(path):
            if row.get("phase") != "generate" or row.get("verdict") not in JUDGED:
                continue
            if a.backend and row["backend"] not in a.backend:
                continue
            lone = lone_minus_one(Case.from_json(row["case"]))
            failing = row["verdict"] in ("mismatch", "nan") and not row.get("known_issue")
            counts[row["backend"], lone, failing] += 1
            if failing:
                symptoms[row["backend"], lone, row.get("symptom")] += 1
    print("| backend | lone -1 | rows | failing, not in the ledger | share | symptoms |")
    print("|---|---|---|---|---|---|")
    for backend in sorted({k[0] for k in counts}):
        for lone in (True, False):
            rows = counts[backend, lone, True] + counts[backend, lone, False]
            if not rows:
                continue
            failing = counts[backend, lone, True]
            top = ", ".join(f"{s} {n:,}" for (b, l, s), n in symptoms.most_common() if b == backend and l == lone)
            print(f"| {backend} | {'yes' if lone else 'no'} | {rows:,} | {failing:,} | {100 * failing / rows:.1f} % |"
                  f" {top} |")


if __name__ == "__main__":
    main()
