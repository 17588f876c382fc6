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
inputs, and the tool prints whether the kernel's value is the model's.

  python3 tools/analysis/emulate-flashinfer-alibi-softcap.py CASE.json|rows.jsonl [...]
"""
from __future__ import annotations

import sys

import torch

sys.path.insert(0, ".")

from campaign.store import read_jsonl  # noqa: E402
from cli.caseio import load_case_file  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.attention import sequence_kv  # noqa: E402
from reference.inputs import materialize  # noqa: E402


def logits(case, q, k, slope: float, q_index: int, q_pos: int, flashinfer: bool, k_scale: float = 1.0):
    """[keys] float64 logits of one query row against its sequence's keys (causal: every key up to q_pos).
    `sinks` are left out (FlashInfer's fa2 paths ignore them: finding 1 of 2026-11-22). With an fp8 cache the
    wrapper folds k_scale into sm_scale (`sm_scale *= k_scale`), so the second scaling carries it too."""
    s = k.double() @ q.double()  # raw q.k
    kv = torch.arange(k.shape[0], dtype=torch.float64)
    cap, sm = case.soft_cap, case.softmax_scale
    if flashinfer:
        x = s * sm + slope * (kv - q_index)
        return cap * torch.tanh(x * sm * k_scale / cap)
    return cap * torch.tanh(s * sm / cap) + slope * (kv - q_pos)


def row_output(case, inputs, seq: int, i: int, head: int, flashinfer: bool):
    spec = case.sequences[seq]
    q_pos = case.query_offset(spec) + i
    kv_head = head // (case.num_heads // case.num_kv_heads)
    keys, values = sequence_kv(inputs, seq, torch.float64)  # the cache as the kernel reads it (dequantized)
    k, v = keys[: q_pos + 1, kv_head], values[: q_pos + 1, kv_head]
    q = inputs.query[int(inputs.query_start_loc[seq]) + i, head]
    k_scale = float(case.cache.quant.k_scales[0]) if case.kv_cache_dtype.is_fp8 else 1.0
    x = logits(case, q, k, case.alibi.slopes[head], i, q_pos, flashinfer, k_scale)
    if case.sliding_window is not None:  # vLLM's W: the last W keys, the query's own included
        x[: max(0, q_pos + 1 - case.sliding_window)] = float("-inf")
    return torch.softmax(x, 0) @ v


def _items(paths: list[str]):
    """(name, case, row) of each saved case, and of each ALiBi + soft-cap output mismatch of a rows.jsonl."""
    for path in paths:
        if path.endswith(".jsonl"):
            for n, row in enumerate(read_jsonl(path)):
                features = set((row.get("features") or "").split(","))
                if row.get("symptom") == "output" and {"alibi", "soft_cap"} <= features and "worst_actual" in row:
                    yield f"{path} row {n + 1}", Case.from_json(row["case"]), row
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
        ok = abs(model - actual) <= 0.02 * max(1.0, abs(actual))  # bf16 output rounding and fp32 sums: 2 %
        matched, total = matched + ok, total + 1
        print(f"{name}: kernel {actual:.5g}, FlashInfer model {model:.5g}, oracle without sinks {oracle:.5g} "
              f"(recorded expected {row['worst_expected']:.5g}) -> {'model' if ok else 'not the model'}")
    print(f"{matched} of {total} worst elements within 2 % of the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
