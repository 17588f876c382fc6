"""The Case: a frozen, JSON-round-trippable description of one attention batch.

A Case is pure data. `seed` fixes every tensor value (see `reference.inputs.materialize`), so a Case
file alone replays a finding. Every knob is keyword-only and its default means "feature off".
Its vocabulary (reference/kinds.py), parts (reference/specs.py) and checks (reference/validation.py) live in
modules of their own; `reference.case` names them all, as callers import them.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from .kinds import (AlibiConvention, AttentionType, BlockTableKind, CaseError, CausalAlignment, DType, KVCacheDType,
                    KVLayout, ScaleGranularity, ValueDistribution, ValueSource, is_power_of_two)
from .specs import Alibi, BlockSparse, CacheSpec, GlobalPrefix, Quant, SequenceSpec, Values, kv_len
from .validation import validate

if TYPE_CHECKING:
    import torch

__all__ = ["AlibiConvention", "AttentionType", "BlockTableKind", "CaseError", "CausalAlignment", "DType",
           "KVCacheDType", "KVLayout", "ScaleGranularity", "ValueDistribution", "ValueSource", "is_power_of_two", "Alibi",
           "BlockSparse", "CacheSpec", "GlobalPrefix", "Quant", "SequenceSpec", "Values", "kv_len", "validate", "Case"]


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

    @property
    def alibi_held_in(self) -> torch.dtype | None:
        """The dtype the ALiBi bias reaches the kernel in (Alibi.in_model_dtype), None where it is computed exactly."""
        return self.dtype.torch if self.alibi is not None and self.alibi.in_model_dtype else None

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
