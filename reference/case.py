"""The Case: a frozen, JSON-round-trippable description of one attention batch.

A Case is pure data. `seed` fixes every tensor value (see `reference.inputs.materialize`), so a Case
file alone replays a finding. Every knob is keyword-only and its default means "feature off".
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class CaseError(ValueError):
    """A Case field holds a value outside what the semantics allow; the message names the field."""


class DType(Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"

    @property
    def torch(self) -> torch.dtype:
        return getattr(torch, self.value)


class AttentionType(Enum):
    """vLLM's attention types (the named presets of the mask semantics)."""

    DECODER = "decoder"  # causal, bottom-right aligned over context + new tokens, paged cache
    ENCODER = "encoder"  # bidirectional over the sequence itself, no cache
    ENCODER_ONLY = "encoder_only"  # bidirectional, no cache; windows are symmetric
    ENCODER_DECODER = "encoder_decoder"  # decoder queries attend every encoder key (cross cache)
    KERNEL = "kernel"  # a raw kernel call: query_len and key_len independent, causal / alignment / window explicit


class CausalAlignment(Enum):
    """Where the causal diagonal sits when query_len < kv_len (or >)."""

    BOTTOM_RIGHT = "bottom_right"  # the last query sees every key (vLLM, flash-attn >= 2.1)
    TOP_LEFT = "top_left"  # query j sees keys 0..j (SDPA's is_causal)


class AlibiConvention(Enum):
    """How an ALiBi slope turns into a bias; identical under a causal mask, different without one."""

    SIGNED = "signed"  # slope * (k_pos - q_pos)   (vLLM's xformers and paged kernels)
    SYMMETRIC = "symmetric"  # -slope * |k_pos - q_pos|   (flash-attn's non-causal ALiBi)
    SQRT = "sqrt"  # -slope * sqrt(q_pos - k_pos) for earlier keys, 0 for later ones (vLLM's use_alibi_sqrt)


class ValueDistribution(Enum):
    """How q/k/v values are drawn; each exposes a different class of kernel error."""

    NORMAL = "normal"  # N(0, 1): logits O(logit_scale)
    OUTLIERS = "outliers"  # a few channels and tokens 20x larger: stresses the running max
    SHARP = "sharp"  # keys are near-duplicates of a few prototypes: peaked, near-tied softmax
    RECENT = "recent"  # a recency bias, as trained decoders have: the latest keys carry weight, mask edges show
    EDGE = "edge"  # each sequence's last key holds about 3/4 of the weight at any length and logit scale: the key a
    #                full row's one-key mask shift drops (cross attention over thousands of keys is not blind)


class KVLayout(Enum):
    """Physical layout of the paged KV cache (see reference/layouts.py for shapes)."""

    FLASH_NHD = "flash_nhd"  # [2, num_blocks, block_size, H_kv, D]
    FLASH_HND = "flash_hnd"  # same logical shape, stored [2, num_blocks, H_kv, block_size, D]
    FLASHINFER_NHD = "flashinfer_nhd"  # [num_blocks, 2, block_size, H_kv, D]
    FLASHINFER_HND = "flashinfer_hnd"  # [num_blocks, 2, H_kv, block_size, D]
    PAGED_V0 = "paged_v0"  # key [nb, H_kv, D/x, bs, x], value [nb, H_kv, D, bs]
    MLA_LATENT = "mla_latent"  # [nb, bs, kv_lora_rank + rope_dim]: one latent "head"; value = its prefix
    # vLLM 0.26's packed cache: logical [nb, H_kv, bs, 2*D], K in [..., :D], V in [..., D:], stored NHD or HND
    VLLM_NHD = "vllm_nhd"  # memory [nb, bs, H_kv, 2*D]
    VLLM_HND = "vllm_hnd"  # memory [nb, H_kv, bs, 2*D]


class BlockTableKind(Enum):
    """How sequences' logical blocks map to physical blocks of the pool."""

    CONTIGUOUS = "contiguous"  # sequence i owns a run of consecutive blocks after the null block
    SHUFFLED = "shuffled"  # a random permutation of the pool; block 0 is the reserved null block
    SHARED_PREFIX = "shared_prefix"  # the first prefix_blocks blocks are the same physical blocks
    SPARSE = "sparse"  # few used blocks scattered in a pool 4x larger than needed


