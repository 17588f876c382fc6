"""vLLM 0.26.0: the decode-context-parallel combine fails to compile for head sizes that are not powers of two.

`v1/attention/ops/common.correct_attn_out` (used by `cp_lse_ag_out_rs` / `cp_lse_ag_out_ar`, the DCP combine
of FLASH_ATTN's `_forward_with_dcp`, FlashInfer's DCP paths and MLA) launches `_correct_attn_cp_out_kernel`
with `HEAD_DIM` = the head size as a constexpr and loads `tl.arange(0, HEAD_DIM)`; Triton's arange needs a
power of two, so head sizes 80, 96, 192, ... (which FA3 serves) raise a CompilationError at the first decode
that has a context to combine. `dcp_a2a_lse_reduce` (the a2a backend) has the same `tl.arange(0, HEAD_DIM)`.
`AttentionImpl.supports_dcp` is True by default and no check ties DCP to the head size.

The script combines two simulated ranks' partial states (random outputs and LSEs) as the all-gather +
all-reduce path does, for head sizes 64, 128 (controls) and 96, 192, and compares with a float32 LSE merge.
Run on a CUDA machine with vllm 0.26.0: exits 1 while a head size FA3 serves cannot be combined (or a
combined output is wrong), 0 once every one is.
(attnref, 2026-11-24; found by the vllm-fa3-cp backend: 7,508 crash rows, all at heads 96 / 192.)
"""
import sys

import torch
from vllm.v1.attention.ops.common import CPTritonContext, correct_attn_out

dev = torch.device("cuda")
TOKENS, HEADS, RANKS = 3, 4, 2
failed = False
for d in (64, 128, 96, 192):
    gen = torch.Generator(device="cpu").manual_seed(d)
    outs = [torch.randn(TOKENS, HEADS, d, generator=gen).to(dev, torch.bfloat16) for _ in range(RANKS)]
    lses = (torch.randn(RANKS, TOKENS, HEADS, generator=gen) * 4).to(dev)
    weights = torch.softmax(lses, 0)  # each rank's share of the merged softmax
    want = sum(w[..., None] * o.float() for w, o in zip(weights, outs))
    try:
        got = sum(correct_attn_out(o.clone(), lses, r, CPTritonContext())[0].float() for r, o in enumerate(outs))
    except Exception as e:  # noqa: BLE001 - the finding is the exception
        print(f"head_size {d}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        failed = True
        continue
    err = float((got - want).abs().max())
    print(f"head_size {d}: combined, max error {err:.3g} vs a float32 LSE merge")
    failed |= err > 0.05
sys.exit(1 if failed else 0)
