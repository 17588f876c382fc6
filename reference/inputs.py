"""materialize(case, device) -> Inputs: every tensor a backend or the oracle needs, from the seed.

Values are drawn on the CPU from a generator seeded by `case.seed` and only then moved, so the same
Case gives bit-identical tensors on any machine and device.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields

import torch
from torch import Tensor

from . import int4, layouts, quant, transfer
from .case import AttentionType, BlockTableKind, Case, KVCacheDType, KVLayout
from .layouts import PagedCache
from .values import draw_keys_values, draw_queries


@dataclass(frozen=True)
class KVCache:
    """A paged cache plus the scales needed to read it back (dequantization multipliers)."""

    paged: PagedCache
    kv_cache_dtype: KVCacheDType
    k_scale: Tensor  # [1] or [H_kv], float32
    v_scale: Tensor
    k_scale_cache: Tensor | None = None  # int8 fork: per token-head key scales [num_blocks, H_kv, block_size]
    v_channel_scale: Tensor | None = None  # int8_kv: per-channel value scale [H_kv, D_v]
    k_token_scales: Tensor | None = None  # per-token-head modes: [num_blocks, block_size, H_kv] float32
    v_token_scales: Tensor | None = None

    def clone(self) -> "KVCache":
        return KVCache(self.paged.clone(), self.kv_cache_dtype, self.k_scale, self.v_scale, _clone(self.k_scale_cache),
                       self.v_channel_scale, _clone(self.k_token_scales), _clone(self.v_token_scales))

    @property
    def scale_caches(self) -> dict[str, Tensor]:
        """The per-token scale caches this cache keeps (indexed by block first, written with the tokens)."""
        names = ("k_scale_cache", "k_token_scales", "v_token_scales")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


def _clone(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.clone()


@dataclass(frozen=True)
class Inputs:
    """The canonical inputs of one Case. Shapes use N = num_tokens, B = number of sequences."""

    case: Case
    query: Tensor  # [N, H, D] in case.dtype
    key: Tensor  # [N_new + padding_slots, H_kv, D]: keys not yet cached (encoder: all keys);
    value: Tensor  # [N_new + padding_slots, H_kv, D_v]   trailing padding rows have slot -1
    keys: tuple[Tensor, ...]  # per sequence, every key it attends over [kv_len, H_kv, D], case.dtype
    values: tuple[Tensor, ...]  # per sequence [kv_len, H_kv, D_v]
    query_start_loc: Tensor  # [B + 1] int32
    key_start_loc: Tensor  # [B + 1] int32, offsets of each sequence's keys in `key`
    seq_lens: Tensor  # [B] int32: keys per sequence (context + query, or encoder_len)
    context_lens: Tensor  # [B] int32
    cache: KVCache | None = None  # after the new tokens were written (what vLLM's forward reads)
    cache_before_write: KVCache | None = None  # context only: for kernels that write themselves
    block_table: Tensor | None = None  # [B, max_blocks] int32; unused entries point at null block 0
    slot_mapping: Tensor | None = None  # [N_new + padding_slots] int64; -1 is padding
    query_fp8: Tensor | None = None  # [N, H, D] float8_e4m3fn when case.cache.quant.q_fp8_scale is set
    q_scale: Tensor | None = None  # [1] float32
    sinks: Tensor | None = None  # [H] float32
    alibi_slopes: Tensor | None = None  # [H] float32
    qq_bias: Tensor | None = None  # [max_query_len, max_query_len] float32: added to the score of query i (of its
    #                                sequence's new tokens) on new token j, every sequence and head alike
    # reference.attention.sequence_kv's keys and values by (sequence, dtype): the oracle's pass and the blind check
    # read the same ones. Not an input: never compared, copied or moved; fuzz.compare.evaluate empties it.
    widened: dict[tuple[int, torch.dtype], tuple[Tensor, Tensor]] = field(default_factory=dict, init=False, repr=False,
                                                                           compare=False)

    @property
    def device(self) -> torch.device:
        return self.query.device


def materialize(case: Case, device: torch.device | str = "cpu") -> Inputs:
    """Deterministic inputs for `case` on `device` (same case and seed: bit-identical tensors)."""
    gen = torch.Generator().manual_seed(case.seed)
    dtype = case.dtype.torch
    query = draw_queries(case, gen)
    keys, values = draw_keys_values(case, gen)
    query = query.to(dtype)
    keys = [k.to(dtype) for k in keys]
    values = [v.to(dtype) for v in values]

    kv_lens = torch.tensor(case.kv_lens, dtype=torch.int32)
    query_start_loc = torch.tensor(case.query_starts, dtype=torch.int32)
    new_keys, new_values = _new_tokens(case, keys, values)
    key_start_loc = torch.tensor([0, *itertools.accumulate(k.shape[0] for k in new_keys)], dtype=torch.int32)
    key = torch.cat(new_keys) if new_keys else torch.empty(0, case.num_kv_heads, case.head_size, dtype=dtype)
    value = torch.cat(new_values) if new_values else torch.empty(0, case.num_kv_heads, case.value_size, dtype=dtype)

    extra: dict = {}
    if case.cache is not None:
        extra = _paged_inputs(case, keys, values, key, value, gen)
    q_fp8_scale = case.cache.quant.q_fp8_scale if case.cache is not None else None
    if q_fp8_scale is not None and case.cache.quant.dynamic_scales:  # calc_kv_scales: the query's amax too
        q_fp8_scale = quant.dynamic_scale(query, quant.Q_RANGE)
    if q_fp8_scale is not None:
        extra["query_fp8"] = quant.quantize_fp8(query, q_fp8_scale, KVCacheDType.FP8_E4M3)
        extra["q_scale"] = torch.tensor([q_fp8_scale], dtype=torch.float32)
    if case.sinks is not None:
        extra["sinks"] = torch.tensor(case.sinks, dtype=torch.float32)
    if case.alibi is not None:
        extra["alibi_slopes"] = torch.tensor(case.alibi.slopes, dtype=torch.float32)

    if case.qq_bias:  # own generator: the other draws keep their order
        n = case.max_query_len
        extra["qq_bias"] = 2.0 * torch.randn(n, n, generator=torch.Generator().manual_seed(case.seed ^ 0xB1A5))
    context_lens = torch.tensor([s.context_len for s in case.sequences], dtype=torch.int32)
    extra.setdefault("key", key)
    extra.setdefault("value", value)
    inputs = Inputs(case=case, query=query, keys=tuple(keys), values=tuple(values),
                    query_start_loc=query_start_loc, key_start_loc=key_start_loc, seq_lens=kv_lens,
                    context_lens=context_lens, **extra)
    return to_device(inputs, device)


def to_device(inputs: Inputs, device: torch.device | str) -> Inputs:
    """The same inputs with every tensor moved to `device` (from the CPU: in one copy, `reference.transfer`)."""
    device = torch.device(device)
    if device.type == "cpu" and inputs.query.device.type == "cpu":
        return inputs
    if device.type == "cpu" or inputs.query.device.type != "cpu":
        return map_tensors(inputs, lambda t: t.to(device))
    # A paged cache's storage moves on its own: kernels and vLLM's layer bind it as the whole allocation it is.
    staged: list[Tensor] = []
    map_tensors(inputs, lambda t: staged.append(t) or t, storage=lambda t: t)
    moved = iter(transfer.move_all(staged, device))
    return map_tensors(inputs, lambda t: next(moved), storage=lambda t: transfer.move(t, device))


def map_tensors(inputs: Inputs, fn, storage=None) -> Inputs:
    """Inputs with every tensor t replaced by fn(t), in one fixed order; a paged cache's tensors by storage(t)
    (default fn) through `with_storage`, so a layered cache keeps its aliasing and memory order."""
    storage = fn if storage is None else storage

    def move(x):
        if x is None:
            return None
        if isinstance(x, Tensor):
            return fn(x)
        if isinstance(x, tuple):
            return tuple(move(t) for t in x)
        if isinstance(x, KVCache):
            return KVCache(x.paged.with_storage(storage), x.kv_cache_dtype, move(x.k_scale), move(x.v_scale),
                           move(x.k_scale_cache), move(x.v_channel_scale), move(x.k_token_scales), move(x.v_token_scales))
        return x

    moved = {f.name: move(getattr(inputs, f.name)) for f in fields(inputs) if f.init and f.name != "case"}
    return Inputs(case=inputs.case, **moved)


def _new_tokens(case: Case, keys: list[Tensor], values: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """The keys/values not yet in a cache: a decoder's query tokens, or every key otherwise."""
    if case.attn_type == AttentionType.DECODER:
        return ([k[s.context_len:] for k, s in zip(keys, case.sequences)],
                [v[s.context_len:] for v, s in zip(values, case.sequences)])
    return list(keys), list(values)


