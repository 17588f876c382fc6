"""FlashInfer 0.7.2: ALiBi together with a logits soft-cap scales the scores by sm_scale twice.

`DefaultAttention` (include/flashinfer/attention/variants.cuh), the variant of the fa2 / CUDA-core decode and
prefill kernels, takes pos_encoding_mode="ALIBI" with logits_soft_cap > 0 as:
    x = s * sm_scale + slope * (kv_idx - qo_idx)       # the ALiBi branch scales the raw score once
    x = tanh(x * soft_cap_pre_tanh_scale)               # soft_cap_pre_tanh_scale = sm_scale / soft_cap: twice
    p = exp2(x * log2e * soft_cap)
so the logits are soft_cap * tanh((s * sm_scale + bias) * sm_scale / soft_cap) instead of
soft_cap * tanh(s * sm_scale / soft_cap) (+ the bias). Each option alone is right (the script checks both).

The script runs one decode (BatchDecodeWithPagedKVCacheWrapper) of one head over 33 keys with ALiBi (slope
2^-8, the one-head slope), soft-cap 30 and sm_scale 1/sqrt(128), and compares it with
  the plain formula       softmax(soft_cap * tanh(s * sm_scale / soft_cap) + slope * (k - q)) @ v
  the kernel's formula    softmax(soft_cap * tanh((s * sm_scale + slope * k) * sm_scale / soft_cap)) @ v
Run on a CUDA machine with flashinfer-python 0.7.2: exits 1 while the output follows the second formula
(or neither), 0 once it follows the first.
(attnref, 2026-11-24; found by flashinfer-decode in a bf16 / head 128 campaign: 1,408 rows of the
bucket `mismatch/output [alibi, paged, soft_cap]`; a CPU model of the formula, tools/emulate-flashinfer-alibi-
softcap.py, puts the kernel's worst element within 2 % of the model in all 2,672 failing rows, fp8 caches included.)
"""
import math
import sys

import flashinfer
import torch

dev = torch.device("cuda")
D, N, PAGE, CAP = 128, 33, 16, 30.0
SLOPE = 2.0 ** -8  # flashinfer.utils.get_alibi_slopes(1)
sm = 1 / math.sqrt(D)
gen = torch.Generator().manual_seed(0)
q = (torch.randn(1, 1, D, generator=gen) * 4).to(torch.bfloat16)
k = (torch.randn(N, 1, D, generator=gen) * 4).to(torch.bfloat16)
v = torch.randn(N, 1, D, generator=gen).to(torch.bfloat16)


def reference(soft_cap: float, alibi: bool, kernel_formula: bool) -> torch.Tensor:
    s = k[:, 0].double() @ q[0, 0].double()
    bias = SLOPE * (torch.arange(N, dtype=torch.float64) - (N - 1)) if alibi else torch.zeros(N, dtype=torch.float64)
    if kernel_formula:  # slope * (kv_idx - 0): a decode's qo_idx is 0
        x = s * sm + SLOPE * torch.arange(N, dtype=torch.float64)
        logits = soft_cap * torch.tanh(x * sm / soft_cap)
    elif soft_cap:
        logits = soft_cap * torch.tanh(s * sm / soft_cap) + bias
    else:
        logits = s * sm + bias
    return torch.softmax(logits, 0) @ v[:, 0].double()


def run(soft_cap: float, alibi: bool) -> torch.Tensor:
    pages = (N + PAGE - 1) // PAGE
    cache = torch.zeros(pages, 2, PAGE, 1, D, dtype=torch.bfloat16)  # NHD: [pages, 2, page, heads, dim]
    for i in range(N):
        cache[i // PAGE, 0, i % PAGE], cache[i // PAGE, 1, i % PAGE] = k[i], v[i]
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device=dev), "NHD")
    wrapper.plan(torch.tensor([0, pages], dtype=torch.int32, device=dev), torch.arange(pages, dtype=torch.int32, device=dev),
                 torch.tensor([N - (pages - 1) * PAGE], dtype=torch.int32, device=dev), 1, 1, D, PAGE,
                 pos_encoding_mode="ALIBI" if alibi else "NONE", logits_soft_cap=soft_cap or None, sm_scale=sm,
                 q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    return wrapper.run(q.to(dev), cache.to(dev))[0, 0].double().cpu()


failed = False
for soft_cap, alibi in ((CAP, False), (0.0, True), (CAP, True)):
    out = run(soft_cap, alibi)
    plain = float((out - reference(soft_cap, alibi, False)).abs().max())
    line = f"soft_cap={soft_cap:g} alibi={alibi}: max |kernel - plain formula| = {plain:.4f}"
    if soft_cap and alibi:
        line += f", max |kernel - double-scaled formula| = {float((out - reference(soft_cap, alibi, True)).abs().max()):.4f}"
    print(line)
    failed |= plain > 0.03  # bf16 output rounding of values near 1 is about 0.004
sys.exit(1 if failed else 0)
