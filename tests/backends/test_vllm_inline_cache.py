"""TRITON_ATTN's per-token-head cache (scales inline after each half's codes) read back into the oracle's form,
so the whole backend's writes are judged and its attention is judged over the codes it wrote (campaigns/flashinfer-fa3-cascade-h100-2026-11-24.md:
69 rows were judged over the oracle's codes instead). The packing here follows vLLM 0.26.0's documented
layout (`get_kv_cache_shape`, `_ensure_scale_caches`) and is written independently of the converter."""
from __future__ import annotations

import pytest
import torch

import reference as r
from backends.vllm_layers import oracle_form_cache
from fuzz.cache_write import judge_cache_write
from reference.inputs import slots_for


def _vllm_packed(cache: r.KVCache, hnd: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`cache` in vLLM's logical [nb, H_kv, bs, 2 * (D + 4)] bytes, [K | K scale | V | V scale] per slot (physically
    HND or NHD), and float32 scale views [nb, bs, H_kv] over its bytes; unwritten slots hold zeros."""
    k, v = cache.paged.key_view().view(torch.uint8), cache.paged.value_view().view(torch.uint8)  # [nb, bs, H, D]
    nb, bs, h, d = k.shape
    rows = []
    for codes, scales in ((k, cache.k_token_scales), (v, cache.v_token_scales)):
        written = ~scales.isnan()
        rows += [torch.where(written[..., None], codes, 0),
                 torch.where(written, scales, 0.0)[..., None].contiguous().view(torch.uint8)]
    nhd = torch.cat(rows, dim=-1)  # [nb, bs, H, 2 * (D + 4)]
    packed = nhd.transpose(1, 2).contiguous() if hnd else nhd.transpose(1, 2)
    as_f32 = lambda part: nhd[..., part].contiguous().view(torch.float32)[..., 0]  # noqa: E731
    return packed, as_f32(slice(d, d + 4)), as_f32(slice(2 * d + 4, 2 * d + 8))


def _bytes(cache: r.KVCache) -> list[torch.Tensor]:
    return [t.contiguous().view(torch.uint8) for t in (cache.paged.key_view(), cache.paged.value_view())] + [
        cache.k_token_scales.view(torch.uint8), cache.v_token_scales.view(torch.uint8)]


@pytest.mark.parametrize("hnd", [True, False])
@pytest.mark.parametrize("kvd", [r.KVCacheDType.FP8_PER_TOKEN_HEAD, r.KVCacheDType.INT8_PER_TOKEN_HEAD])
def test_the_inline_scale_cache_reads_back_into_the_oracles_form_byte_for_byte(kvd, hnd):
    seqs = (r.SequenceSpec(query_len=3, context_len=5), r.SequenceSpec(query_len=1, context_len=9))
    case = r.Case(sequences=seqs, num_heads=4, num_kv_heads=2, head_size=16, dtype=r.DType.BFLOAT16,
                  cache=r.CacheSpec(block_size=4, padding_slots=2, quant=r.Quant(kv_cache_dtype=kvd)), seed=3)
    inputs = r.materialize(case)
    packed, k_scales, v_scales = _vllm_packed(inputs.cache, hnd)
    context = torch.cat([slots_for(inputs.block_table[i], torch.arange(s.context_len), 4)
                         for i, s in enumerate(seqs)])
    slots = torch.cat([context, inputs.slot_mapping])
    back = oracle_form_cache(inputs.cache_before_write, packed, slots, k_scales, v_scales)
    assert all(torch.equal(a, b) for a, b in zip(_bytes(back), _bytes(inputs.cache)))  # canaries kept, padding skipped
    assert judge_cache_write(inputs.cache, back) == []
    # a slot the writer was asked for but never wrote reads back as vLLM's zero codes and 1.0 scales: a finding
    block, offset = divmod(int(inputs.slot_mapping[0]), 4)
    packed[block, :, offset] = 0
    k_scales[block, offset] = v_scales[block, offset] = 1.0
    lost = oracle_form_cache(inputs.cache_before_write, packed, slots, k_scales, v_scales)
    assert [s.kind for s in judge_cache_write(inputs.cache, lost)] == ["cache-write"]
