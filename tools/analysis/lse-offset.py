"""Run ON THE DEVICE: a saved case's LSE, kernel minus oracle, per sequence and head, beside the ALiBi
bias of the query's position (slope * q): a constant per-row shift leaves the output alone, so an offset
equal to slope * q is an LSE convention (the kernel's bias omits the query position), not a defect.
With ALiBi, each row's offset / slope says which position the kernel's bias leaves out.

  python3 tools/analysis/lse-offset.py CASE.json [CASE.json ...]
"""
from __future__ import annotations

import sys

import torch

sys.path.insert(0, ".")

from backends.registry import get  # noqa: E402
from cli.caseio import load_case_file  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402


def main() -> None:
    for path in sys.argv[1:]:
        case, meta = load_case_file(path)
        ev = evaluate(get(meta["backend"]), case)
        print(f"== {path}: {ev.row['verdict']} {ev.row.get('message', '')[:160]}")
        if ev.actual is None or ev.actual.lse is None:
            continue
        diff = (ev.actual.lse.double().cpu() - ev.expected.lse.cpu())  # [tokens, heads]
        slopes = torch.tensor(case.alibi.slopes, dtype=torch.float64) if case.alibi else torch.zeros(case.num_heads)
        start = 0
        for i, seq in enumerate(case.sequences):
            rows = slice(start, start + seq.query_len)
            start += seq.query_len
            if seq.query_len == 0:
                continue
            q_pos = case.query_offset(seq) + seq.query_len - 1  # the last query's position among the keys
            d = diff[rows][-1]
            print(f"  seq {i} (q at {q_pos} of {case.kv_lens[i]} keys): "
                  f"LSE diff per head {[round(x, 3) for x in d.tolist()]}")
            print(f"  {' ' * len(str(i))}       slope * q per head {[round(x, 3) for x in (slopes * q_pos).tolist()]}")
            if case.alibi:  # every row: the offset in units of the slope, beside the query's two positions
                per_row = (diff[rows] / slopes[None]).mean(-1)  # [rows]: one number if the offset is slope * t
                for j, t in enumerate(per_row.tolist()[:8]):
                    print(f"    row {j}: offset / slope = {t:.2f} (position among keys {case.query_offset(seq) + j}, "
                          f"among queries {j})")


if __name__ == "__main__":
    main()
