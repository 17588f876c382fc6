"""`attnref repro` templates for vLLM 0.26's kernels: `def kernel(q, ks, vs[, k_scales, v_scales])` calling
the kernel as backends/vllm.py's adapters do, over caches the script builds in plain torch
(backends/_repro_cache.py: pages from 1 on, canaries in every unused slot). Quantized caches come in as
stored values and their dequantization scales. The backends driven whole have theirs in vllm_layers_repro.py.
"""
from __future__ import annotations

import textwrap

from reference.case import AlibiConvention, Case

from . import spellings
from .vllm import flash_window, triton_padded, window_omitted


def canary(case: Case) -> str:
    """The fill of a script's unused cache slots: the case's canary."""
    return "30.0" if case.cache.finite_canaries else 'float("nan")'


def unified(case: Case) -> str:
    """triton_unified_attention.unified_attention: 2D or 3D path, ALiBi, sinks, soft-cap, window, fp8 per tensor or
    per-token-head scales, PrefixLM / R-SWA / chunk lookback / qq_bias."""
    three_d = case.encoding("path", "2d") == "3d"
    sqrt = case.alibi is not None and case.alibi.convention == AlibiConvention.SQRT
    kvd = case.kv_cache_dtype
    text = f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """vLLM's unified_attention over a paged cache of {case.cache.block_size}-token pages holding each sequence's keys."""
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention
    from vllm.v1.kv_cache_interface import KVQuantMode, get_kv_quant_mode

    k_cache, v_cache, table, _, seq_lens = paged_cache(ks, vs, {case.cache.block_size}, fill={canary(case)})
    kw = dict(q_descale=None, k_descale=None, v_descale=None)
'''
    if kvd.is_fp8:
        text += '''    kw.update(k_descale=k_scales[0].reshape(-1)[:1], v_descale=v_scales[0].reshape(-1)[:1],
              kv_quant_mode=KVQuantMode.FP8_PER_TENSOR)  # per tensor: the kernel loads one element
'''
    elif kvd.is_per_token_head:
        text += f'''    kw.update(k_scale_cache=paged_scales(k_scales, {case.cache.block_size}),
              v_scale_cache=paged_scales(v_scales, {case.cache.block_size}), kv_quant_mode=get_kv_quant_mode(KV_CACHE_DTYPE))
'''
    if three_d:
        text += f'''    # the 3D (split-KV) path: taken when every sequence decodes one token and fewer than seq_threshold_3D run
    segments, n, d = 16, q.shape[0], {triton_padded(case.head_size)}
    kw.update(seq_threshold_3D=len(SEQS) + 1, num_par_softmax_segments=segments,
              softmax_segm_output=torch.empty(n, H, segments, d, dtype=torch.float32, device=DEVICE),
              softmax_segm_max=torch.empty(n, H, segments, dtype=torch.float32, device=DEVICE),
              softmax_segm_expsum=torch.empty(n, H, segments, dtype=torch.float32, device=DEVICE))
'''
    text += '''    if RANGES is not None:
        kw["mm_prefix_range"] = prefix_ranges()
    if GLOBAL_PREFIX is not None:
        kw.update(rswa_window=GLOBAL_PREFIX[0], rswa_prefix_lens=torch.tensor(GLOBAL_PREFIX[1], dtype=torch.int32,
                                                                                   device=DEVICE))
    if LOOKBACK is not None:
        kw["chunk_lookback"] = LOOKBACK[1]
    if QQ_BIAS is not None:
        kw["qq_bias"] = QQ_BIAS.to(DEVICE)
    out = torch.full(q.shape[:2] + (D_V,), float("nan"), dtype=DTYPE, device=DEVICE)
'''
    text += f'''    unified_attention(q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=cu_seqlens(0),
                      max_seqlen_q=max(max(s[0] for s in SEQS), 1), seqused_k=seq_lens,
                      max_seqlen_k=max(max(s[1] for s in SEQS), 1), softmax_scale=SCALE, causal=CAUSAL,
                      window_size=({spellings.unbounded_left(case)}, -1), block_table=table, softcap=SOFT_CAP or 0.0,
                      alibi_slopes=None if ALIBI is None else ALIBI.float().to(DEVICE), use_alibi_sqrt={sqrt},
                      sinks=None if SINKS is None else SINKS.to(DEVICE), **kw)
    return out, None
