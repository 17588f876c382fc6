"""Reproducer (found by attnref's flex-paged-compiled-cuda campaign, H200, 2026-11-22; torch 2.11.0+cu130).

torch.compile(flex_attention, dynamic=True) over torch's PagedAttention helper fails to lower when the page (the
block mask's KV block) is smaller than the kernel's key tile: "Q and KV block size must be divisible by BLOCK_M and
BLOCK_N. We got Q_BLOCK_SIZE=128 and KV_BLOCK_SIZE=16". Eager flex_attention takes the same block mask.
One decode batch (3 sequences, GQA 3:1, head 16, bf16, return_lse, as the campaign's case) per page size, compiled
with dynamic shapes (as attnref's adapter compiles it) and without; each compiled result is compared with eager
flex_attention and with a dense float64 softmax over the sequence's keys. (Head 64 with a static compile lowers at
every page size on an H100, torch 2.11.0+cu130.)

    python flex-paged-compiled-block-size.py    # one line per page size and compile; exit 1 while one fails
"""
import sys

import torch
from torch.nn.attention.experimental._paged_attention import PagedAttention
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

DEV, DT = "cuda", torch.bfloat16
H, H_KV, D = 3, 1, 16
KV_LENS = [1, 37, 130]  # keys per sequence (the case: one key); each decodes one query at its last position
torch.manual_seed(0)


def reference(q, k, v):
    """Softmax attention of one query [H, D] over every key [n, H_kv, D] of its sequence, in float64."""
    k, v = (x.double().repeat_interleave(H // H_KV, 1) for x in (k, v))
    p = torch.softmax(torch.einsum("hd,khd->hk", q.double(), k) / D ** 0.5, -1)
    return torch.einsum("hk,khd->hd", p, v)


def attempt(page: int, dynamic: bool) -> bool:
    batch, max_pages = len(KV_LENS), -(-max(KV_LENS) // page)
    num_pages = 1 + batch * max_pages  # page 0 stays unused
    keys = [torch.randn(n, H_KV, D, device=DEV, dtype=DT) for n in KV_LENS]
    values = [torch.randn(n, H_KV, D, device=DEV, dtype=DT) for n in KV_LENS]
    k_pool = torch.zeros(1, H_KV, num_pages * page, D, device=DEV, dtype=DT)
    v_pool = torch.zeros_like(k_pool)
    paged = PagedAttention(num_pages, page, batch, device=DEV)
    for b, n in enumerate(KV_LENS):
        pages = torch.arange(1 + b * max_pages, 1 + b * max_pages + -(-n // page), device=DEV)
        paged.page_table[b, : pages.numel()] = pages
        paged.physical_to_logical[b, pages] = torch.arange(pages.numel(), device=DEV)
        slots = (pages[:, None] * page + torch.arange(page, device=DEV)).flatten()[:n]
        k_pool[0, :, slots] = keys[b].transpose(0, 1)
        v_pool[0, :, slots] = values[b].transpose(0, 1)
    q = torch.randn(batch, H, 1, D, device=DEV, dtype=DT)
    kv_len = torch.tensor(KV_LENS, device=DEV)

    def mask_mod(b, h, qi, ki):
        return ki < kv_len[b]  # one query at the last position: every key of its sequence is visible

    logical = create_block_mask(mask_mod, batch, None, 1, max_pages * page, device=DEV, BLOCK_SIZE=(128, page))
    physical = paged.convert_logical_block_mask(logical, kv_len=kv_len)
    eager = flex_attention(q, k_pool, v_pool, block_mask=physical, enable_gqa=True)
    dense = torch.stack([reference(q[b, :, 0], keys[b], values[b]) for b in range(batch)])[:, :, None]
    label = f"page {page:4}, dynamic={dynamic!s:5}:"
    torch._dynamo.reset()
    try:
        compiled = torch.compile(flex_attention, dynamic=dynamic)(q, k_pool, v_pool, block_mask=physical,
                                                                  enable_gqa=True, return_lse=True)[0]
    except Exception as e:  # noqa: BLE001 (the lowering error is the finding)
        first = next((line for line in str(e).splitlines() if "divisible" in line), str(e).splitlines()[0])
        print(f"{label} FAIL {type(e).__name__}: {first.strip()[:200]}  (eager vs dense: "
              f"{float((eager.double() - dense).abs().max()):.2e})")
        return False
    err = float((compiled - eager).abs().max())
    print(f"{label} OK   max |compiled - eager| = {err:.2e}, |compiled - dense| = "
          f"{float((compiled.double() - dense).abs().max()):.2e}")
    return err < 0.05


print("torch", torch.__version__, torch.cuda.get_device_name())
results = [attempt(page, dynamic) for dynamic in (True, False) for page in (16, 32, 64, 128)]
sys.exit(0 if all(results) else 1)
