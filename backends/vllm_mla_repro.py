"""`attnref repro` templates for vLLM's MLA decode kernels (backends/vllm_mla.py): `kernel(q, ks, vs, ...)` over
the script's paged latent cache, called as the adapter calls it. The script's keys are the latent rows
[c, k_pe] (one kv head); its values are their first D_V dims, so the pool of keys is the whole cache."""
from __future__ import annotations

from reference.case import Case

from . import spellings
from .vllm_repro import canary


def triton_mla(case: Case) -> str:
    """decode_attention_fwd(..., is_mla=True), TRITON_MLA's call (k_scale serves both, as vLLM passes it)."""
    splits = case.encoding("num_kv_splits", "vllm")
    count = ("min(triton.next_power_of_2(max(1, max(s[1] for s in SEQS) // 512)), "
             "2 * torch.cuda.get_device_properties(DEVICE).multi_processor_count)  # TRITON_MLA's own choice"
             if splits == "vllm" else splits)
    return f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """vLLM's Triton MLA decode over a latent cache of {case.cache.block_size}-token pages (unused slots: canaries)."""
    from vllm.triton_utils import triton
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd

    pool, _, table, _, seq_lens = paged_cache(ks, vs, {case.cache.block_size}, fill={canary(case)})  # [pages, bs, 1, D]
    splits = {count}
    out = torch.full((len(SEQS), H, D_V), float("nan"), dtype=DTYPE, device=DEVICE)
    lse = torch.full((len(SEQS), H), float("nan"), dtype=torch.float32, device=DEVICE)
    logits = torch.empty(len(SEQS), H, splits, D_V + 1, dtype=torch.float32, device=DEVICE)
    scale = torch.tensor(1.0 if k_scales is None else float(k_scales[0].reshape(-1)[0]), device=DEVICE)
    decode_attention_fwd(q, pool, pool[..., :D_V], out, lse, table, seq_lens, logits, splits, SCALE,
                         {case.cache.block_size}, k_scale=scale, v_scale=scale, is_mla=True)
    return out, lse
'''


def flashmla(case: Case) -> str:
    """flash_mla_with_kvcache (16-bit) or flash_mla_with_kvcache_fp8 (an fp8 query and descales), FLASHMLA's call;
    the scheduler metadata planned by a first call and used by a second when the case says `reused`."""
    calls = 2 if case.encoding("sched_meta", "fresh") == "reused" else 1
    scale = "softmax_scale=SCALE" if spellings.scale_kwargs(case) else ""
    return f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """DeepSeek's FlashMLA as vLLM ships it, over a latent cache of 64-token pages (unused slots: canaries)."""
    from vllm.v1.attention.ops import flashmla

    pool, _, table, _, seq_lens = paged_cache(ks, vs, 64, fill={canary(case)})  # [pages, 64, 1, 576]
    b, s_q = len(SEQS), SEQS[0][0]  # the same query count in every sequence
    q = q.reshape(b, s_q, H, D)
    if k_scales is not None:  # fp8: query and cache in fp8 e4m3, one descale each
        tile, splits = flashmla.get_mla_metadata_dense_fp8(seq_lens, s_q * H, 1)
        descale_q = torch.tensor([Q_FP8_SCALE], dtype=torch.float32, device=DEVICE)
        descale_k = k_scales[0].reshape(-1)[:1].float()
        for _ in range({calls}):
            out, lse = flashmla.flash_mla_with_kvcache_fp8(q, pool, table, seq_lens, D_V, tile, splits, causal=CAUSAL,
                                                           descale_q=descale_q, descale_k=descale_k, {scale})
    else:
        meta, _ = flashmla.get_mla_metadata()
        for _ in range({calls}):
            out, lse = flashmla.flash_mla_with_kvcache(q, pool, table, seq_lens, D_V, meta, causal=CAUSAL, {scale})
    return out.reshape(b * s_q, H, D_V), lse.permute(0, 2, 1).reshape(b * s_q, H)  # LSE [b, H, s_q]
'''


def fa3_mla(case: Case) -> str:
    """FA3 with q_v, FLASH_ATTN_MLA's call: the rope parts as q / k, the latent as q_v / v."""
    aot = case.encoding("scheduler", "jit") == "aot"
    given_out = case.encoding("output", "returned") == "out"
    return f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """FA3 as vLLM ships it, with q_v, over a latent cache of {case.cache.block_size}-token pages (unused slots: canaries)."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    pool, _, table, _, seq_lens = paged_cache(ks, vs, {case.cache.block_size}, fill={canary(case)})  # [pages, bs, 1, D]
    kw = dict(max_seqlen_q=max(max(s[0] for s in SEQS), 1), cu_seqlens_q=cu_seqlens(0),
              max_seqlen_k=max(max(s[1] for s in SEQS), 1), seqused_k=seq_lens, block_table=table,
              softmax_scale=SCALE, causal=CAUSAL, return_softmax_lse=True, fa_version=3,
              num_splits={int(case.encoding("num_splits", "0"))})
    if {aot}:  # planned ahead, as FLASH_ATTN_MLA's builder does
        kw["scheduler_metadata"] = get_scheduler_metadata(
            batch_size=len(SEQS), max_seqlen_q=kw["max_seqlen_q"], max_seqlen_k=kw["max_seqlen_k"], num_heads_q=H,
            num_heads_kv=1, headdim=D - D_V, cache_seqlens=seq_lens, qkv_dtype=q.dtype, headdim_v=D_V,
            page_size={case.cache.block_size}, cu_seqlens_q=kw["cu_seqlens_q"], causal=CAUSAL, num_splits=kw["num_splits"])
    if {given_out}:  # written into a given buffer
        kw["out"] = torch.full((q.shape[0], H, D_V), float("nan"), dtype=DTYPE, device=DEVICE)
    out, lse = flash_attn_varlen_func(q=q[..., D_V:], k=pool[..., D_V:], v=pool[..., :D_V], q_v=q[..., :D_V], **kw)
    return out, lse.float().transpose(0, 1)  # LSE [H, tokens]
'''
