"""vLLM's MLA decode kernels (vllm 0.26.0) over its latent cache, called as its MLA backends call them.

Every MLA backend of vLLM decodes in the absorbed form (reference/mla.py): the query is [q_nope W_UK, q_pe]
(kv_lora_rank + rope_dim per head), the cache row of a token is [c, k_pe] (`mla_latent`:
[num_blocks, block_size, kv_lora_rank + rope_dim], one latent "head"), the value is the latent c itself.
So a kernel case here has one kv head, head_size = kv_lora_rank + rope_dim and head_size_v = kv_lora_rank.

| backend | function (vLLM's caller) | what it takes |
|---|---|---|
| `vllm-triton-mla` | `v1/attention/ops/triton_decode_attention.decode_attention_fwd(..., is_mla=True)` (TRITON_MLA's `forward_mqa`) | one query per sequence; any block size; fp8 e4m3 cache with one scale (query stays 16-bit); `num_kv_splits` an encoding (vLLM's own choice, or a fixed count) |
| `vllm-flashmla` | `v1/attention/ops/flashmla.flash_mla_with_kvcache` / `flash_mla_with_kvcache_fp8` with `get_mla_metadata(_dense_fp8)` (FLASHMLA's `forward_mqa`) | 576 / 512 only, block size 64, the same query count in every sequence (vLLM's spec-decode reshape), `causal` a flag; fp8: an fp8 query and descales; a scheduler metadata object used fresh or a second time |
| `vllm-fa3-mla` | `vllm_flash_attn.flash_attn_varlen_func(q=q_pe, k=k_pe_cache, v=kv_c_cache, q_v=q_latent, fa_version=3)` (FLASH_ATTN_MLA's `forward_mqa`) | varlen queries, 576 / 512, 16-bit caches (vLLM raises for fp8), `num_splits` and the AOT scheduler as encodings; the scale is always passed: FA3's default is 1/sqrt(q_pe's 64), not the MLA scale |
| `vllm-mla-writes-cache` | `_custom_ops.concat_and_cache_mla` (MLAAttention's cache update) writes the new tokens, then the Triton MLA decode reads them; the written cache is compared with the oracle's, bit for bit | as `vllm-triton-mla` |

Read from the 0.26.0 wheel: `v1/attention/backends/mla/{triton_mla,flashmla,flashattn_mla}.py`,
`v1/attention/ops/flashmla.py`, `third_party/flashmla/flash_mla_interface.py` (its docstring: q
[batch, seq_len_q, heads, 576], k_cache [blocks, page_block_size, 1, 576], head_dim_v 512, LSE
[batch, heads, seq_len_q]), `_custom_ops.concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping,
kv_cache_dtype, scale)`.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from reference.case import AttentionType, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs

from . import spellings, vllm_mla_repro
from ._convert import cu_seqlens, tokens_first_lse
from .base import Actual, Backend, Capabilities, Feature, LseBase, cuda_library_reason, poisoned_output
from .vllm import F16

DEEPSEEK = (576, 512)  # kv_lora_rank 512 + rope 64: DeepSeek V2 / V3; FlashMLA's and FA3's only pair
# decode_attention_fwd's MLA tiling has two fixed cases (576 -> 512 + 64, 288 -> 256 + 32) and a general
# one (next powers of two of Lv and Lk - Lv): a pair of each, and pairs whose rope part is not a power of two
TRITON_PAIRS = (DEEPSEEK, (288, 256), (320, 256), (192, 128), (160, 128), (96, 64), (112, 64))
MLA_CAPS = Capabilities(
    devices=frozenset({"cuda"}), dtypes=F16, head_sizes=tuple(sorted({p[0] for p in TRITON_PAIRS})),
    head_size_pairs=TRITON_PAIRS, max_kv_heads=1, attn_types=frozenset({AttentionType.DECODER}),
    features=frozenset({Feature.MQA, Feature.CONTEXT, Feature.HEAD_SIZE_V}),
    kv_layouts=frozenset({KVLayout.MLA_LATENT}), kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3}),
    block_sizes=(1, 16, 32, 64), lse_base=LseBase.E, requires_cache=True, reads_paged_cache=True)
# FlashMLA's fp8 decode multiplies P by an e4m3 V on fp8 tensor cores (sm90 wgmma takes fp8 only beside fp8), so its
# probabilities are rounded to e4m3 first, unscaled: a baseline rounding them so (Capabilities.fp8_probabilities 1)
# has 0.88-0.99x the kernel's error over the 7 cases of a dynamic-scale fp8 bucket of vllm-layer-flashmla on an
# H100, and 448 leaves the kernel 4.6x over it (benchmarks/rejudge.py, vllm/open-rows-mla-flashinfer-h100-2026-11-27.md)
FLASHMLA_FP8_PROBABILITIES = 1.0


class VllmMLA(Backend):
    library = "vllm"
    module = "vllm.v1.attention.ops.triton_decode_attention"
    repro_quantized = True  # fp8 e4m3 with one scale for the whole latent row (FlashMLA: and an fp8 query)

    def availability(self) -> str | None:
        return cuda_library_reason(self.module, "vllm")


def vllm_num_kv_splits(max_seq_len: int, device) -> int:
    """TRITON_MLA's own choice (triton_mla._compute_num_kv_splits): the next power of two of
    max_seq_len // 512, at most twice the SM count."""
    from vllm.triton_utils import triton

    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return min(triton.next_power_of_2(max(1, max_seq_len // 512)), 2 * sms)


def triton_mla_decode(inputs: Inputs, pool) -> Actual:
    """decode_attention_fwd over the latent pool as TRITON_MLA's forward_mqa calls it (the value is the
    latent prefix of the key view; k_scale serves for both, as vLLM passes layer._k_scale twice)."""
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd

    case = inputs.case
    dev = inputs.device
    b, h, rank = case.num_tokens, case.num_heads, case.value_size
    spelled = case.encoding("num_kv_splits", "vllm")
    splits = vllm_num_kv_splits(case.max_kv_len, dev) if spelled == "vllm" else int(spelled)
    out = torch.full((b, h, rank), float("nan"), dtype=case.dtype.torch, device=dev)
    lse = torch.full((b, h), float("nan"), dtype=torch.float32, device=dev)
    logits = torch.empty(b, h, splits, rank + 1, dtype=torch.float32, device=dev)
    scale = inputs.cache.k_scale.to(dev, torch.float32)[0]
    decode_attention_fwd(inputs.query, pool.key_view(), pool.value_view(), out, lse, inputs.block_table,
                         inputs.seq_lens.to(dev), logits, splits, case.softmax_scale, pool.block_size,
                         k_scale=scale, v_scale=scale, is_mla=True)
    return Actual(output=out, lse=lse)


class TritonMLA(VllmMLA):
    """TRITON_MLA's decode: split-KV Triton over the latent cache, one query per sequence."""

    compiled_per = ("dtypes", "head_sizes", "kv_cache_dtypes")  # Triton specializes on Lk, Lv and the cache dtype

    name = "vllm-triton-mla"
    description = "triton_decode_attention.decode_attention_fwd(is_mla=True) over the latent cache, LSE"
    # num_kv_splits: any count >= 1 (the logits buffer's third dim); "vllm" is TRITON_MLA's own formula
    caps = replace(MLA_CAPS, max_query_len=1, min_query_len=1, min_kv_len=1,
                   encodings=(("num_kv_splits", ("vllm", "1", "3", "16")),))

    def repro_kernel(self, case) -> str | None:
        return vllm_mla_repro.triton_mla(case)

    def run(self, inputs: Inputs) -> Actual:
        return triton_mla_decode(inputs, inputs.cache.paged)


class FlashMLA(VllmMLA):
    """FLASHMLA's decode: DeepSeek's FlashMLA (sm90 dense, bf16 / fp16, and its fp8 extension)."""

    name = "vllm-flashmla"
    module = "vllm.v1.attention.ops.flashmla"
    description = "flashmla.flash_mla_with_kvcache (dense; fp8: flash_mla_with_kvcache_fp8), block 64, LSE"
    caps = replace(
        MLA_CAPS, head_sizes=(DEEPSEEK[0],), head_size_pairs=(DEEPSEEK,), block_sizes=(64,),
        # causal is a flag of the API (vLLM passes True): the raw region takes it off and q > k
        attn_types=frozenset({AttentionType.DECODER, AttentionType.KERNEL}),
        features=MLA_CAPS.features | {Feature.PAGED_KERNEL, Feature.MORE_QUERIES_THAN_KEYS, Feature.Q_FP8},
        # fp8: FLASHMLA quantizes the query with layer._q_scale and passes its descale
        uniform_query_len=True, min_query_len=1, fp8_query_only=True, fp8_probabilities=FLASHMLA_FP8_PROBABILITIES,
        # the fp8 path returns bfloat16 for a float16 model too (tools/probe-mla.py on an H100)
        fp8_model_dtypes=frozenset({DType.BFLOAT16}),
        # a row that sees no key: output 0 and LSE +inf (all 431 failing 16-bit-cache rows of the first H100
        # campaign showed just this, benchmarks/results/vllm/mla-h100-2026-11-25.md); vLLM's merge_attn_states
        # reads +inf as an empty state
        empty_row_lse=math.inf,
        # sched_meta: FlashMLASchedMeta is planned by its first call and reused by the next ones (vLLM's
        # layers share one per batch); "reused" judges the second call. softmax_scale defaults to 576 ** -0.5.
        encodings=(("sched_meta", ("fresh", "reused")), spellings.SCALE_ENCODINGS))

    def availability(self) -> str | None:
        reason = cuda_library_reason(self.module, "vllm")
        if reason is None:
            from vllm.v1.attention.ops.flashmla import is_flashmla_dense_supported

            ok, why = is_flashmla_dense_supported()
            reason = None if ok else f"FlashMLA dense: {why}"
        return reason

    def repro_kernel(self, case) -> str | None:
        return vllm_mla_repro.flashmla(case)

    def run(self, inputs: Inputs) -> Actual:
        from vllm.v1.attention.ops import flashmla

        case = inputs.case
        dev = inputs.device
        b, h = len(case.sequences), case.num_heads
        s_q = case.query_lens[0]
        seqlens = inputs.seq_lens.to(dev, torch.int32)
        table = inputs.block_table.to(dev, torch.int32)
        k_cache = inputs.cache.paged.key_view()  # [blocks, 64, 1, 576]
        causal = case.is_causal
        calls = 2 if case.encoding("sched_meta", "fresh") == "reused" else 1  # the second call reuses the plan
        if case.kv_cache_dtype.is_fp8:
            q = inputs.query_fp8.to(dev).reshape(b, s_q, h, case.head_size)
            tile, splits = flashmla.get_mla_metadata_dense_fp8(seqlens, s_q * h, 1)
            for _ in range(calls):
                out, lse = flashmla.flash_mla_with_kvcache_fp8(
                    q, k_cache, table, seqlens, case.value_size, tile, splits, causal=causal,
                    descale_q=inputs.q_scale.to(dev).reshape(1), descale_k=inputs.cache.k_scale.to(dev).reshape(1),
                    **spellings.scale_kwargs(case))
        else:
            q = inputs.query.reshape(b, s_q, h, case.head_size)
            meta, _ = flashmla.get_mla_metadata()
            for _ in range(calls):
                out, lse = flashmla.flash_mla_with_kvcache(q, k_cache, table, seqlens, case.value_size, meta,
                                                           causal=causal, **spellings.scale_kwargs(case))
        return Actual(output=out.reshape(b * s_q, h, case.value_size),
                      lse=lse.permute(0, 2, 1).reshape(b * s_q, h))


class FlashAttnMLA(VllmMLA):
    """FLASH_ATTN_MLA's decode: FA3 with q_v, the rope parts as q / k and the latent as q_v / v."""

    name = "vllm-fa3-mla"
    module = "vllm.vllm_flash_attn"
    description = "vllm_flash_attn.flash_attn_varlen_func(q=q_pe, k=k_pe, v=kv_c, q_v=q_latent, fa_version=3), LSE"
    caps = replace(
        MLA_CAPS, head_sizes=(DEEPSEEK[0],), head_size_pairs=(DEEPSEEK,), block_sizes=(16, 32, 64),
        kv_cache_dtypes=frozenset({KVCacheDType.AUTO}),  # flashattn_mla.py: "FP8 FlashAttention MLA not yet supported"
        attn_types=frozenset({AttentionType.DECODER, AttentionType.KERNEL}),
        features=MLA_CAPS.features | {Feature.PAGED_KERNEL, Feature.MORE_QUERIES_THAN_KEYS},
        writes_output_buffer=True,
        # num_splits: 0 = FA3's heuristic; scheduler: FA3 plans inside the call (jit) or takes
        # get_scheduler_metadata(headdim=64, headdim_v=512) as FLASH_ATTN_MLA's builder computes it (aot);
        # output: the returned tensor (FLASH_ATTN_MLA's call) or a given `out=` buffer (the signature's option)
        encodings=(("num_splits", ("0", "1", "3")), ("scheduler", ("jit", "aot")), ("output", ("returned", "out"))))

    def repro_kernel(self, case) -> str | None:
        return vllm_mla_repro.fa3_mla(case)

    def run(self, inputs: Inputs) -> Actual:
        from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

        case = inputs.case
        dev = inputs.device
        rank = case.value_size
        latent = inputs.cache.paged.key_view()  # [blocks, bs, 1, rank + rope]
        q_v, q_pe = inputs.query[..., :rank], inputs.query[..., rank:]
        seqused = inputs.seq_lens.to(dev, torch.int32)
        cu_q = cu_seqlens(case.query_lens, dev)
        kw = dict(max_seqlen_q=max(case.max_query_len, 1), cu_seqlens_q=cu_q, max_seqlen_k=max(case.max_kv_len, 1),
                  seqused_k=seqused, block_table=inputs.block_table, softmax_scale=case.softmax_scale,
                  causal=case.is_causal, return_softmax_lse=True, fa_version=3,
                  num_splits=int(case.encoding("num_splits", "0")))
        if case.encoding("scheduler", "jit") == "aot":
            kw["scheduler_metadata"] = get_scheduler_metadata(
                batch_size=len(case.sequences), max_seqlen_q=kw["max_seqlen_q"], max_seqlen_k=kw["max_seqlen_k"],
                num_heads_q=case.num_heads, num_heads_kv=1, headdim=case.head_size - rank, cache_seqlens=seqused,
                qkv_dtype=inputs.query.dtype, headdim_v=rank, page_size=case.cache.block_size, cu_seqlens_q=cu_q,
                causal=case.is_causal, num_splits=kw["num_splits"])
        n = case.num_tokens
        buffer = poisoned_output(inputs) if case.encoding("output", "returned") == "out" else None
        if buffer is not None:
            kw["out"] = buffer[:n]
        out, lse = flash_attn_varlen_func(q=q_pe, k=latent[..., rank:], v=latent[..., :rank], q_v=q_v, **kw)
        lse, notes = tokens_first_lse(lse, n, case.num_heads, documented="HT")
        if buffer is None:
            return Actual(output=out, lse=lse, notes=notes)
        return Actual(output=buffer[:n], lse=lse, output_buffer=buffer, buffer_rows=n, notes=notes)


class MLAWritesCache(VllmMLA):
    """MLAAttention's cache update (concat_and_cache_mla) stores the new tokens' [c, k_pe], then the Triton
    MLA decode reads them; the written cache is compared with the oracle's write, bit for bit."""

    name = "vllm-mla-writes-cache"
    module = "vllm._custom_ops"
    description = "vLLM concat_and_cache_mla then decode_attention_fwd(is_mla=True); the written cache compared bit for bit"
    compiled_per = TritonMLA.compiled_per
    caps = replace(TritonMLA.caps, writes_cache=True)

    def repro_kernel(self, case) -> str | None:
        # the Triton decode over the cache the script writes in plain torch: the writer's bytes attnref compares itself
        return vllm_mla_repro.triton_mla(case)

    def run(self, inputs: Inputs) -> Actual:
        from vllm import _custom_ops as ops

        case = inputs.case
        dev = inputs.device
        cache = inputs.cache_before_write.clone()
        rank = case.value_size
        new = inputs.key[:, 0]  # [tokens, rank + rope]: the new tokens' latent rows before quantization
        kvd = "fp8" if case.kv_cache_dtype.is_fp8 else "auto"
        ops.concat_and_cache_mla(new[:, :rank].contiguous(), new[:, rank:].contiguous(), cache.paged.tensors[0],
                                 inputs.slot_mapping.to(dev), kvd, cache.k_scale.to(dev, torch.float32).reshape(1))
        actual = triton_mla_decode(replace(inputs, cache=cache), cache.paged)
        actual.written_cache = cache
        return actual


def vllm_mla_backends() -> list[Backend]:
    return [TritonMLA(), FlashMLA(), FlashAttnMLA(), MLAWritesCache()]