# --- the paged cache -----------------------------------------------------------------------------

def block_tables(case: Case, gen: torch.Generator) -> tuple[Tensor, int]:
    """Block table [B, max_blocks] (unused entries 0, the null block) and the pool size."""
    spec = case.cache
    assert spec is not None
    bs = spec.block_size
    counts = [math.ceil(n / bs) for n in case.kv_lens]
    shared = spec.prefix_blocks if spec.table == BlockTableKind.SHARED_PREFIX else 0
    needed = sum(c - shared for c in counts) + shared
    pool = 1 + needed + spec.spare_blocks  # block 0 is the reserved null block
    if spec.table == BlockTableKind.SPARSE:
        pool = 1 + 4 * needed + spec.spare_blocks
    if spec.table in (BlockTableKind.SHUFFLED, BlockTableKind.SPARSE):
        order = (torch.randperm(pool - 1, generator=gen) + 1)[:needed].tolist()
    else:
        order = list(range(1, needed + 1))
    table = torch.zeros(len(counts), max(counts + [1]), dtype=torch.int32)
    prefix, cursor = order[:shared], shared
    for i, c in enumerate(counts):
        own = order[cursor:cursor + c - min(shared, c)]
        cursor += len(own)
        row = (prefix[:c] + own)[:c]
        table[i, :c] = torch.tensor(row, dtype=torch.int32)
    return table, pool


