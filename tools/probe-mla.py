"""Facts of vLLM's MLA decode APIs that a campaign's buckets hinge on, each printed as one line (run on the
device with vLLM staged: tools/stage-vllm.sh). Every check builds a DeepSeek-shaped latent cache
([blocks, 64, 576], value = its first 512 dims) and compares with a float64 softmax over the same rows.

  fa3-out      FA3 with q_v (FLASH_ATTN_MLA): is `out=` written, and is the returned tensor right, for
               query rows per kv head (s_q x H) at and past 64
  flashmla-fp8 FlashMLA's fp8 path: the output dtype and error for float16 and bfloat16 queries
  zero-keys    FlashMLA dense bf16 and fp8 with a sequence of 0 cached keys (fp8 in a child process:
               it may end the CUDA context)
"""
from __future__ import annotations

import subprocess
import sys

import torch

RANK, ROPE, BS = 512, 64, 64
DEV = "cuda"


def latent_cache(lens: list[int], dtype=torch.bfloat16, seed: int = 0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    blocks = [max(1, -(-n // BS)) for n in lens]
    cache = torch.randn(sum(blocks) + 1, BS, RANK + ROPE, generator=g, device=DEV).to(dtype)
    width = max(blocks)
    table = torch.zeros(len(lens), width, dtype=torch.int32, device=DEV)
    first = 1
    for i, b in enumerate(blocks):
        table[i, :b] = torch.arange(first, first + b, device=DEV)
        first += b
    return cache, table


def reference(q, cache, table, lens, s_q, scale, causal=True):
    """float64 [B * s_q, H, 512] and LSE [B * s_q, H]: bottom-right causal over each sequence's rows."""
    outs, lses = [], []
    for i, n in enumerate(lens):
        rows = cache[table[i].long()].reshape(-1, RANK + ROPE)[:n].double()
        qi = q[i * s_q:(i + 1) * s_q].double()  # [s_q, H, 576]
        s = torch.einsum("qhd,kd->hqk", qi, rows) * scale
        if causal:
            pos = torch.arange(s_q, device=DEV)[:, None] + n - s_q
            s = s.masked_fill(torch.arange(n, device=DEV)[None, :] > pos, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        outs.append(torch.einsum("hqk,kd->qhd", p, rows[:, :RANK]))
        lses.append(lse.transpose(0, 1))
    return torch.cat(outs), torch.cat(lses)


def fa3_out() -> None:
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    for heads, s_q in ((1, 64), (1, 65), (2, 32), (2, 33), (2, 64), (16, 4), (16, 5)):
        lens = [127]
        cache, table = latent_cache(lens)
        q = torch.randn(s_q, heads, RANK + ROPE, device=DEV, dtype=torch.bfloat16)
        scale = 576 ** -0.5
        kw = dict(max_seqlen_q=s_q, cu_seqlens_q=torch.tensor([0, s_q], dtype=torch.int32, device=DEV),
                  max_seqlen_k=127, seqused_k=torch.tensor(lens, dtype=torch.int32, device=DEV), block_table=table,
                  softmax_scale=scale, causal=True, return_softmax_lse=True, fa_version=3)
        k, v = cache[..., None, RANK:], cache[..., None, :RANK]
        want, _ = reference(q, cache, table, lens, s_q, scale)
        buf = torch.full((s_q, heads, RANK), float("nan"), dtype=torch.bfloat16, device=DEV)
        got, _ = flash_attn_varlen_func(q=q[..., RANK:], k=k, v=v, q_v=q[..., :RANK], out=buf, **kw)
        ret, _ = flash_attn_varlen_func(q=q[..., RANK:], k=k, v=v, q_v=q[..., :RANK], **kw)
        print(f"fa3-out H={heads} s_q={s_q} (rows/kv head {heads * s_q}): returned-is-out={got.data_ptr() == buf.data_ptr()} "
              f"out NaN={int(buf.isnan().sum())}/{buf.numel()} returned(out=) err={(got.double() - want).abs().max():.3g} "
              f"returned(no out) NaN={int(ret.isnan().sum())} err={(ret.double() - want).abs().max():.3g}")


def flashmla_fp8() -> None:
    from vllm.v1.attention.ops import flashmla

    lens, s_q, heads = [64, 200], 2, 16
    for dtype in (torch.float16, torch.bfloat16):
        cache, table = latent_cache(lens, dtype)
        q = torch.randn(len(lens) * s_q, heads, RANK + ROPE, device=DEV, dtype=dtype)
        q8, c8 = q.to(torch.float8_e4m3fn), cache.to(torch.float8_e4m3fn)
        seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
        tile, splits = flashmla.get_mla_metadata_dense_fp8(seqlens, s_q * heads, 1)
        one = torch.ones(1, dtype=torch.float32, device=DEV)
        out, lse = flashmla.flash_mla_with_kvcache_fp8(q8.reshape(len(lens), s_q, heads, -1), c8[:, :, None], table,
                                                       seqlens, RANK, tile, splits, softmax_scale=576 ** -0.5,
                                                       causal=True, descale_q=one, descale_k=one)
        want, want_lse = reference(q8.to(dtype), c8.to(dtype), table, lens, s_q, 576 ** -0.5)
        got = out.reshape(-1, heads, RANK).double()
        rounded = want.to(dtype).double()
        print(f"flashmla-fp8 query {dtype}: output dtype {out.dtype}; max err {(got - want).abs().max():.4g} "
              f"(the reference rounded to {dtype}: {(rounded - want).abs().max():.4g}; to bfloat16: "
              f"{(want.bfloat16().double() - want).abs().max():.4g})")


ZERO = r'''
import sys, torch
sys.path.insert(0, "tools")
probe = __import__("probe-mla")
from vllm.v1.attention.ops import flashmla
lens, s_q, heads = [0, 3, 31], 7, 1
cache, table = probe.latent_cache([max(n, 1) for n in lens])
q = torch.randn(len(lens) * s_q, heads, 576, device="cuda", dtype=torch.bfloat16)
seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
if sys.argv[1] == "fp8":
    tile, splits = flashmla.get_mla_metadata_dense_fp8(seqlens, s_q * heads, 1)
    one = torch.ones(1, dtype=torch.float32, device="cuda")
    out, lse = flashmla.flash_mla_with_kvcache_fp8(q.to(torch.float8_e4m3fn).reshape(3, s_q, heads, -1),
        cache.to(torch.float8_e4m3fn)[:, :, None], table, seqlens, 512, tile, splits, softmax_scale=0.04,
        causal=False, descale_q=one, descale_k=one)
else:
    meta, _ = flashmla.get_mla_metadata()
    out, lse = flashmla.flash_mla_with_kvcache(q.reshape(3, s_q, heads, -1), cache[:, :, None], table, seqlens, 512,
                                               meta, softmax_scale=0.04, causal=False)
torch.cuda.synchronize()
print(f"zero-keys {sys.argv[1]}: ran; the empty sequence's output max |x| {out[0].float().abs().max().item():.3g}, "
      f"its LSE {lse[0].unique().tolist()[:4]}; other sequences finite: {bool(out[1:].isfinite().all())}")
'''


def zero_keys() -> None:
    for mode in ("bf16", "fp8", "fp8"):
        done = subprocess.run([sys.executable, "-c", ZERO, mode], capture_output=True, text=True, timeout=300)
        last = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(last if done.returncode == 0 else f"zero-keys {mode}: exit {done.returncode}: {last[:200]}")


if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for part in sys.argv[1:] or ["fa3-out", "flashmla-fp8", "zero-keys"]:
        {"fa3-out": fa3_out, "flashmla-fp8": flashmla_fp8, "zero-keys": zero_keys}[part]()