class KVCacheDType(Enum):
    AUTO = "auto"  # the model dtype
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    INT8_KV = "int8_kv"  # int8 fork level 1: int8 K (per token-head scale), int8 V (per channel)
    INT8_K_FP16_V = "int8_k_fp16_v"  # int8 fork level 2: int8 K (per token-head scale), 16-bit V
    # vLLM 0.26's dynamic per-(token, head) modes: K and V each get scale = max(amax / QMAX, 1e-6),
    # kept in scale caches [num_blocks, block_size, H_kv]; the Quant's static scales are unused.
    INT8_PER_TOKEN_HEAD = "int8_per_token_head"
    FP8_PER_TOKEN_HEAD = "fp8_per_token_head"
    # ... and its int4 mode: Hadamard-rotated, asymmetric 4-bit codes two per byte (reference/int4.py).
    INT4_PER_TOKEN_HEAD = "int4_per_token_head"

    @property
    def is_fp8(self) -> bool:
        """fp8 with static (per tensor / per head) scales."""
        return self in (KVCacheDType.FP8_E4M3, KVCacheDType.FP8_E5M2)

    @property
    def is_int8(self) -> bool:
        """The int8 fork's modes."""
        return self in (KVCacheDType.INT8_KV, KVCacheDType.INT8_K_FP16_V)

    @property
    def is_per_token_head(self) -> bool:
        return self in (KVCacheDType.INT8_PER_TOKEN_HEAD, KVCacheDType.FP8_PER_TOKEN_HEAD,
                        KVCacheDType.INT4_PER_TOKEN_HEAD)

    @property
    def is_one_byte(self) -> bool:
        """Keys stored one byte per element."""
        return self.is_fp8 or self.is_int8 or self in (KVCacheDType.INT8_PER_TOKEN_HEAD, KVCacheDType.FP8_PER_TOKEN_HEAD)

    def holds_heads(self, head_size: int, head_size_v: int) -> bool:
        """Whether this kv dtype can store vectors of these sizes: int4's rotation needs powers of two."""
        return self != KVCacheDType.INT4_PER_TOKEN_HEAD or all(d >= 2 and is_power_of_two(d)
                                                                for d in (head_size, head_size_v))

    def holds(self, dtype: DType) -> bool:
        """Whether a cache of this kv dtype can hold a model of `dtype`: a 16-bit cache holds its own dtype only."""
        return self not in (KVCacheDType.BFLOAT16, KVCacheDType.FLOAT16) or self.value == dtype.value


class ScaleGranularity(Enum):
    PER_TENSOR = "per_tensor"
    PER_KV_HEAD = "per_kv_head"


@dataclass(frozen=True)
class SequenceSpec:
    """One sequence of the batch: `context_len` keys already cached, `query_len` new tokens.

    For encoder_decoder the keys are the `encoder_len` encoder tokens in the cross cache.
    """

    query_len: int
    context_len: int = 0
    encoder_len: int = 0
    key_len: int | None = None  # attn_type=kernel only: keys of this sequence (any relation to query_len)


@dataclass(frozen=True)
class Alibi:
    slopes: tuple[float, ...]  # one per query head
    convention: AlibiConvention = AlibiConvention.SIGNED


@dataclass(frozen=True)
class BlockSparse:
    """vLLM's block-sparse pattern (BlocksparseParams); see reference/block_sparse.py.

    The case's heads are tensor-parallel rank `tp_rank`'s share of `tp_size * num_heads` heads
    (vLLM's active_head_range); the vertical-stride offset of a head depends on its global index.
    """

    block_size: int = 16
    local_blocks: int = 2
    vert_stride: int = 4
    homo_head: bool = False  # every head the same vertical blocks
    homo_head_group: bool = False  # the query heads of one kv head share vertical blocks
    head_sliding_step: int | None = None  # None: derived as vLLM does (block_sparse.sliding_step)
    tp_rank: int = 0
    tp_size: int = 1


@dataclass(frozen=True)
class GlobalPrefix:
    """vLLM's R-SWA: each sequence's first `prefix_lens[i]` tokens (its prompt) stay visible to every
    later query; other keys only within the last `window` positions (the query's own included)."""

    window: int
    prefix_lens: tuple[int, ...]  # one per sequence


