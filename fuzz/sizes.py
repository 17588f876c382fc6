"""Sequence lengths in three tiers, where kernels keep different bugs.

- small: up to Limits.max_context keys, lengths at -1/0/+1 of a block boundary (the default region);
- tile: one sequence with 127-129, 255-257 or 511-513 keys (and 63-65 or 127-129 queries where they
  may be that many): crossing the 128/256/512-key tiles optimized kernels loop over (the small tier
  lands on 63-65);
- long: one sequence with 600 to Limits.max_long_context keys and few queries: decode and
  split-KV territory (flash-decoding splits, the oracle's own 4096-key chunks).
A case draws its tier once; its first sequence has that tier's length, the others stay small, so
a long case costs one long sequence. `small` is the simplest draw: shrinking ends there when the
bug does not need the length.
"""
from __future__ import annotations

from hypothesis import strategies as st

from backends.base import Capabilities, Feature
from reference.case import AttentionType, SequenceSpec

from .cached import either, integers, memo, pick

TIERS = ("small", "tile", "long")
# >= 20% of cases over 128 keys and >= 5% over 512 (measured: benchmarks/results/reach-*.md); long cases
# cost the most to draw and judge, so they get the share the target needs, not more.
TIER_WEIGHTS = ("small",) * 5 + ("tile",) * 4 + ("long",)
TILE_KEYS = (127, 128, 129, 255, 256, 257, 511, 512, 513)  # 63-65 are the small tier's (_edge_length)
TILE_QUERIES = (63, 64, 65, 127, 128, 129)
LONG_KEYS = (600, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097, 8191, 8192, 16383, 16384)
LONG_ENCODER = 1025  # a bidirectional sequence pays keys x keys: the long tier stops here for encoders


def _has(caps: Capabilities, feature: Feature) -> bool:
    return feature in caps.features


def _capped(values: tuple[int, ...], cap: int | None) -> list[int]:
    kept = [v for v in values if cap is None or v <= cap]
    return kept or [min(values) if cap is None else max(1, cap)]


@memo
def _edge_length(max_len: int, block_size: int | None, query_len: int) -> st.SearchStrategy[int]:
    """Context lengths: total length at -1/0/+1 of a block boundary, or of 64 keys, or anywhere."""
    plain = integers(0, max_len)
    tile = pick([63, 64, 65]).map(lambda n: max(0, min(max_len, n - query_len)))  # the 64-key tile edge
    if not block_size:
        return st.one_of(st.just(0), st.just(1), plain, tile)
    blocks = max(1, max_len // block_size)

    def at_edge(pair: tuple[int, int]) -> int:
        n, delta = pair
        return max(0, min(max_len, n * block_size + delta - query_len))

    edge = st.tuples(integers(1, blocks), pick([-1, 0, 1])).map(at_edge)
    return st.one_of(edge, st.just(0), plain, tile)


@memo
def _tier_keys(tier: str, limits, cap: int | None) -> st.SearchStrategy[int]:
    if tier == "tile":
        return pick(_capped(TILE_KEYS, cap))
    return pick(_capped(tuple(k for k in LONG_KEYS if k <= limits.max_long_context) or (600,), cap))


@memo
@st.composite
def sequence_specs(draw, attn_type: AttentionType, caps: Capabilities, limits, block_size: int | None,
                   decode_only: bool = False, tier: str = "small") -> SequenceSpec:
    """One sequence: decode, spec-decode, chunked prefill or prefill, lengths from its tier."""
    max_q = limits.max_query if caps.max_query_len is None else min(limits.max_query, caps.max_query_len)
    min_q = 0 if _has(caps, Feature.EMPTY_QUERY) else 1
    few_q = max(1, min(8, max_q))  # a long sequence's queries: decode-like
    tile_q = _capped(TILE_QUERIES, caps.max_query_len)
    if attn_type == AttentionType.DECODER:
        with_context = _has(caps, Feature.CONTEXT)
        kinds = ["decode", "prefill", "chunked", "spec"] if with_context else ["prefill"]
        if tier == "long" and with_context:
            kinds.remove("prefill")
        kind = "decode" if decode_only and with_context else draw(pick(kinds))
        if kind == "decode":
            q = 1
        elif kind == "spec":
            q = draw(integers(min(2, max_q), min(5, max_q)))
        elif tier == "long":
            q = draw(integers(min_q if kind == "chunked" else 1, few_q))
        elif tier == "tile" and kind == "prefill":
            q = draw(pick(tile_q))  # a prefill's keys are its queries: they cross the tiles
        elif tier == "tile":
            q = draw(either(pick(tile_q), integers(min_q if kind == "chunked" else 1, max(1, max_q))))
        else:
            q = draw(integers(min_q if kind == "chunked" else 1, max_q))
        ctx = 0
        if kind != "prefill":
            if tier == "small":
                ctx = draw(_edge_length(limits.max_context, block_size, q))
            else:
                ctx = max(0, draw(_tier_keys(tier, limits, caps.max_kv_len)) - q)
        if caps.max_kv_len is not None:
            ctx = max(0, min(ctx, caps.max_kv_len - q))
        return SequenceSpec(query_len=q, context_len=ctx)
    if attn_type == AttentionType.ENCODER_DECODER:
        q = draw(integers(min_q, few_q if tier == "long" else max_q))
        if tier == "small":
            enc = draw(either(_edge_length(limits.max_context, block_size, 0), integers(1, 8)))
        else:
            enc = draw(_tier_keys(tier, limits, caps.max_kv_len))
        return SequenceSpec(query_len=q, encoder_len=enc)
    if attn_type == AttentionType.KERNEL:
        # Key counts at, one below and one above the query count, and anywhere (more queries than keys
        # leaves the first rows with no key under bottom-right causality).
        if tier == "small":
            q = draw(integers(max(1, min_q), max(1, max_q)))
            k = draw(either(pick([q, q + 1, max(q - 1, 0), 0]), integers(0, limits.max_context)))
        elif tier == "tile":
            q = draw(either(pick(tile_q), integers(1, max(1, max_q))))
            k = draw(either(_tier_keys(tier, limits, caps.max_kv_len), pick([q, q + 1, max(q - 1, 0)])))
        else:
            q = draw(integers(1, few_q))
            k = draw(_tier_keys(tier, limits, caps.max_kv_len))
        if not _has(caps, Feature.MORE_QUERIES_THAN_KEYS):
            k = max(k, q)
        return SequenceSpec(query_len=q, key_len=k)
    # encoder / encoder_only: the keys are the queries
    if tier == "small":
        return SequenceSpec(query_len=draw(integers(max(1, min_q), max(limits.max_query, 1))))
    lengths = TILE_KEYS if tier == "tile" else tuple(k for k in LONG_KEYS if k <= LONG_ENCODER)
    return SequenceSpec(query_len=draw(pick(_capped(lengths, caps.max_query_len))))