'''
    return text


def fa3(case: Case, version: int = 3) -> str:
    """vllm_flash_attn.flash_attn_varlen_func(fa_version=3 or 4) over the paged cache: window, soft-cap, s_aux sinks,
    num_splits, fp8 with descales, the scheduler planned ahead of time (get_scheduler_metadata) or by FA3; FA4:
    the PrefixLM / R-SWA mask_mods FLASH_ATTN builds."""
    window = flash_window(case)
    omit = window_omitted(case, window)
    text = f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """FA{version} as vLLM ships it, over a paged cache of {case.cache.block_size}-token pages (unused slots hold canaries)."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    k_cache, v_cache, table, _, seq_lens = paged_cache(ks, vs, {case.cache.block_size}, fill={canary(case)})
    kw = dict(max_seqlen_q=max(max(s[0] for s in SEQS), 1), cu_seqlens_q=cu_seqlens(0),
              max_seqlen_k=max(max(s[1] for s in SEQS), 1), softmax_scale=SCALE, causal=CAUSAL, softcap=SOFT_CAP or 0.0,
              return_softmax_lse=True, fa_version={version}, num_splits={int(case.encoding("num_splits", "0"))},
              seqused_k=seq_lens, block_table=table)
    if {not omit}:
        kw["window_size"] = {window!r}
    if SINKS is not None:
        kw["s_aux"] = SINKS.to(DEVICE, torch.bfloat16)
    if k_scales is not None:  # fp8: query and cache in fp8, descales [B, H_KV]
        ones = torch.ones(len(SEQS), H_KV, dtype=torch.float32, device=DEVICE)
        kw.update(q_descale=ones * Q_FP8_SCALE, k_descale=ones * k_scales[0].reshape(-1)[0],
                  v_descale=ones * v_scales[0].reshape(-1)[0])
'''
    if version == 4 and (case.global_prefix is not None or case.bidirectional_ranges is not None):
        text += _mask_mods()
    if case.encoding("scheduler", "jit") == "aot":
        text += f'''    kw["scheduler_metadata"] = get_scheduler_metadata(
        batch_size=len(SEQS), max_seqlen_q=kw["max_seqlen_q"], max_seqlen_k=kw["max_seqlen_k"], num_heads_q=H,
        num_heads_kv=H_KV, headdim=D, cache_seqlens=seq_lens, qkv_dtype=q.dtype, headdim_v=D_V,
        cu_seqlens_q=kw["cu_seqlens_q"], page_size={case.cache.block_size}, causal=CAUSAL,
        window_size=tuple(kw.get("window_size") or (-1, -1)), has_softcap=bool(SOFT_CAP), num_splits=kw["num_splits"])
'''
    return text + '''    out, lse = flash_attn_varlen_func(q, k_cache, v_cache, **kw)[:2]
    return out, lse.float().transpose(0, 1)  # LSE [H, tokens]
'''


def _mask_mods() -> str:
    """FLASH_ATTN's FA4 mask_mods, built by vLLM's own helpers: `mask_mod=rswa or mm` (R-SWA replaces the window
    and, beside PrefixLM ranges, drops them: FINDINGS.md, vllm-fa4-rswa-prefix-lm); PrefixLM keeps the window."""
    return '''    from vllm.v1.attention.backends.flash_attn import _make_mm_prefix_mask_mod, _make_rswa_mask_mod

    if GLOBAL_PREFIX is not None:
        kw.update(mask_mod=_make_rswa_mask_mod(), window_size=None,
                  aux_tensors=[torch.tensor(GLOBAL_PREFIX[1], dtype=torch.int32, device=DEVICE),
                               torch.tensor([GLOBAL_PREFIX[0]], dtype=torch.int32, device=DEVICE)])
    else:
        ranges = prefix_ranges()
        left = kw.get("window_size", (-1, -1))[0]
        kw.update(mask_mod=_make_mm_prefix_mask_mod(ranges.shape[1], sliding_window=0,
                                                     sliding_window_left=left + 1 if left is not None and left >= 0 else None),
                  aux_tensors=[ranges])
'''