@dataclass(frozen=True)
class Quant:
    """KV-cache quantization. Scales are the dequantization multipliers (stored = value / scale)."""

    kv_cache_dtype: KVCacheDType = KVCacheDType.AUTO
    granularity: ScaleGranularity = ScaleGranularity.PER_TENSOR
    k_scales: tuple[float, ...] = (1.0,)  # one value, or one per kv head (PER_KV_HEAD)
    v_scales: tuple[float, ...] = (1.0,)
    # compute the k / v scales as amax / range, as calc_kv_scales does (over every key and value: the first forward
    # stores them all), and the query's with q_fp8_scale set (1.0 there then: the value is computed, not given)
    dynamic_scales: bool = False
    # mla_latent with dynamic_scales: the scale's amax reads the first n dimensions of each row only (vLLM's
    # MLAAttention.calc_kv_scales takes amax(kv_c_normed), the latent, not the rope key); None: the whole row
    dynamic_amax_dims: int | None = None
    q_fp8_scale: float | None = None  # quantize the query to fp8 e4m3 with this scale


@dataclass(frozen=True)
class CacheSpec:
    """The paged KV cache a decoder / cross-attention case reads through its block tables."""

    layout: KVLayout = KVLayout.FLASH_NHD
    block_size: int = 16
    table: BlockTableKind = BlockTableKind.CONTIGUOUS
    prefix_blocks: int = 0  # SHARED_PREFIX: blocks shared by every sequence
    spare_blocks: int = 0  # never-referenced blocks in the pool (canaries)
    padding_slots: int = 0  # trailing slot_mapping entries of -1 (CUDA-graph padding)
    quant: Quant = field(default_factory=Quant)
    # A leading layers dimension (vLLM's include_num_layers_dimension): 0 = none; L >= 1 = one tensor
    # holds L layers in vLLM's stride order and the case reads layer `layer` (the others are canaries).
    layers: int = 0
    layer: int = 0
    # Unused slots hold NaN (a read past a sequence poisons its row) or, with finite_canaries, a loud
    # finite value (for kernels that load whole pages and zero the unused slots' probabilities).
    finite_canaries: bool = False


@dataclass(frozen=True)
class Values:
    distribution: ValueDistribution = ValueDistribution.NORMAL
    logit_scale: float = 1.0  # multiplies q: logits grow ~linearly with it
    # outliers only: each sequence's last key is one of the 8x tokens (drawn since 2026-11-23; False, the default,
    # keeps the tensors of cases saved before)
    outliers_at_edge: bool = False
    # each sequence's last value times this (drawn since 2026-11-24; 1.0 keeps saved cases' tensors): the key a
    # one-key mask shift of a decode row moves, made to show without changing where the softmax puts its weight
    edge_value_gain: float = 1.0
    # (start, end): the query's dimensions [start, end) are 0 in every head. An MLA layer absorbs its query as
    # q_nope W_UK, which spans qk_nope of the kv_lora_rank latent dimensions: the rest of the absorbed query is 0
    # (backends/mla_projections.py). None (the default) draws every dimension.
    query_zero_dims: tuple[int, int] | None = None


