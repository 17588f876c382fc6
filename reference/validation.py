"""A Case's fields against what the semantics allow: `validate` raises CaseError naming the field, its value and the
allowed values (every Case runs it when it is made)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .kinds import AttentionType, BlockTableKind, CaseError, CausalAlignment, DType, KVCacheDType, KVLayout, \
    ScaleGranularity, ValueDistribution

if TYPE_CHECKING:
    from .case import Case


_FP8_MAX = {KVCacheDType.FP8_E4M3: 448.0, KVCacheDType.FP8_E5M2: 57344.0}


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise CaseError(message)


def validate(case: Case) -> None:
    """Raise CaseError naming the field, its value and what is allowed; return None if valid."""
    _require(isinstance(case.sequences, tuple) and len(case.sequences) >= 1,
             f"Case.sequences={case.sequences!r}: must be a non-empty tuple of SequenceSpec")
    for i, s in enumerate(case.sequences):
        for name in ("query_len", "context_len", "encoder_len"):
            value = getattr(s, name)
            _require(isinstance(value, int) and value >= 0,
                     f"Case.sequences[{i}].{name}={value!r}: must be an integer >= 0")
        if case.attn_type in (AttentionType.ENCODER, AttentionType.ENCODER_ONLY):
            _require(s.context_len == 0 and s.encoder_len == 0,
                     f"Case.sequences[{i}]: context_len={s.context_len}, encoder_len={s.encoder_len}: "
                     f"attn_type={case.attn_type.value} has no cache, both must be 0")
        if case.attn_type == AttentionType.DECODER:
            _require(s.encoder_len == 0,
                     f"Case.sequences[{i}].encoder_len={s.encoder_len}: must be 0 for attn_type=decoder")
        if case.attn_type == AttentionType.KERNEL:
            _require(isinstance(s.key_len, int) and s.key_len >= 0 and s.context_len == 0 and s.encoder_len == 0,
                     f"Case.sequences[{i}]: key_len={s.key_len!r}, context_len={s.context_len}, encoder_len="
                     f"{s.encoder_len}: attn_type=kernel needs key_len >= 0 and no context / encoder lengths")
        else:
            _require(s.key_len is None, f"Case.sequences[{i}].key_len={s.key_len}: only attn_type=kernel takes "
                                        f"key_len (others derive it)")
        if case.attn_type == AttentionType.ENCODER_DECODER:
            _require(s.context_len == 0,
                     f"Case.sequences[{i}].context_len={s.context_len}: cross attention reads the "
                     f"encoder keys (encoder_len); context_len must be 0")
    _require(case.num_tokens >= 1, f"Case.sequences: num_tokens={case.num_tokens}: at least one query token")
    for name in ("num_heads", "num_kv_heads", "head_size"):
        value = getattr(case, name)
        _require(isinstance(value, int) and value >= 1, f"Case.{name}={value!r}: must be an integer >= 1")
    _require(case.num_heads % case.num_kv_heads == 0,
             f"Case.num_kv_heads={case.num_kv_heads}: must divide num_heads={case.num_heads}")
    _require(case.head_size_v is None or (isinstance(case.head_size_v, int) and case.head_size_v >= 1),
             f"Case.head_size_v={case.head_size_v!r}: must be None or an integer >= 1")
    _require(isinstance(case.dtype, DType), f"Case.dtype={case.dtype!r}: one of {[d.value for d in DType]}")
    _require(isinstance(case.attn_type, AttentionType),
             f"Case.attn_type={case.attn_type!r}: one of {[t.value for t in AttentionType]}")
    _require(case.scale is None or (math.isfinite(case.scale) and case.scale > 0),
             f"Case.scale={case.scale!r}: must be None or a finite number > 0")
    _require(case.sliding_window is None or (isinstance(case.sliding_window, int) and case.sliding_window >= 1),
             f"Case.sliding_window={case.sliding_window!r}: must be None or an integer >= 1")
    if case.attn_type == AttentionType.KERNEL:
        _require(case.sliding_window is None,
                 "Case.sliding_window: attn_type=kernel states its window as Case.window=(left, right); must be None")
        w = case.window
        _require(w is None or (isinstance(w, tuple) and len(w) == 2
                               and all(x is None or (isinstance(x, int) and x >= 0) for x in w)),
                 f"Case.window={w!r}: None or (left, right), each None (unbounded) or an integer >= 0")
    else:
        _require(not case.causal and case.causal_alignment == CausalAlignment.BOTTOM_RIGHT and case.window is None,
                 f"Case.causal / causal_alignment / window: only attn_type=kernel sets them; "
                 f"attn_type={case.attn_type.value} has its own (see Case.is_causal, window_bounds)")
    _require(case.sliding_window is None or case.attn_type != AttentionType.ENCODER_DECODER,
             f"Case.sliding_window={case.sliding_window}: not defined for attn_type=encoder_decoder")
    if case.alibi is not None:
        _require(len(case.alibi.slopes) == case.num_heads,
                 f"Case.alibi.slopes has {len(case.alibi.slopes)} values: needs one per head ({case.num_heads})")
        _require(all(math.isfinite(x) for x in case.alibi.slopes), "Case.alibi.slopes: must be finite")
    _require(case.soft_cap is None or (math.isfinite(case.soft_cap) and case.soft_cap > 0),
             f"Case.soft_cap={case.soft_cap!r}: must be None or a finite number > 0")
    if case.sinks is not None:
        _require(len(case.sinks) == case.num_heads,
                 f"Case.sinks has {len(case.sinks)} values: needs one per head ({case.num_heads})")
        _require(all(math.isfinite(x) for x in case.sinks), "Case.sinks: must be finite logits")
    if case.attn_chunk_size is not None:
        _require(isinstance(case.attn_chunk_size, int) and case.attn_chunk_size >= 1,
                 f"Case.attn_chunk_size={case.attn_chunk_size!r}: must be None or an integer >= 1")
        _require(case.attn_type == AttentionType.DECODER,
                 f"Case.attn_chunk_size: chunked local attention is a decoder feature, not {case.attn_type.value}")
    if case.block_sparse is not None:
        bs = case.block_sparse
        for name, low in (("block_size", 1), ("local_blocks", 0), ("vert_stride", 1), ("tp_size", 1), ("tp_rank", 0)):
            value = getattr(bs, name)
            _require(isinstance(value, int) and value >= low,
                     f"Case.block_sparse.{name}={value!r}: must be an integer >= {low}")
        _require(bs.tp_rank < bs.tp_size, f"Case.block_sparse.tp_rank={bs.tp_rank}: must be < tp_size={bs.tp_size}")
        _require(bs.head_sliding_step is None or isinstance(bs.head_sliding_step, int),
                 f"Case.block_sparse.head_sliding_step={bs.head_sliding_step!r}: None (derived) or an integer")
        _require(case.attn_type == AttentionType.DECODER,
                 f"Case.block_sparse: defined for attn_type=decoder only, not {case.attn_type.value}")
    _validate_vllm_masks(case)
    _validate_cache(case)
    _require(isinstance(case.encodings, tuple) and all(
        isinstance(e, tuple) and len(e) == 2 and all(isinstance(x, str) for x in e) for e in case.encodings)
        and len({e[0] for e in case.encodings}) == len(case.encodings),
        f"Case.encodings={case.encodings!r}: pairs (name, spelling) of strings, each name once")
    _require(case.values.logit_scale > 0 and math.isfinite(case.values.logit_scale),
             f"Case.values.logit_scale={case.values.logit_scale!r}: must be a finite number > 0")
    _require(not case.values.outliers_at_edge or case.values.distribution == ValueDistribution.OUTLIERS,
             f"Case.values.outliers_at_edge=True: only with distribution=outliers "
             f"(got {case.values.distribution.value})")
    _require(case.values.edge_value_gain > 0 and math.isfinite(case.values.edge_value_gain),
             f"Case.values.edge_value_gain={case.values.edge_value_gain!r}: must be a finite number > 0")
    zero = case.values.query_zero_dims
    _require(zero is None or (len(zero) == 2 and all(isinstance(x, int) for x in zero)
                              and 0 <= zero[0] < zero[1] <= case.head_size),
             f"Case.values.query_zero_dims={zero!r}: None or (start, end) with 0 <= start < end <= "
             f"head_size={case.head_size}")
    _require(isinstance(case.seed, int) and 0 <= case.seed < 2**63,
             f"Case.seed={case.seed!r}: must be an integer in [0, 2**63)")


def _validate_vllm_masks(case: Case) -> None:
    on = [name for name in ("bidirectional_ranges", "global_prefix", "chunk_lookback")
          if getattr(case, name) is not None] + (["qq_bias"] if case.qq_bias else [])
    if not on:
        return
    _require(case.attn_type == AttentionType.DECODER and case.block_sparse is None and case.attn_chunk_size is None,
             f"Case.{on[0]}: a decoder mask rule of vLLM's unified attention; needs attn_type=decoder, "
             f"no block_sparse, no attn_chunk_size")
    n = len(case.sequences)
    r = case.bidirectional_ranges
    _require(r is None or (isinstance(r, tuple) and len(r) == n and all(
        isinstance(ranges, tuple) and all(isinstance(x, tuple) and len(x) == 2 and all(
            isinstance(v, int) and v >= 0 for v in x) for x in ranges) for ranges in r)),
        f"Case.bidirectional_ranges={r!r}: one tuple per sequence ({n}) of (start, end) positions, integers >= 0")
    g = case.global_prefix
    if g is not None:
        _require(isinstance(g.window, int) and g.window >= 1 and isinstance(g.prefix_lens, tuple)
                 and len(g.prefix_lens) == n and all(isinstance(x, int) and x >= 0 for x in g.prefix_lens),
                 f"Case.global_prefix={g!r}: window an integer >= 1 and one prefix_len >= 0 per sequence ({n})")
        _require(case.sliding_window is None, "Case.global_prefix: R-SWA replaces sliding_window; it must be None")
    lb = case.chunk_lookback
    if lb is not None:
        _require(isinstance(lb, int) and lb >= 0 and case.sliding_window is not None
                 and case.sliding_window // (lb + 1) >= 1,
                 f"Case.chunk_lookback={lb!r}: an integer >= 0 with a sliding_window of at least lookback + 1 "
                 f"positions (sliding_window={case.sliding_window})")


def _validate_cache(case: Case) -> None:
    c = case.cache
    if c is None:
        return
    _require(case.uses_cache,
             f"Case.cache: attn_type={case.attn_type.value} reads no cache; cache must be None")
    _require(isinstance(c.block_size, int) and c.block_size >= 1,
             f"Case.cache.block_size={c.block_size!r}: must be an integer >= 1")
    _require(c.prefix_blocks >= 0 and c.spare_blocks >= 0 and c.padding_slots >= 0,
             "Case.cache.prefix_blocks/spare_blocks/padding_slots: must be >= 0")
    if c.table == BlockTableKind.SHARED_PREFIX:
        shared = c.prefix_blocks * c.block_size
        _require(c.prefix_blocks >= 1, "Case.cache.prefix_blocks: SHARED_PREFIX needs at least 1 block")
        _require(all(s.context_len >= shared for s in case.sequences) and case.attn_type == AttentionType.DECODER,
                 f"Case.cache.prefix_blocks={c.prefix_blocks}: every decoder sequence needs "
                 f"context_len >= {shared} (prefix_blocks * block_size)")
    q = c.quant
    _require(isinstance(c.layers, int) and c.layers >= 0 and isinstance(c.layer, int)
             and 0 <= c.layer < max(c.layers, 1),
             f"Case.cache.layers={c.layers!r}, layer={c.layer!r}: layers >= 0 (0: no layers dimension) "
             f"and 0 <= layer < max(layers, 1)")
    if c.layers:
        _require(c.layout in (KVLayout.FLASH_NHD, KVLayout.FLASH_HND),
                 f"Case.cache.layout={c.layout.value}: a layers dimension is defined for "
                 f"['flash_hnd', 'flash_nhd'] (vLLM's get_kv_cache_stride_order)")
        _require(case.value_size == case.head_size and q.kv_cache_dtype != KVCacheDType.INT8_K_FP16_V,
                 "Case.cache.layers: a layered cache stacks key and value in one tensor; head_size_v and "
                 "kv_cache_dtype=int8_k_fp16_v need separate tensors")
    if c.layout == KVLayout.MLA_LATENT:
        _require(case.num_kv_heads == 1,
                 f"Case.num_kv_heads={case.num_kv_heads}: layout mla_latent holds one latent head; must be 1")
        _require(case.value_size <= case.head_size,
                 f"Case.head_size_v={case.value_size}: layout mla_latent reads the value as the first "
                 f"head_size_v (kv_lora_rank) elements of the latent; must be <= head_size={case.head_size}")
        _require(not q.kv_cache_dtype.is_int8 and q.k_scales == q.v_scales,
                 f"Case.cache.quant: layout mla_latent stores one tensor with one scale; kv_cache_dtype="
                 f"{q.kv_cache_dtype.value} must not be int8 and k_scales must equal v_scales")
    if c.layout in (KVLayout.VLLM_NHD, KVLayout.VLLM_HND):
        _require(case.value_size == case.head_size and q.kv_cache_dtype != KVCacheDType.INT8_K_FP16_V,
                 f"Case.cache.layout={c.layout.value}: vLLM's packed cache holds K and V in one last dimension of "
                 f"2 * head_size; head_size_v must equal head_size and kv_cache_dtype must not be int8_k_fp16_v")
    if c.layout == KVLayout.PAGED_V0:
        x = 16 // (1 if q.kv_cache_dtype.is_one_byte else case.dtype.torch.itemsize)
        _require(case.head_size % x == 0,
                 f"Case.head_size={case.head_size}: layout paged_v0 splits keys by x={x}; must be a multiple")
    _require(case.value_size == case.head_size or c.layout != KVLayout.PAGED_V0,
             "Case.head_size_v: layout paged_v0 stores key and value with one head_size")
    for name, scales in (("k_scales", q.k_scales), ("v_scales", q.v_scales)):
        n = case.num_kv_heads if q.granularity == ScaleGranularity.PER_KV_HEAD else 1
        _require(len(scales) == n, f"Case.cache.quant.{name} has {len(scales)} values: "
                                   f"granularity={q.granularity.value} needs {n}")
        _require(all(math.isfinite(s) and s > 0 for s in scales), f"Case.cache.quant.{name}: must be > 0")
    if q.kv_cache_dtype == KVCacheDType.INT8_KV or q.kv_cache_dtype == KVCacheDType.INT8_K_FP16_V:
        _require(c.layout == KVLayout.FLASH_HND,
                 f"Case.cache.layout={c.layout.value}: the int8 fork stores [num_blocks, H_kv, block_size, D] "
                 f"(flash_hnd); kv_cache_dtype={q.kv_cache_dtype.value} needs it")
    if q.kv_cache_dtype.is_per_token_head:
        _require(c.layout != KVLayout.MLA_LATENT and q.k_scales == (1.0,) and q.v_scales == (1.0,)
                 and not q.dynamic_scales and q.q_fp8_scale is None,
                 f"Case.cache.quant: kv_cache_dtype={q.kv_cache_dtype.value} computes its scales per token and "
                 f"head; needs k_scales=v_scales=(1.0,), no dynamic_scales, no q_fp8_scale, a layout other than "
                 f"mla_latent")
    _require(q.kv_cache_dtype.holds_heads(case.head_size, case.value_size),
             f"Case.head_size={case.head_size}, head_size_v={case.value_size}: kv_cache_dtype="
             f"{q.kv_cache_dtype.value} rotates each vector by a Hadamard transform; both must be powers of two >= 2")
    _require(q.kv_cache_dtype != KVCacheDType.INT4_PER_TOKEN_HEAD or c.layout != KVLayout.PAGED_V0,
             f"Case.cache.layout=paged_v0: kv_cache_dtype={q.kv_cache_dtype.value} packs two codes per byte; "
             f"use another layout")
    _require(q.kv_cache_dtype.holds(case.dtype),
             f"Case.cache.quant.kv_cache_dtype={q.kv_cache_dtype.value}: a 16-bit cache must match "
             f"Case.dtype={case.dtype.value}")
    _require(q.q_fp8_scale is None or (math.isfinite(q.q_fp8_scale) and q.q_fp8_scale > 0),
             f"Case.cache.quant.q_fp8_scale={q.q_fp8_scale!r}: must be None or > 0")
    n = q.dynamic_amax_dims
    _require(n is None or (q.dynamic_scales and c.layout == KVLayout.MLA_LATENT and isinstance(n, int)
                           and 1 <= n <= case.head_size),
             f"Case.cache.quant.dynamic_amax_dims={n!r}: None, or with dynamic_scales over layout mla_latent an "
             f"integer in [1, head_size={case.head_size}]")
    _require(not q.dynamic_scales or q.q_fp8_scale in (None, 1.0),
             f"Case.cache.quant.q_fp8_scale={q.q_fp8_scale!r} with dynamic_scales: must be None or 1.0 (the query's "
             "scale is then computed: amax / Q_RANGE)")
