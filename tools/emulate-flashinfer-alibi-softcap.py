"""CPU model of FlashInfer 0.7.2's logits transform when ALiBi and a logits soft-cap are both on.

`DefaultAttention` (include/flashinfer/attention/variants.cuh) computes, for pos_encoding_mode="ALIBI" with
logits_soft_cap > 0:
    x = s * sm_scale + slope * (kv_idx - qo_idx)            # ALiBi branch (sm_scale_log2 = log2e there)
    x = tanh(x * soft_cap_pre_tanh_scale)                    # soft_cap_pre_tanh_scale = sm_scale / soft_cap
    p ~ exp2(x * sm_scale_log2),  sm_scale_log2 = log2e * soft_cap
so the scores are scaled by sm_scale twice and the bias once more by sm_scale / soft_cap; qo_idx is the query's
index among its sequence's new tokens (0 for decode), not its position among the keys. The oracle (and vLLM's
kernels) compute soft_cap * tanh(s * sm_scale / soft_cap) + slope * (k_pos - q_pos).

Reads saved cases, or a campaign's rows.jsonl (its output mismatches with ALiBi and soft-cap): a failing row
records the kernel's worst element; the output is recomputed both ways in float64 from the same materialized
inputs, and the tool prints which one the kernel's value matches.

  python3 tools/emulate-flashinfer-alibi-softcap.py CASE.json|rows.jsonl [...]
"""
from __future__ import annotations

import json
import sys

import torch

sys.path.insert(0, ".")

from cli.caseio import load_case_file  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402


def logits(case, q, k, slope: float, q_index: int, q_pos: int, flashinfer: bool):
    """[keys] float64 logits of one query row against its sequence's keys (causal: every key up to q_pos).
    Models the 16-bit cache only: an fp8 cache's dequantization and `sinks` (which FlashInfer's fa2 paths
    ignore, finding 1 of 2026-11-22) are left out, so rows with either are not explained here."""
    s = (k.double() @ q.double())  # raw q.k
    kv = torch.arange(k.shape[0], dtype=torch.float64)
    cap, sm = case.soft_cap, case.softmax_scale
    if flashinfer:
        x = s * sm + slope * (kv - q_index)
        return cap * torch.tanh(x * sm / cap)
    return cap * torch.tanh(s * sm / cap) + slope * (kv - q_pos)


def row_output(case, inputs, seq: int, i: int, head: int, flashinfer: bool):
    spec = case.sequences[seq]
    q_pos = case.query_offset(spec) + i
    kv_head = head // (case.num_heads // case.num_kv_heads)
    k = inputs.keys[seq][: q_pos + 1, kv_head]
    v = inputs.values[seq][: q_pos + 1, kv_head].double()
    q = inputs.query[int(inputs.query_start_loc[seq]) + i, head]
    x = logits(case, q, k, case.alibi.slopes[head], i, q_pos, flashinfer)
    if case.sliding_window is not None:  # vLLM's W: the last W keys, the query's own included
        x[: max(0, q_pos + 1 - case.sliding_window)] = float("-inf")
    return torch.softmax(x, 0) @ v


def _items(paths: list[str]):
    """(name, case, row) of each saved case, and of each ALiBi + soft-cap output mismatch of a rows.jsonl."""
    for path in paths:
        if path.endswith(".jsonl"):
            for n, line in enumerate(open(path)):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line
                features = set((row.get("features") or "").split(","))
                if row.get("symptom") == "output" and {"alibi", "soft_cap"} <= features and "worst_actual" in row:
                    yield f"{path}:{n + 1}", Case.from_json(row["case"]), row
        else:
            case, meta = load_case_file(path)
            yield path, case, meta.get("row", {})


def main() -> int:
    matched = total = 0
    for name, case, row in _items(sys.argv[1:]):
        seq, token, head, dim = row["worst_seq"], row["worst_token"], row["worst_head"], row["worst_dim"]
        inputs = materialize(case)
        oracle = float(row_output(case, inputs, seq, token, head, False)[dim])
        model = float(row_output(case, inputs, seq, token, head, True)[dim])
        actual = row["worst_actual"]
        ok = abs(model - actual) < abs(oracle - actual)
        matched, total = matched + ok, total + 1
        print(f"{name}: kernel {actual:.5g}, FlashInfer model {model:.5g}, oracle {oracle:.5g} "
              f"(recorded expected {row['worst_expected']:.5g}) -> {'model' if ok else 'oracle'}")
    print(f"{matched} of {total} worst elements closer to the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
