"""Reproducer (found by attnref's flex-compiled campaigns on the CPU, the 2026-11-23 compile-slice run, 2026-11-23; torch 2.13.0+cpu).

torch.compile(flex_attention, dynamic=True) on the CPU does not compile two common masks: inductor's C++
flex-attention template emits "error: 'cur_kvSplitSize7' was not declared in this scope".
  1. a document mask over packed sequences of unequal lengths (q_seq[q] == k_seq[k], the canonical flex
     example for varlen batches);
  2. a sliding window that compares positions gathered from a captured tensor with a Python int captured in
     a closure.
The same masks compile with dynamic=False (and the window as a 0-dim tensor compiles with dynamic=True), and
then match eager flex_attention.

    python repro/flex-compiled-cpu-dynamic.py    # one line per variant; exit 1 while the bug is there
"""
import re
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

D = 16
torch.manual_seed(0)


def document(q_lens, k_lens):
    q_seq = torch.cat([torch.full((n,), i) for i, n in enumerate(q_lens)])
    k_seq = torch.cat([torch.full((n,), i) for i, n in enumerate(k_lens)])
    return (lambda b, h, qi, ki: q_seq[qi] == k_seq[ki]), len(q_seq), len(k_seq)


def sliding(window, n=8):
    pos = torch.arange(n)

    def mask_mod(b, h, qi, ki):
        qp, kp = pos[qi], pos[ki]
        return (qp >= 0) & (qp - kp < window) & (kp - qp < window)
    return mask_mod, n, n


def attempt(label: str, mask, dynamic: bool) -> bool:
    mask_mod, n_q, n_k = mask
    q, k, v = torch.randn(1, 1, n_q, D), torch.randn(1, 1, n_k, D), torch.randn(1, 1, n_k, D)
    block_mask = create_block_mask(mask_mod, None, None, n_q, n_k, device="cpu")
    torch._dynamo.reset()
    label = f"{label:38} dynamic={dynamic!s:5}"
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
results = [attempt("document mask, lengths 6/17/17 over 5/9/20", document([6, 17, 17], [5, 9, 20]), True),
           attempt("document mask, lengths 6/17/17 over 5/9/20", document([6, 17, 17], [5, 9, 20]), False),
           attempt("document mask, lengths 8/8 over 8/8", document([8, 8], [8, 8]), True),
           attempt("sliding window, captured int 3", sliding(3), True),
           attempt("sliding window, captured 0-dim tensor 3", sliding(torch.tensor(3)), True),
           attempt("sliding window, captured int 3", sliding(3), False)]
sys.exit(0 if all(results) else 1)
