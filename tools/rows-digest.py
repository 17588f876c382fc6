"""Every generated / minimal row of a campaign folder, digested to what the reach and bucket analyses read
(backend, verdict, symptoms, features, encodings, bucket; the case and message of failures only), one JSON
line each on stdout: a GPU campaign's rows come back from the device in a few MB.

    python3 tools/rows-digest.py RESULTS_DIR | xz > rows.jsonl.xz
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from campaign.store import read_rows  # noqa: E402

KEEP = ("backend", "phase", "verdict", "symptom", "symptoms", "features", "encodings", "bucket", "bucket_symptom",
        "example_id", "t", "tier", "max_kv_len", "known_issue", "case_file", "merged_into", "kernel_s", "first_call_s",
        # the shape of every row, passing ones too: a failure family's share of its shape (one head, dtype, ...) is
        # what tells a kernel path from a tolerance
        "dtype", "kv_cache_dtype", "attn_type", "num_heads", "num_kv_heads", "head_size", "max_query_len")


def main(folder: str) -> None:
    for row in read_rows(Path(folder)):
        if row.get("phase") not in ("generate", "minimal", "replay"):
            continue
        out = {k: row[k] for k in KEEP if k in row}
        if row.get("verdict") not in ("pass", "blind", "unsupported"):
            out.update(case=row.get("case"), message=(row.get("message") or "")[:400])
        print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
