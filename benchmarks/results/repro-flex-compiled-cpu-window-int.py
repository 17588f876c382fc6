"""Reproducer (found by attnref's flex-compiled campaigns on the CPU, session 8, 2026-11-23; torch 2.13.0+cpu).

torch.compile(flex_attention, dynamic=True) on the CPU does not compile when the mask_mod compares positions
gathered from a captured tensor with a Python int captured in a closure (a sliding window): inductor's C++
flex-attention template emits "error: 'cur_kvSplitSize7' was not declared in this scope". The same mask with
the window as a 0-dim tensor, or compiled with dynamic=False, compiles and matches eager flex_attention.

    python repro-flex-compiled-cpu-window-int.py      # prints one line per variant; exit 1 while the bug is there
"""
import re
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

N, D = 8, 16
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, N, D) for _ in range(3))
pos = torch.arange(N)  # logical positions (attnref packs several sequences; one suffices here)


def sliding(window):
    def mask_mod(b, h, qi, ki):
        qp, kp = pos[qi], pos[ki]
        return (qp >= 0) & (qp - kp < window) & (kp - qp < window)
    return mask_mod


def attempt(window, dynamic: bool) -> bool:
    block_mask = create_block_mask(sliding(window), None, None, N, N, device="cpu")
    torch._dynamo.reset()
    label = f"window={type(window).__name__:6} dynamic={dynamic!s:5}"
    try:
        out = torch.compile(flex_attention, dynamic=dynamic)(q, k, v, block_mask=block_mask)
    except Exception as e:  # noqa: BLE001 (the compile error is the finding)
        m = re.search(r"error: [^\n]*", str(e))
        print(f"{label} FAIL {type(e).__name__}: {m.group(0) if m else str(e).splitlines()[0]}")
        return False
    err = float((out - flex_attention(q, k, v, block_mask=block_mask)).abs().max())
    print(f"{label} OK   max |compiled - eager| = {err:.2e}")
    return True


print("torch", torch.__version__)
results = [attempt(3, True), attempt(torch.tensor(3), True), attempt(3, False)]
sys.exit(0 if all(results) else 1)
