"""Hypothesis strategies for a case's paged KV cache: its layout, block table, kv dtype and scales, within what the
backend declares (`fuzz.strategies.cases` draws them once the heads and lengths are drawn)."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import reject
from hypothesis import strategies as st

from backends.base import Capabilities, Feature
from reference.case import BlockTableKind, CacheSpec, DType, KVCacheDType, KVLayout, Quant, ScaleGranularity, SequenceSpec

from .cached import BOOLEANS, either, integers, just, memo, or_none, pick
from .limits import Limits, focus_values


@st.composite
def shared_prefix(draw, caps: Capabilities, sequences: tuple[SequenceSpec, ...], cache: CacheSpec
                  ) -> tuple[tuple[SequenceSpec, ...], CacheSpec]:
    """Sometimes (always, when it is the only declared table) a block table whose first blocks are
    the same physical blocks in every sequence (cascade kernels); contexts are lifted to cover them."""
    only = caps.block_tables == frozenset({BlockTableKind.SHARED_PREFIX})
    if not only and draw(integers(0, 3)) != 0:
        return sequences, cache
    bs = cache.block_size
    room = min(s.context_len for s in sequences) // bs
    blocks = draw(integers(1, max(room, 1)))
    lifted = tuple(replace(s, context_len=max(s.context_len, blocks * bs)) for s in sequences)
    return lifted, replace(cache, table=BlockTableKind.SHARED_PREFIX, prefix_blocks=blocks)


@memo
@st.composite
def cache_specs(draw, caps: Capabilities, dtype: DType, num_kv_heads: int, head_size: int,
                head_size_v: int, block_size: int, limits: Limits = Limits()) -> CacheSpec:
    layouts = sorted(caps.kv_layouts, key=lambda x: x.value)
    focus = focus_values(caps.kv_cache_dtypes, limits.kv_cache_dtypes, key=lambda x: x.value)

    def fits(d: KVCacheDType) -> bool:
        return (d.holds(dtype) and d.holds_heads(head_size, head_size_v)
                and (not d.is_fp8 or caps.fp8_model_dtypes is None or dtype in caps.fp8_model_dtypes))

    kv_dtypes = ([d for d in focus if fits(d)]  # a focus with no fitting kv dtype keeps the declaration's
                 or [d for d in sorted(caps.kv_cache_dtypes, key=lambda x: x.value) if fits(d)])
    if not kv_dtypes:  # e.g. int4 declared alone and a head size it cannot rotate
        reject()
    kvd = draw(pick(kv_dtypes))
    if kvd.is_int8:
        layouts = [x for x in layouts if x == KVLayout.FLASH_HND]
    elem_bytes = 1 if kvd.is_one_byte else dtype.torch.itemsize
    if head_size % (16 // elem_bytes) or head_size_v != head_size or kvd == KVCacheDType.INT4_PER_TOKEN_HEAD:
        layouts = [x for x in layouts if x != KVLayout.PAGED_V0]
    if head_size_v != head_size or kvd == KVCacheDType.INT8_K_FP16_V:  # one packed last dimension
        layouts = [x for x in layouts if x not in (KVLayout.VLLM_NHD, KVLayout.VLLM_HND)]
    if num_kv_heads != 1 or head_size_v > head_size or kvd.is_int8 or kvd.is_per_token_head:
        layouts = [x for x in layouts if x != KVLayout.MLA_LATENT]
    if limits.kv_layouts is not None:  # a focus the draw's dtype and heads leave no layout of keeps the others
        layouts = [x for x in layouts if x.value in limits.kv_layouts] or layouts
    if not layouts:  # no declared layout can hold this draw (e.g. int8 kv without flash_hnd): never an invalid case
        reject()
    choice = pick(layouts)
    if KVLayout.MLA_LATENT in layouts:  # rare (one kv head, no wider value, no int8): weight it when it is possible
        choice = either(choice, choice, just(KVLayout.MLA_LATENT))
    layout = draw(choice)
    tables = sorted(caps.block_tables - {BlockTableKind.SHARED_PREFIX}, key=lambda x: x.value)
    table = draw(pick(tables)) if tables else BlockTableKind.CONTIGUOUS  # shared_prefix() sets its own
    grans = sorted(caps.scale_granularities, key=lambda x: x.value)
    gran = draw(pick(grans)) if kvd.is_fp8 else ScaleGranularity.PER_TENSOR
    n = num_kv_heads if gran == ScaleGranularity.PER_KV_HEAD else 1
    scale = pick([1.0, 0.5, 0.25, 0.75, 2.0, 0.03125])
    k_scales = tuple(draw(st.lists(scale, min_size=n, max_size=n))) if kvd.is_fp8 else (1.0,) * n
    v_scales = tuple(draw(st.lists(scale, min_size=n, max_size=n))) if kvd.is_fp8 else (1.0,) * n
    if layout == KVLayout.MLA_LATENT:
        v_scales = k_scales  # one latent tensor, one scale
    dynamic = bool(kvd.is_fp8 and gran == ScaleGranularity.PER_TENSOR and Feature.DYNAMIC_SCALES in caps.features
                   and draw(BOOLEANS))
    q_fp8 = None
    if kvd == KVCacheDType.FP8_E4M3 and Feature.Q_FP8 in caps.features:
        q_scales = pick([0.5, 0.75, 1.0])
        q_fp8 = draw(q_scales if caps.fp8_query_only else or_none(q_scales))
        if dynamic and q_fp8 is not None:
            q_fp8 = 1.0  # the query's scale is computed with the others (Quant.dynamic_scales)
    spare = draw(pick([0, 0, 1, 3]))
    padding = draw(pick([0, 0, 1, 2])) if caps.writes_cache else 0
    layers = layer = 0
    if (Feature.LAYERED_CACHE in caps.features and layout in (KVLayout.FLASH_NHD, KVLayout.FLASH_HND)
            and head_size_v == head_size and kvd != KVCacheDType.INT8_K_FP16_V):
        layers = draw(pick([0, 0, 0, 1, 3]))
        layer = draw(integers(0, max(layers - 1, 0)))
    return CacheSpec(layout=layout, block_size=block_size, table=table, spare_blocks=spare, padding_slots=padding,
                     layers=layers, layer=layer,
                     finite_canaries=caps.finite_canaries_only or draw(integers(0, 7)) == 0,
                     quant=Quant(kv_cache_dtype=kvd, granularity=gran, k_scales=k_scales, v_scales=v_scales,
                                 dynamic_scales=dynamic, q_fp8_scale=q_fp8,
                                 dynamic_amax_dims=dict(caps.dynamic_amax_dims).get((head_size, head_size_v))
                                 if dynamic else None))