def slots_for(block_table_row: Tensor, positions: Tensor, block_size: int) -> Tensor:
    """slot = physical block * block_size + offset, for logical token positions of one sequence."""
    return block_table_row.to(torch.int64)[positions // block_size] * block_size + positions % block_size


def _scales(case: Case, keys: list[Tensor], values: list[Tensor]) -> tuple[Tensor, Tensor]:
    q = case.cache.quant
    if q.dynamic_scales:
        all_k, all_v = torch.cat(keys), torch.cat(values)
        if q.dynamic_amax_dims is not None:  # vLLM's MLA layer: the latent's amax, not the rope key's
            all_k = all_k[..., : q.dynamic_amax_dims]
        k_scale = torch.tensor([quant.dynamic_scale(all_k, quant.K_RANGE)])
        if case.cache.layout == KVLayout.MLA_LATENT:  # one latent tensor, one scale
            return k_scale, k_scale
        return k_scale, torch.tensor([quant.dynamic_scale(all_v, quant.V_RANGE)])
    return torch.tensor(q.k_scales, dtype=torch.float32), torch.tensor(q.v_scales, dtype=torch.float32)


def empty_cache(case: Case, num_blocks: int, v_channel_scale: Tensor | None, k_scale: Tensor,
                v_scale: Tensor) -> KVCache:
    """A cache full of canaries (NaN, 0x7F for fp8; int8 key scales NaN) in the case's layout."""
    spec = case.cache
    kvd = spec.quant.kv_cache_dtype
    model = case.dtype.torch
    key_dtype = {KVCacheDType.FP8_E4M3: torch.float8_e4m3fn, KVCacheDType.FP8_E5M2: torch.float8_e5m2,
                 KVCacheDType.INT8_KV: torch.int8, KVCacheDType.INT8_K_FP16_V: torch.int8,
                 KVCacheDType.INT8_PER_TOKEN_HEAD: torch.int8,
                 KVCacheDType.FP8_PER_TOKEN_HEAD: torch.float8_e4m3fn,
                 KVCacheDType.INT4_PER_TOKEN_HEAD: torch.uint8}.get(kvd, model)
    value_dtype = model if kvd == KVCacheDType.INT8_K_FP16_V else key_dtype
    per_byte = 2 if kvd == KVCacheDType.INT4_PER_TOKEN_HEAD else 1  # int4: two codes per stored byte
    paged = layouts.allocate(spec.layout, num_blocks, spec.block_size, case.num_kv_heads, case.head_size // per_byte,
                             case.value_size // per_byte, key_dtype, value_dtype, layers=spec.layers,
                             layer=spec.layer, finite=spec.finite_canaries)
    poison = layouts.FINITE_CANARY if spec.finite_canaries else float("nan")
    k_scale_cache = k_tokens = v_tokens = None
    if kvd.is_int8:
        k_scale_cache = torch.full((num_blocks, case.num_kv_heads, spec.block_size), poison)
    if kvd.is_per_token_head:
        k_tokens = torch.full((num_blocks, spec.block_size, case.num_kv_heads), poison)
        v_tokens = torch.full((num_blocks, spec.block_size, case.num_kv_heads), poison)
    return KVCache(paged, kvd, k_scale, v_scale, k_scale_cache, v_channel_scale, k_tokens, v_tokens)


def write_kv(cache: KVCache, key: Tensor, value: Tensor, slot_mapping: Tensor) -> None:
    """Quantize new tokens as the cache dtype says and store them at their slots (-1 skipped)."""
    kvd = cache.kv_cache_dtype
    if kvd.is_fp8:
        k = quant.quantize_fp8(key, _per_head(cache.k_scale), kvd)
        v = quant.quantize_fp8(value, _per_head(cache.v_scale), kvd)
    elif kvd.is_int8:
        token_scale = quant.per_token_head_int8_scale(key)  # [N, H_kv]
        k = quant.quantize_int8(key, token_scale[..., None])
        v = quant.quantize_int8(value, cache.v_channel_scale) if kvd == KVCacheDType.INT8_KV else value
        keep = slot_mapping >= 0
        at = _block_offset(slot_mapping[keep], cache.paged.block_size)
        cache.k_scale_cache.permute(0, 2, 1)[at] = token_scale[keep].to(cache.k_scale_cache.dtype)
    elif kvd.is_per_token_head:
        if kvd == KVCacheDType.INT4_PER_TOKEN_HEAD:  # the "scales" carry the zero points in their low bits
            (k, k_scales), (v, v_scales) = int4.encode(key), int4.encode(value)
        else:
            k_scales, v_scales = quant.per_token_head_scale(key, kvd), quant.per_token_head_scale(value, kvd)  # [N, H_kv]
            k, v = quant.quantize_per_token_head(key, k_scales, kvd), quant.quantize_per_token_head(value, v_scales, kvd)
        keep = slot_mapping >= 0
        at = _block_offset(slot_mapping[keep], cache.paged.block_size)
        cache.k_token_scales[at], cache.v_token_scales[at] = k_scales[keep], v_scales[keep]
    else:
        k, v = key, value
    layouts.write(cache.paged, k, v, slot_mapping)


def read_kv(cache: KVCache, block_table_row: Tensor, length: int, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """Dequantized keys and values [length, H_kv, D] of one sequence, read through its blocks."""
    k, v = layouts.gather(cache.paged, block_table_row, length)
    kvd = cache.kv_cache_dtype
    if kvd.is_int8 or kvd.is_per_token_head:
        bs = cache.paged.block_size
        at = _block_offset(slots_for(block_table_row, torch.arange(length, device=block_table_row.device), bs), bs)
    if kvd.is_int8:
        token_scale = cache.k_scale_cache.permute(0, 2, 1)[at]  # [length, H_kv]
        k = quant.dequantize(k, token_scale[..., None], dtype)
        v = quant.dequantize(v, cache.v_channel_scale, dtype) if kvd == KVCacheDType.INT8_KV else v.to(dtype)
        return k, v
    if kvd.is_per_token_head:
        k_scales, v_scales = cache.k_token_scales[at], cache.v_token_scales[at]  # [length, H_kv]
        if kvd == KVCacheDType.INT4_PER_TOKEN_HEAD:
            return int4.decode(k, k_scales).to(dtype), int4.decode(v, v_scales).to(dtype)
        return quant.dequantize(k, k_scales[..., None], dtype), quant.dequantize(v, v_scales[..., None], dtype)
    return quant.dequantize(k, _per_head(cache.k_scale), dtype), quant.dequantize(v, _per_head(cache.v_scale), dtype)


def _block_offset(slots: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """(block, offset) of each slot: where a per-token scale cache keeps that token's scale."""
    return slots // block_size, slots % block_size


def _per_head(scale: Tensor) -> Tensor:
    """[1] or [H_kv] scale shaped to broadcast over [tokens, H_kv, D]."""
    return scale.reshape(1, -1, 1)


def _paged_inputs(case: Case, keys: list[Tensor], values: list[Tensor], key: Tensor, value: Tensor,
                  gen: torch.Generator) -> dict:
    spec = case.cache
    table, pool = block_tables(case, gen)
    k_scale, v_scale = _scales(case, keys, values)
    v_channel = None
    if spec.quant.kv_cache_dtype == KVCacheDType.INT8_KV:
        all_v = torch.cat(values) if values else torch.zeros(1, case.num_kv_heads, case.value_size)
        v_channel = quant.per_channel_int8_scale(all_v)
    before = empty_cache(case, pool, v_channel, k_scale, v_scale)
    # Context tokens are already cached; the new tokens arrive through slot_mapping.
    for i, s in enumerate(case.sequences):
        if case.attn_type == AttentionType.DECODER and s.context_len:
            pos = torch.arange(s.context_len)
            write_kv(before, keys[i][: s.context_len], values[i][: s.context_len], slots_for(table[i], pos, spec.block_size))
    new_slots = []
    for i, s in enumerate(case.sequences):
        start = s.context_len if case.attn_type == AttentionType.DECODER else 0
        pos = torch.arange(start, case.kv_lens[i])
        new_slots.append(slots_for(table[i], pos, spec.block_size))
    slot_mapping = torch.cat(new_slots + [torch.full((spec.padding_slots,), -1, dtype=torch.int64)])
    after = before.clone()
    # Padding rows hold loud garbage: a kernel that writes slot -1 corrupts a real block with it.
    padded_key = torch.cat([key, torch.full((spec.padding_slots, *key.shape[1:]), 30.0, dtype=key.dtype)])
    padded_value = torch.cat([value, torch.full((spec.padding_slots, *value.shape[1:]), 30.0, dtype=value.dtype)])
    write_kv(after, padded_key, padded_value, slot_mapping)
    return dict(cache=after, cache_before_write=before, block_table=table, slot_mapping=slot_mapping,
                key=padded_key, value=padded_value)