@dataclass(frozen=True)
class Case:
    """One batch: sequences, heads, dtype and every attention feature, all explicit."""

    sequences: tuple[SequenceSpec, ...]
    attn_type: AttentionType = AttentionType.DECODER
    num_heads: int = 4
    num_kv_heads: int = 4
    head_size: int = 64
    head_size_v: int | None = None  # None: same as head_size
    dtype: DType = DType.BFLOAT16
    scale: float | None = None  # None: head_size ** -0.5
    sliding_window: int | None = None  # vLLM's W: the last W keys, the query's own included
    alibi: Alibi | None = None
    soft_cap: float | None = None
    sinks: tuple[float, ...] | None = None  # one logit per query head
    attn_chunk_size: int | None = None  # chunked local attention
    block_sparse: BlockSparse | None = None
    # vLLM 0.26's extra decoder mask rules (triton unified attention; reference/visibility.py):
    # PrefixLM: per sequence, inclusive (start, end) position ranges whose tokens see each other both ways.
    bidirectional_ranges: tuple[tuple[tuple[int, int], ...], ...] | None = None
    global_prefix: GlobalPrefix | None = None  # R-SWA (replaces sliding_window)
    # Chunks of C = sliding_window // (chunk_lookback + 1) positions; a query sees its own chunk and the
    # chunk_lookback chunks before it (replaces the sliding window, which only sets C).
    chunk_lookback: int | None = None
    qq_bias: bool = False  # an additive [max_query_len, max_query_len] bias between new tokens (Inputs.qq_bias)
    # attn_type=kernel only: the kernel API's own causal flag, its alignment, and a (left, right) window
    # in key positions from the query's aligned position (None: unbounded on that side).
    causal: bool = False
    causal_alignment: CausalAlignment = CausalAlignment.BOTTOM_RIGHT
    window: tuple[int | None, int | None] | None = None
    cache: CacheSpec | None = None  # decoder / encoder_decoder / kernel: the paged cache (None: contiguous)
    values: Values = field(default_factory=Values)
    # How the kernel call spells semantics that have several spellings (name, spelling), e.g.
    # ("unbounded_window", "minus_one"): a property of the call, never of the math (the oracle ignores it).
    encodings: tuple[tuple[str, str], ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        validate(self)

    # Derived quantities (never stored, so they cannot disagree with the fields).
    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else self.head_size**-0.5

    @property
    def value_size(self) -> int:
        return self.head_size_v if self.head_size_v is not None else self.head_size

    @property
    def num_tokens(self) -> int:
        return sum(s.query_len for s in self.sequences)

    @property
    def query_lens(self) -> list[int]:
        return [s.query_len for s in self.sequences]

    @property
    def kv_lens(self) -> list[int]:
        return [kv_len(self.attn_type, s) for s in self.sequences]

    @property
    def query_starts(self) -> list[int]:
        """B + 1 offsets of each sequence's first token in the flat query: Inputs.query_start_loc on the host (read
        there, an adapter on a GPU would wait for a device-to-host copy per sequence)."""
        return [0, *itertools.accumulate(self.query_lens)]

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens, default=0)

    @property
    def max_kv_len(self) -> int:
        return max(self.kv_lens, default=0)

    @property
    def is_causal(self) -> bool:
        if self.attn_type == AttentionType.KERNEL:
            return self.causal
        return self.attn_type == AttentionType.DECODER

    def query_offset(self, seq: SequenceSpec) -> int:
        """Position of the sequence's first query among its keys (may be negative when q > k).

        Bottom-right alignment puts the last query at the last key: offset = kv_len - query_len
        (a decoder's context_len); top-left puts query j at position j.
        """
        if self.attn_type == AttentionType.KERNEL:
            if self.causal_alignment == CausalAlignment.TOP_LEFT:
                return 0
            return kv_len(self.attn_type, seq) - seq.query_len
        return seq.context_len if self.attn_type == AttentionType.DECODER else 0

    @property
    def uses_cache(self) -> bool:
        """Whether keys may live in a paged cache (kernel cases: the raw paged APIs, every key cached)."""
        return self.attn_type in (AttentionType.DECODER, AttentionType.ENCODER_DECODER, AttentionType.KERNEL)

    def encoding(self, name: str, default: str) -> str:
        """The spelling this case asks the kernel call to use for `name` (default: the adapter's own)."""
        return dict(self.encodings).get(name, default)

    @property
    def window_bounds(self) -> tuple[int | None, int | None]:
        """(left, right) key distances a query may see; None is unbounded (flash-attn's -1).

        As vLLM's backends set it: encoder_only gets the symmetric (W-1, W-1); every other type,
        attn_type=encoder included, gets (W-1, 0), which for an encoder also hides later keys.
        """
        if self.attn_type == AttentionType.KERNEL:
            return self.window if self.window is not None else (None, None)
        if self.sliding_window is None:
            return (None, None)
        w = self.sliding_window - 1
        if self.attn_type == AttentionType.ENCODER_ONLY:
            return (w, w)  # vLLM passes (W-1, W-1) for bidirectional encoders
        return (w, 0)

    @property
    def kv_cache_dtype(self) -> KVCacheDType:
        return self.cache.quant.kv_cache_dtype if self.cache is not None else KVCacheDType.AUTO

    def features(self) -> frozenset[str]:
        """Names of the features this case switches on (used by reports and strategies)."""
        on = set()
        if self.num_kv_heads != self.num_heads:
            on.add("mqa" if self.num_kv_heads == 1 else "gqa")
        if self.sliding_window is not None:
            on.add("window")
        if self.alibi is not None:
            on.add("alibi")
        if self.soft_cap is not None:
            on.add("soft_cap")
        if self.sinks is not None:
            on.add("sinks")
        if self.attn_chunk_size is not None:
            on.add("chunked_local")
        if self.block_sparse is not None:
            on.add("block_sparse")
        if self.bidirectional_ranges is not None:
            on.add("prefix_lm")
        if self.global_prefix is not None:
            on.add("global_prefix")
        if self.chunk_lookback is not None:
            on.add("chunk_lookback")
        if self.qq_bias:
            on.add("qq_bias")
        if self.head_size_v is not None and self.head_size_v != self.head_size:
            on.add("head_size_v")
        if self.cache is not None:
            on.add("paged")
            if self.kv_cache_dtype not in (KVCacheDType.AUTO,):
                on.add(f"kv_{self.kv_cache_dtype.value}")
            if self.cache.quant.q_fp8_scale is not None:
                on.add("q_fp8")
            if self.cache.quant.dynamic_scales:
                on.add("dynamic_scales")
            if self.cache.layers:
                on.add("layered_cache")
        if any(s.query_len == 0 for s in self.sequences):
            on.add("empty_query")
        if any(0 < s.query_len and s.context_len > 0 for s in self.sequences):
            on.add("context")
        if self.attn_type == AttentionType.KERNEL:
            if self.cache is not None:
                on.add("paged_kernel")
            if self.causal and self.causal_alignment == CausalAlignment.TOP_LEFT:
                on.add("top_left")
            if self.window is not None:
                on.add("window")
            if any(s.query_len > (s.key_len or 0) for s in self.sequences):
                on.add("more_queries_than_keys")
        return frozenset(on)

    # JSON round trip ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return _to_jsonable(self)

    def to_json(self, **kw: Any) -> str:
        if kw:
            return json.dumps(self.to_dict(), **kw)
        text = self.__dict__.get("_json")  # a frozen Case's JSON never changes: a row, a beat and a repeat check
        if text is None:                    # each ask for it (0.14 ms a case on one CPU thread)
            text = json.dumps(self.to_dict())
            object.__setattr__(self, "_json", text)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Case":
        return _from_jsonable(cls, data)

    @classmethod
    def from_json(cls, text: str) -> "Case":
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> "Case":
        return dataclasses.replace(self, **changes)

    def select(self, order: list[int]) -> "Case":
        """The case of sequences `order` (in that order), their per-sequence rules moved with them."""
        per_seq: dict[str, Any] = {}
        if self.bidirectional_ranges is not None:
            per_seq["bidirectional_ranges"] = tuple(self.bidirectional_ranges[i] for i in order)
        if self.global_prefix is not None:
            per_seq["global_prefix"] = dataclasses.replace(
                self.global_prefix, prefix_lens=tuple(self.global_prefix.prefix_lens[i] for i in order))
        return self.replace(sequences=tuple(self.sequences[i] for i in order), **per_seq)


