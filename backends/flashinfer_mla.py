"""FlashInfer's MLA wrapper: `flashinfer.mla.BatchMLAPagedAttentionWrapper` (absorbed MLA) on the `mla_latent` cache,
fa2 and fa3 backends, with the spellings its `plan` / `run` accept (flashinfer/mla/_batch_mla/_wrapper.py of
flashinfer-python 0.7.2.post1): the latent and rope parts packed or split, the LSE in base 2 or e, the output
returned or written into the caller's buffers."""
from __future__ import annotations

import time

import torch

from reference.case import AttentionType, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs

from ._convert import first_call_note, lse_natural
from .base import Actual, Backend, Capabilities, Feature, LseBase, Unsupported, cuda_library_reason
from .flashinfer import (OUTPUT_ENCODINGS, SEEN_VARIANTS, output_buffers, output_buffers_source, page_metadata,
                         workspace)


class FlashInferMLA(Backend):
    """flashinfer.mla.BatchMLAPagedAttentionWrapper (absorbed MLA) on the `mla_latent` cache.

    The cache [num_blocks, block_size, kv_lora_rank + rope_dim] and the query [tokens, heads,
    kv_lora_rank + rope_dim] go in packed or split, as the case spells them; the value is the latent
    prefix, so head_size = kv_lora_rank + rope_dim and value_size = kv_lora_rank. fp8 e4m3 caches
    use scale_mode "kv-per-tensor" with one scale for latent and rope parts. The LSE is requested in
    base 2 or e, as spelled.
    """

    library = "flashinfer"

    def __init__(self, name: str, option: str) -> None:
        self.name, self.option = name, option
        self.description = f"flashinfer.mla.BatchMLAPagedAttentionWrapper(backend='{option}'), packed latent cache"
        # FlashInfer's own checks: latent width a multiple of 128 (fa3: 128, 256 or 512), rope width a
        # multiple of 64 (or 0); fp8 only with bf16 queries and 512 + 64.
        pairs = ((576, 512), (320, 256), (192, 128), (256, 256)) if option == "fa3" else (
            (576, 512), (320, 256), (192, 128), (384, 384), (256, 256))
        self.caps = Capabilities(
            devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
            head_sizes=tuple(sorted({p[0] for p in pairs})), head_size_pairs=pairs, max_kv_heads=1,
            attn_types=frozenset({AttentionType.DECODER}),
            features=frozenset({Feature.MQA, Feature.CONTEXT, Feature.HEAD_SIZE_V}),
            kv_layouts=frozenset({KVLayout.MLA_LATENT}), kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3}),
            block_sizes=(1, 16, 32, 64), lse_base=LseBase.TWO, requires_cache=True, reads_paged_cache=True,
            # plan(..., query_layout, kv_cache_layout: "packed" | "split", lse_mode: "base2" | "basee") and
            # run(query=, kv_cache=, out=, lse=, return_lse_base_on_e=) (flashinfer/mla/_batch_mla/_wrapper.py):
            # the latent and rope parts as one tensor or as an independent pair, the LSE in base 2 or e, the
            # output returned or written into the caller's buffers
            encodings=(("query_layout", ("packed", "split")), ("kv_cache_layout", ("packed", "split")),
                       ("lse_mode", ("base2", "basee")), OUTPUT_ENCODINGS))

    def availability(self) -> str | None:
        reason = cuda_library_reason("flashinfer.mla", "flashinfer-python")
        if reason is None and not hasattr(__import__("flashinfer.mla").mla, "MLAPlanMetadata"):
            return "this flashinfer has no flashinfer.mla.MLAPlanMetadata (planned MLA API)"
        return reason

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        if case.kv_cache_dtype == KVCacheDType.FP8_E4M3 and (case.dtype != DType.BFLOAT16 or case.value_size != 512
                                                             or case.head_size != 576):
            reasons.append("fp8 MLA: FlashInfer takes it only with bfloat16 queries, latent 512 and rope 64")
        return reasons

    def run(self, inputs: Inputs) -> Actual:
        from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

        case = inputs.case
        dev = inputs.query.device
        rank, rope = case.value_size, case.head_size - case.value_size
        indptr, indices, _ = page_metadata(inputs)  # MLA takes kv lengths instead of last-page lengths
        meta = MLAPlanMetadata.csr(qo_indptr=inputs.query_start_loc.to(torch.int32), kv_indptr=indptr,
                                   kv_indices=indices, kv_len_arr=inputs.seq_lens.to(dev, torch.int32))
        fp8 = case.kv_cache_dtype == KVCacheDType.FP8_E4M3
        pool = inputs.cache.paged.tensors[0]
        layouts = dict(query_layout=case.encoding("query_layout", "packed"),
                       kv_cache_layout=case.encoding("kv_cache_layout", "packed"))
        base_e = case.encoding("lse_mode", "base2") == "basee"
        wrapper = BatchMLAPagedAttentionWrapper(workspace(dev), backend=self.option)
        t0 = time.perf_counter()
        try:
            wrapper.plan(metadata=meta, num_heads=case.num_heads, head_dim_ckv=rank, head_dim_kpe=rope,
                         page_size=case.cache.block_size, causal=True, sm_scale=case.softmax_scale,
                         q_data_type=case.dtype.torch, kv_data_type=pool.dtype, lse_mode="basee" if base_e else "base2",
                         scale_mode="kv-per-tensor" if fp8 else "default", **layouts)
        except Exception as e:
            # plan() refuses batches where its native scheduler (ceil) and kernel (floor) disagree on a causal
            # KV tile and a visible key would be lost (_validate_fa_causal_tile_bound): FlashInfer's own guard,
            # met 11 times in 30,291 MLA examples on an H100
            # (campaigns/flashinfer-alibi-softcap-10k-h100-2026-11-24.md). A refusal, not a crash.
            if type(e).__name__ == "_BackendPlanUnsupportedError":
                raise Unsupported(str(e)) from e
            raise
        kw = {}
        if fp8:
            s = float(inputs.cache.k_scale[0])
            kw = dict(ckv_scale=s, kpe_scale=s)
        kw |= output_buffers(inputs)
        query, kv = inputs.query, pool
        if layouts["query_layout"] == "split":  # independent tensors (adjacent views would be taken as packed)
            query = (query[..., :rank].contiguous(), query[..., rank:].contiguous())
        if layouts["kv_cache_layout"] == "split":
            kv = (pool[..., :rank].contiguous(), pool[..., rank:].contiguous())
        out, lse = wrapper.run(query=query, kv_cache=kv, return_lse=True, return_lse_base_on_e=base_e, **kw)
        key = (self.name, case.dtype, case.head_size, case.value_size, fp8, case.num_heads)
        return Actual(output=out, lse=lse_natural(lse, base_two=not base_e), notes=first_call_note(SEEN_VARIANTS, key, t0))

    repro_quantized = True  # fp8 e4m3 per tensor: one scale for the latent and rope parts

    def repro_kernel(self, case) -> str | None:
        qsplit = case.encoding("query_layout", "packed") == "split"
        kvsplit = case.encoding("kv_cache_layout", "packed") == "split"
        base_e = case.encoding("lse_mode", "base2") == "basee"
        return f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

    bs = {case.cache.block_size}
    # the packed latent cache [pages, bs, kv_lora_rank + rope_dim]: the value is the latent's first D_V dims
    pool, _, table, pages, kv_lens = paged_cache(ks, vs, bs)
    pool = pool[:, :, 0]
    indptr, indices, _ = page_metadata(table, pages, bs)  # MLA takes the key counts instead of last-page counts
    meta = MLAPlanMetadata.csr(qo_indptr=cu_seqlens(0), kv_indptr=indptr, kv_indices=indices, kv_len_arr=kv_lens)
    fp8 = k_scales is not None
    workspace = torch.zeros(256 << 20, dtype=torch.uint8, device=DEVICE)
    w = BatchMLAPagedAttentionWrapper(workspace, backend="{self.option}")
    w.plan(metadata=meta, num_heads=H, head_dim_ckv=D_V, head_dim_kpe=D - D_V, page_size=bs, causal=True,
           sm_scale=SCALE, q_data_type=DTYPE, kv_data_type=pool.dtype, lse_mode="{"basee" if base_e else "base2"}",
           scale_mode="kv-per-tensor" if fp8 else "default",
           query_layout="{"split" if qsplit else "packed"}", kv_cache_layout="{"split" if kvsplit else "packed"}")
    kw = {{}}
    if fp8:
        s = float(k_scales[0].reshape(-1)[0])
        kw = dict(ckv_scale=s, kpe_scale=s)
{output_buffers_source(case)}    query = (q[..., :D_V].contiguous(), q[..., D_V:].contiguous()) if {qsplit} else q  # independent halves
    kv = (pool[..., :D_V].contiguous(), pool[..., D_V:].contiguous()) if {kvsplit} else pool
    out, lse = w.run(query=query, kv_cache=kv, return_lse=True, return_lse_base_on_e={base_e}, **kw)
    return out, lse.float() * ({1.0 if base_e else "math.log(2)"})  # the LSE in base {"e" if base_e else "2"}
'''


def flashinfer_mla_backends() -> list[Backend]:
    return [FlashInferMLA("flashinfer-mla-fa2", "fa2"), FlashInferMLA("flashinfer-mla-fa3", "fa3")]
