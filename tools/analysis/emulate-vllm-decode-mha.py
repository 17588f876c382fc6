"""CPU model of vLLM 0.26.0's split-KV decode on its MHA path (kv_group_num == 1, `_fwd_kernel_stage1`).

The grouped path computes q.k with `tl.dot` (fp32 accumulation of exact products); the MHA path with
`tl.sum(q[None, :] * k, 1)`, whose products are bfloat16 / float16 multiplications: each q_d * k_d is rounded
to the model dtype before the sum. This tool recomputes a failing row's worst element three ways from the
same materialized inputs (16-bit caches only):
  exact   float64 scores (the oracle)
  product each product rounded to the dtype, summed in float32 (pairwise, as Triton reduces)
  both    each product and each partial sum rounded to the dtype
and prints which one the kernel's value is closest to.

  python3 tools/analysis/emulate-vllm-decode-mha.py rows.jsonl     (its vllm-triton-decode output mismatches)
"""
from __future__ import annotations

import sys

import torch

sys.path.insert(0, ".")

from campaign.store import read_jsonl  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402


def pairwise_sum(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum over the last dim by halving (a tree, as a warp reduction adds), rounding each level to `dtype`."""
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = torch.cat([x, torch.zeros_like(x[..., :1])], -1)
        x = (x[..., 0::2] + x[..., 1::2]).to(dtype).to(torch.float64)
    return x[..., 0]


def scores(q: torch.Tensor, k: torch.Tensor, how: str) -> torch.Tensor:
    """[keys] q.k for one head: q [D], k [n, D] in the model dtype."""
    if how == "exact":
        return k.double() @ q.double()
    products = (q[None, :] * k).double()  # torch multiplies bf16 x bf16 in fp32 and rounds to bf16: as Triton
    return pairwise_sum(products, torch.float32 if how == "product" else q.dtype)


def output(case: Case, inputs, seq: int, head: int, how: str) -> torch.Tensor:
    q = inputs.query[int(inputs.query_start_loc[seq]), head]
    k, v = inputs.keys[seq][:, head], inputs.values[seq][:, head].double()
    s = scores(q, k, how).float().double() * case.softmax_scale
    if case.soft_cap:
        s = case.soft_cap * torch.tanh(s / case.soft_cap)
    return torch.softmax(s, 0) @ v


def main() -> int:
    counts = {"exact": 0, "product": 0, "both": 0}
    for row in read_jsonl(sys.argv[1]):
        if row.get("backend") != "vllm-triton-decode" or row.get("symptom") != "output" or "worst_actual" not in row:
            continue
        case = Case.from_json(row["case"])
        if case.kv_cache_dtype.value != "auto" or case.num_heads != case.num_kv_heads:
            continue
        inputs = materialize(case)
        got = {how: float(output(case, inputs, row["worst_seq"], row["worst_head"], how)[row["worst_dim"]])
               for how in counts}
        actual = row["worst_actual"]
        best = min(got, key=lambda how: abs(got[how] - actual))
        counts[best] += 1
        print(f"kernel {actual:.5g}  " + "  ".join(f"{how} {val:.5g}" for how, val in got.items()) + f"  -> {best}")
    print("closest:", counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