def prefix_prefill(case: Case, chunked: bool) -> str:
    """context_attention_fwd (or chunked_prefill_paged_decode): the new tokens contiguous, every key in vLLM's v0
    paged cache; ALiBi, sinks and vLLM's W window."""
    call = ("chunked_prefill_paged_decode(query=q, key=k_new, value=v_new, output=out, kv_cache_dtype=\"auto\", "
            "key_cache=key_cache, value_cache=value_cache, block_table=table, query_start_loc=cu_seqlens(0), "
            "seq_lens=seq_lens, max_seq_len=max(max(s[1] for s in SEQS), 1), max_query_len=max(max(s[0] for s in SEQS), 1), "
            "k_scale=one, v_scale=one, alibi_slopes=alibi, sliding_window=SLIDING_WINDOW, sm_scale=SCALE, sinks=sinks)"
            if chunked else
            "context_attention_fwd(q, k_new, v_new, out, \"auto\", key_cache, value_cache, table, cu_seqlens(0), seq_lens, "
            "max(max(s[1] for s in SEQS), 1), max(max(s[0] for s in SEQS), 1), one, one, alibi_slopes=alibi, "
            "sliding_window=SLIDING_WINDOW, sm_scale=SCALE, sinks=sinks)")
    module, name = (("chunked_prefill_paged_decode", "chunked_prefill_paged_decode") if chunked
                    else ("prefix_prefill", "context_attention_fwd"))
    body = textwrap.fill(call, 116, subsequent_indent="        ", break_long_words=False, break_on_hyphens=False)
    return f'''
SLIDING_WINDOW = {spellings.sliding_window(case)}  # vLLM's W: the last W keys, the query's own included

def kernel(q, ks, vs):
    """vLLM's {name}: keys in the v0 paged cache ({case.cache.block_size}-token pages), new tokens also contiguous."""
    from vllm.v1.attention.ops.{module} import {name}

    k_cache, v_cache, table, _, seq_lens = paged_cache(ks, vs, {case.cache.block_size}, fill={canary(case)})
    key_cache, value_cache = v0_cache(k_cache, v_cache)
    k_new = torch.cat([k[kv_len - q_len:] for k, (q_len, kv_len, _) in zip(ks, SEQS)])
    v_new = torch.cat([v[kv_len - q_len:] for v, (q_len, kv_len, _) in zip(vs, SEQS)])
    out = torch.full(q.shape[:2] + (D_V,), float("nan"), dtype=DTYPE, device=DEVICE)
    one = torch.ones(1, dtype=torch.float32, device=DEVICE)
    alibi = None if ALIBI is None else ALIBI.float().to(DEVICE)
    sinks = None if SINKS is None else SINKS.to(DEVICE)
    {body}
    return out, None
'''


def decode(case: Case) -> str:
    """triton_decode_attention.decode_attention_fwd: one query per sequence, num_kv_splits partial states, LSE."""
    return f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """vLLM's decode_attention_fwd over a paged cache of {case.cache.block_size}-token pages."""
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd

    k_cache, v_cache, table, _, seq_lens = paged_cache(ks, vs, {case.cache.block_size}, fill={canary(case)})
    splits = {int(case.encoding("num_kv_splits", "8"))}
    out = torch.full((q.shape[0], H, D_V), float("nan"), dtype=DTYPE, device=DEVICE)
    lse = torch.full((q.shape[0], H), float("nan"), dtype=torch.float32, device=DEVICE)
    logits = torch.empty(q.shape[0], H, splits, D_V + 1, dtype=torch.float32, device=DEVICE)
    scales = {{}} if k_scales is None else dict(k_scale=k_scales[0].reshape(-1)[0], v_scale=v_scales[0].reshape(-1)[0])
    decode_attention_fwd(q, k_cache, v_cache, out, lse, table, seq_lens, logits, splits, SCALE,
                         page_size={case.cache.block_size}, logit_cap=SOFT_CAP or 0.0, **scales)
    return out, lse
'''