def kv_len(attn_type: AttentionType, seq: SequenceSpec) -> int:
    """Number of keys sequence `seq` attends over."""
    if attn_type == AttentionType.DECODER:
        return seq.context_len + seq.query_len
    if attn_type == AttentionType.ENCODER_DECODER:
        return seq.encoder_len
    if attn_type == AttentionType.KERNEL:
        return seq.key_len or 0
    return seq.query_len


# --- validation ----------------------------------------------------------------------------------

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


# --- JSON ----------------------------------------------------------------------------------------

def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, Enum):
        return obj.value
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [_to_jsonable(x) for x in obj]
    return obj


def _from_jsonable(tp: Any, data: Any) -> Any:
    import typing

    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _from_jsonable(args[0], data)
    if origin is tuple:
        (elem, *_rest) = typing.get_args(tp)
        return tuple(_from_jsonable(elem, x) for x in data)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(data)
        except ValueError:
            raise CaseError(f"{tp.__name__}={data!r}: one of {[m.value for m in tp]}") from None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        unknown = set(data) - known
        if unknown:
            raise CaseError(f"{tp.__name__}: unknown fields {sorted(unknown)}; known: {sorted(known)}")
        return tp(**{k: _from_jsonable(hints[k], v) for k, v in data.items()})
    if tp is float and isinstance(data, int):
        return float(data)
    return data
