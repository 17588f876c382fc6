"""vLLM 0.26.0: unified_attention with kv_quant_mode=INT4_PER_TOKEN_HEAD ignores chunk_lookback and R-SWA.

`triton_unified_attention.unified_attention` hands an int4 cache to `int4_per_token_head.unified_attention_int4`,
whose signature has no `chunk_lookback`, `rswa_prefix_lens` or `rswa_window`; the dispatch drops them without
a word, and `TritonAttentionImpl.forward` passes the layer's `chunk_lookback` and the model's R-SWA metadata
whatever the cache dtype. So a chunked-local (block-local) or R-SWA layer served with
`kv_cache_dtype="int4_per_token_head"` attends over the plain sliding window (or the whole causal prefix).

Control: the same calls over an int8 per-token-head cache change their output when the rule is switched on;
over the int4 cache the output is bit for bit the same. One decode query at position 50 of a 51-key sequence,
window 32: the window sees keys 19..50, chunk_lookback=0 (chunks of 32) only 32..50; R-SWA with a 10-token
prompt and window 8 sees keys 0..9 and 43..50.

Run on a CUDA machine with vllm 0.26.0: exits 1 while the rules are ignored, 0 once they are honoured.
(attnref, 2026-11-23; found while adding int4 to attnref's vllm-triton-unified backend.)
"""
import sys

import torch
from vllm.v1.attention.ops.triton_reshape_and_cache_flash import triton_reshape_and_cache_flash_per_token_head_quant
from vllm.v1.attention.ops.triton_unified_attention import unified_attention
from vllm.v1.kv_cache_interface import KVQuantMode

H, H_KV, D, BS, N, W = 4, 1, 128, 16, 51, 32
dev = torch.device("cuda")


def attend(mode: KVQuantMode, **rule) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(0)
    k, v = (torch.randn(N, H_KV, D, generator=gen).to(dev, torch.bfloat16) for _ in range(2))
    q = torch.randn(1, H, D, generator=gen).to(dev, torch.bfloat16)
    blocks = -(-N // BS)
    width, dtype = (D // 2, torch.uint8) if mode == KVQuantMode.INT4_PER_TOKEN_HEAD else (D, torch.int8)
    kc, vc = (torch.zeros(blocks, BS, H_KV, width, dtype=dtype, device=dev) for _ in range(2))
    ks, vs = (torch.zeros(blocks, BS, H_KV, dtype=torch.float32, device=dev) for _ in range(2))
    triton_reshape_and_cache_flash_per_token_head_quant(k, v, kc, vc, ks, vs, torch.arange(N, device=dev),
                                                        kv_quant_mode=mode)
    out = torch.empty(1, H, D, dtype=torch.bfloat16, device=dev)
    window = rule.pop("window", (W - 1, -1))
    unified_attention(q=q, k=kc, v=vc, out=out, cu_seqlens_q=torch.tensor([0, 1], dtype=torch.int32, device=dev),
                      max_seqlen_q=1, seqused_k=torch.tensor([N], dtype=torch.int32, device=dev), max_seqlen_k=N,
                      softmax_scale=D**-0.5, causal=True, window_size=window,
                      block_table=torch.arange(blocks, dtype=torch.int32, device=dev)[None], softcap=0.0,
                      q_descale=None, k_descale=None, v_descale=None, kv_quant_mode=mode, k_scale_cache=ks,
                      v_scale_cache=vs, **rule)
    return out.float()


rules = {"chunk_lookback=0": dict(chunk_lookback=0),
         "R-SWA (prompt 10, window 8)": dict(window=(-1, -1), rswa_window=8,
                                             rswa_prefix_lens=torch.tensor([10], dtype=torch.int32, device=dev))}
ignored = 0
for name, rule in rules.items():
    for mode in (KVQuantMode.INT8_PER_TOKEN_HEAD, KVQuantMode.INT4_PER_TOKEN_HEAD):
        plain = attend(mode, **({"window": rule["window"]} if "window" in rule else {}))
        ruled = attend(mode, **dict(rule))
        moved = float((ruled - plain).abs().max())
        print(f"{mode.name:22s} {name:28s} output moved by {moved:.4g}" + ("  <- rule ignored" if moved == 0 else ""))
        ignored += mode == KVQuantMode.INT4_PER_TOKEN_HEAD and moved == 0
sys.exit(1 if ignored else 0)
