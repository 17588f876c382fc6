"""vLLM 0.26.0 kernels: `chunked_prefill_paged_decode`, and the per-token-head cache
writer feeding unified attention.

`vllm-chunked-paged-decode` (v1/attention/ops/chunked_prefill_paged_decode.py):

One call for a mixed batch over the v0 paged cache: sequences with more than one new token go to
`context_attention_fwd` (prefix_prefill, skip_decode=True), one-token sequences to its own Triton
`kernel_paged_attention_2d`, which reads every key, the new one included, from the cache. Declared as
vllm-prefix-prefill is (its prefill half), plus what the decode kernel takes: ALiBi measured from the
last key (`seq_offset - (seq_len - 1)`), vLLM's W window, sinks, GQA. fp8 stays undeclared for the
reason given on vllm-prefix-prefill.
"""
from __future__ import annotations

from dataclasses import replace

from reference.case import AttentionType, KVCacheDType
from reference.inputs import Inputs

from .base import Actual, Backend, Feature, poisoned_output
from . import spellings, vllm_repro
from .vllm import PrefixPrefill, TritonUnified, per_token_head_mode


class ChunkedPagedDecode(PrefixPrefill):
    name = "vllm-chunked-paged-decode"
    module = "vllm.v1.attention.ops.chunked_prefill_paged_decode"
    description = "v1/attention/ops/chunked_prefill_paged_decode: prefix_prefill for prefills + a Triton paged decode kernel"

    def repro_kernel(self, case) -> str | None:
        return vllm_repro.prefix_prefill(case, chunked=True)

    def run(self, inputs: Inputs) -> Actual:
        from vllm.v1.attention.ops.chunked_prefill_paged_decode import chunked_prefill_paged_decode

        case = inputs.case
        dev = inputs.device
        key_cache, value_cache = inputs.cache.paged.tensors
        new = case.num_tokens
        buffer = poisoned_output(inputs)
        chunked_prefill_paged_decode(
            query=inputs.query, key=inputs.key[:new], value=inputs.value[:new], output=buffer[:new], kv_cache_dtype="auto",
            key_cache=key_cache, value_cache=value_cache, block_table=inputs.block_table,
            query_start_loc=inputs.query_start_loc.to(dev), seq_lens=inputs.seq_lens.to(dev),
            max_seq_len=max(case.max_kv_len, 1), max_query_len=max(case.max_query_len, 1),
            k_scale=inputs.cache.k_scale.to(dev), v_scale=inputs.cache.v_scale.to(dev),
            alibi_slopes=None if inputs.alibi_slopes is None else inputs.alibi_slopes.to(dev),
            sliding_window=spellings.sliding_window(case), sm_scale=case.softmax_scale,
            sinks=None if inputs.sinks is None else inputs.sinks.to(dev))
        return Actual(output=buffer[:new], output_buffer=buffer, buffer_rows=new)


class PerTokenHeadWriter(TritonUnified):
    """`triton_reshape_and_cache_flash_per_token_head_quant` stores the new tokens (each (token, head)
    quantized with its own scale, written to the scale caches), then unified attention reads what it
    wrote. The written cache and both scale caches are compared with the oracle's `write_kv` byte for
    byte (symptom `cache-write`): the writer computes `x * (1 / scale)` in Triton, the oracle `x / scale`.
    int4 (`reshape_and_cache_int4`, Hadamard-rotated through bf16) is judged within 1.5 quanta per element."""

    name = "vllm-pth-writes-cache"
    module = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"
    description = ("vLLM's per-token-head quantizing cache writer, then unified attention; cache compared bit for bit "
                   "(int4: within 1.5 quanta, attention judged over the written codes)")
    caps = replace(TritonUnified.caps, writes_cache=True, attn_types=frozenset({AttentionType.DECODER}),
                   features=TritonUnified.caps.features - {Feature.MORE_QUERIES_THAN_KEYS, Feature.PAGED_KERNEL},
                   kv_cache_dtypes=frozenset({KVCacheDType.INT8_PER_TOKEN_HEAD, KVCacheDType.FP8_PER_TOKEN_HEAD,
                                              KVCacheDType.INT4_PER_TOKEN_HEAD}))

    repro_quantized = False

    def repro_kernel(self, case) -> str | None:
        return None  # the finding is the writer's: attnref compares its bytes (benchmarks/results/repro/vllm-hadacore-tail-rows.py)

    def run(self, inputs: Inputs) -> Actual:
        from vllm.v1.attention.ops.triton_reshape_and_cache_flash import (
            triton_reshape_and_cache_flash_per_token_head_quant)

        cache = inputs.cache_before_write.clone()
        triton_reshape_and_cache_flash_per_token_head_quant(
            inputs.key, inputs.value, cache.paged.key_view(), cache.paged.value_view(), cache.k_token_scales,
            cache.v_token_scales, inputs.slot_mapping.to(inputs.device), kv_quant_mode=per_token_head_mode(inputs.case))
        actual = super().run(replace(inputs, cache=cache))  # attention over vLLM's own writes
        return replace(actual, written_cache=cache)


def vllm_chunked_backends() -> list[Backend]:
    return [ChunkedPagedDecode(), PerTokenHeadWriter()]
