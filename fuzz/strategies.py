"""Hypothesis strategies that draw Cases from exactly the region a backend declares.

Nothing is drawn and then rejected: every choice is taken from the declaration's own sets. Edges get
deliberate weight: lengths at 0/+1/-1 mod block_size, single-token and empty contexts, windows of
1 / len-1 / len / len+1, odd GQA ratios, extreme soft-caps, large logits, near-duplicate keys,
non-unit and per-head scales, shuffled block tables with a null block.
"""
from __future__ import annotations

import functools
import random
from dataclasses import replace

import torch
from hypothesis import strategies as st

from backends.base import ALL_FEATURES, Capabilities, Feature
from backends.spellings import sliding_window

from .cache_specs import cache_specs, shared_prefix
from .cached import BOOLEANS, either, integers, just, memo, or_none, pick
from .compile_keys import compile_key, compile_slices, declared_compile_keys, key_limits
from .limits import Limits, LimitsError, focus_values, limits_from_json, warm_up
from .mask_rules import (BEYOND, TILE_EDGES, block_sparse_params, vllm_mask_rules, window_boundary, window_pairs,
                         window_sizes, window_widths)
from .sizes import TIER_WEIGHTS, sequence_specs
from reference.scores import standard_alibi_slopes
from reference.case import (Alibi, AlibiConvention, AttentionType, BlockTableKind, Case, CausalAlignment, DType,
                            KVCacheDType, KVLayout, ScaleGranularity, SequenceSpec, ValueDistribution, ValueSource,
                            Values, kv_len)

# Limits (fuzz.limits), compile keys (fuzz.compile_keys), cache specs (fuzz.cache_specs) and mask rules
# (fuzz.mask_rules) have modules of their own; callers import them from here
__all__ = ["Limits", "LimitsError", "focus_values", "limits_from_json", "warm_up", "compile_key", "compile_slices",
           "declared_compile_keys", "key_limits", "ORACLE_CAPS", "GQA_RATIOS", "SOFT_CAPS", "TILE_EDGES", "BEYOND",
           "EDGE_ABOVE_KEYS", "SHARP_LOGITS", "window_boundary", "window_sizes", "head_pairs", "heads", "shared_prefix",
           "cache_specs", "block_sparse_params", "vllm_mask_rules", "focused_spellings", "cases"]


EDGE_ABOVE_KEYS = 128  # the EDGE value class is drawn only for cases with a sequence of more keys than this
SHARP_LOGITS = 8.0  # ... or, half the time, from this logit scale on, whatever the length


ORACLE_CAPS = Capabilities(
    devices=frozenset({"cpu", "cuda"}), dtypes=frozenset(DType), head_sizes=(8, 16, 24, 32, 64),
    attn_types=frozenset(AttentionType), features=ALL_FEATURES, kv_layouts=frozenset(KVLayout),
    kv_cache_dtypes=frozenset(KVCacheDType), scale_granularities=frozenset(ScaleGranularity),
    block_sizes=(1, 2, 3, 4, 5, 8, 16, 32, 48, 256, 272), reads_paged_cache=True,
    causal_alignments=frozenset(CausalAlignment), alibi_conventions=frozenset(AlibiConvention),
)
"""Everything the oracle can evaluate: used to test the oracle itself."""

GQA_RATIOS = (1, 2, 3, 4, 5, 7, 8)
SOFT_CAPS = (0.5, 2.0, 5.0, 30.0, 50.0, 1e4)  # from caps that saturate most logits to one that leaves them as they are
def _has(caps: Capabilities, feature: Feature) -> bool:
    return feature in caps.features


def _sometimes(draw, caps: Capabilities, feature: Feature, strategy: st.SearchStrategy, on: frozenset = frozenset()):
    """None (feature off: the simplest value, so shrinking drops it) or a draw from `strategy`; always a draw when
    the feature is in `on` (Limits.features_on)."""
    if not _has(caps, feature):
        return None
    return draw(strategy if feature.value in on else or_none(strategy))


def head_pairs(caps: Capabilities, max_kv_heads: int) -> list[tuple[int, int]]:
    """Every (num_heads, num_kv_heads) `heads` draws under `caps`: each kv head count up to the bound, times each GQA
    ratio (1, and the others where GQA / MQA is declared and the ratio is allowed)."""
    pairs = []
    for kv in range(1, min(max_kv_heads, caps.max_kv_heads or max_kv_heads) + 1):
        pairs += [(kv * r, kv) for r in _ratios(caps, kv)]
    return pairs


def _ratios(caps: Capabilities, kv: int) -> list[int]:
    ratios = [1]
    sharing = Feature.MQA if kv == 1 else Feature.GQA  # query heads sharing one kv head / several
    if _has(caps, sharing):
        ratios += [r for r in GQA_RATIOS[1:] if (caps.max_head_group is None or r <= caps.max_head_group)
                   and (caps.head_groups is None or r in caps.head_groups)]
    return ratios


@functools.lru_cache(maxsize=1024)
def _declared_pins(caps: Capabilities, max_kv_heads: int,
                   pins: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The pinned (num_heads, num_kv_heads) pairs that `heads` may draw under `caps`, once per pinned shape."""
    return tuple(p for p in pins if p in head_pairs(caps, max_kv_heads))


@memo
@st.composite
def heads(draw, caps: Capabilities, limits: Limits) -> tuple[int, int]:
    """(num_heads, num_kv_heads) with odd GQA ratios and MQA where declared; one of `limits.heads` where it names
    declared pairs (a pinned shape: fuzz.shapes)."""
    pinned = _declared_pins(caps, limits.max_kv_heads, limits.heads) if limits.heads is not None else ()
    if pinned:
        return draw(pick(pinned))
    kv = draw(integers(1, min(limits.max_kv_heads, caps.max_kv_heads or limits.max_kv_heads)))
    ratio = draw(pick(_ratios(caps, kv)))
    return kv * ratio, kv


# Strategies `cases` draws from whose arguments depend on earlier draws: built once per argument (fuzz.cached).
@memo
def _more_sequences(attn_type: AttentionType, caps: Capabilities, limits: Limits, block_size: int | None,
                    decode_only: bool) -> st.SearchStrategy:
    return st.lists(sequence_specs(attn_type, caps, limits, block_size, decode_only), max_size=limits.max_sequences - 1)


def focused_spellings(name: str, spellings: tuple, focus: tuple[tuple[str, str], ...] | None) -> tuple:
    """The declared values of encoding `name` that the focus names (all of them where it names none)."""
    if focus is None:
        return spellings
    return tuple(v for v in spellings if (name, str(v)) in focus) or spellings


SINK_SPREADS = (0.0, 0.5, 2.0, 5.0)  # how far the heads' sinks lie around their level: 0 (one value) is the simplest


@memo
def _sinks(num_heads: int) -> st.SearchStrategy:
    """Per-head sinks in [-4, 6], near the scores: a level, a spread around it and a seed placing each head in the
    spread. Three draws whatever the head count: a list of one float a head was two choices a head, 7 of a FlashInfer
    decode case's 42 (benchmarks/results/throughput/drawing-sinks-cpu-2026-12-02.md). Shrinks to one level for all
    heads, then to 0."""
    def spread(drawn: tuple[float, float, int]) -> tuple[float, ...]:
        level, width, place = drawn
        rng = random.Random(place)
        return tuple(min(6.0, max(-4.0, level + width * rng.uniform(-1.0, 1.0))) for _ in range(num_heads))

    return st.tuples(st.floats(-4.0, 6.0, allow_nan=False), pick(SINK_SPREADS), integers(0, 2**16 - 1)).map(spread)


@memo
def _far_sink(num_heads: int) -> st.SearchStrategy:
    """None, or (head, logit) of one head's sink far above / below the scores."""
    return st.none() | st.tuples(integers(0, num_heads - 1), pick([-100.0, -30.0, 30.0, 100.0]))


@st.composite
def cases(draw, caps: Capabilities = ORACLE_CAPS, limits: Limits = Limits()) -> Case:
    """A Case inside `caps`, sized by `limits`."""
    if limits.features is not None:  # the focus: declared features left out are never drawn
        caps = replace(caps, features=frozenset(f for f in caps.features if f.value in limits.features))
    on = frozenset(limits.features_on or ())
    attn_type = draw(pick(focus_values(caps.attn_types, limits.attn_types, key=lambda t: t.value)))
    dtype = draw(pick(focus_values(caps.dtypes, limits.dtypes, key=lambda d: d.value)))
    num_heads, num_kv_heads = draw(heads(caps, limits))
    sizes = focus_values(caps.head_sizes, limits.head_sizes)
    odd = [h for h in sizes if h & (h - 1)] or sizes  # not a power of two: padded tiles, tail masks
    head_size = draw(either(pick(sizes), just(sizes[-1]), pick(odd)))
    head_size_v = None
    if caps.head_size_pairs is not None:  # tied sizes (MLA: key = latent + rope, value = latent)
        pairs = [p for p in caps.head_size_pairs if p[0] in sizes] or list(caps.head_size_pairs)
        head_size, head_size_v = draw(pick(pairs))
    elif _has(caps, Feature.HEAD_SIZE_V):
        value_sizes = pick(focus_values(caps.head_sizes, limits.value_sizes))
        head_size_v = draw(value_sizes if Feature.HEAD_SIZE_V.value in on else or_none(value_sizes))
    value_size = head_size_v or head_size

    paged_types = (AttentionType.DECODER, AttentionType.ENCODER_DECODER) + (
        (AttentionType.KERNEL,) if _has(caps, Feature.PAGED_KERNEL) else ())
    uses_cache = attn_type in paged_types and bool(caps.kv_layouts)
    block_size = draw(pick(focus_values(caps.block_sizes, limits.block_sizes))) if uses_cache else None
    # A batch of pure decodes is its own regime (vLLM's decode kernels, CUDA graphs): give it weight.
    decode_only = attn_type == AttentionType.DECODER and draw(integers(0, 3)) == 0
    tiers = [t for t in TIER_WEIGHTS if limits.tiers is None or t in limits.tiers] or ["small"]
    tier = draw(pick(tiers))
    first = draw(sequence_specs(attn_type, caps, limits, block_size, decode_only, tier))
    sequences = (first,) + tuple(draw(_more_sequences(attn_type, caps, limits, block_size, decode_only)))
    if caps.min_query_len > 1 or caps.min_kv_len > 0:  # lift lengths to the declared minimums
        def lifted(s: SequenceSpec) -> SequenceSpec:
            q = max(s.query_len, caps.min_query_len) if s.query_len else 0
            if attn_type != AttentionType.ENCODER_DECODER and q == 0:
                q = max(1, caps.min_query_len)  # keys are the queries themselves (or include them)
            enc = max(s.encoder_len, caps.min_kv_len) if attn_type == AttentionType.ENCODER_DECODER else 0
            keys = max(s.key_len, caps.min_kv_len) if s.key_len is not None else None
            if keys is not None and not _has(caps, Feature.MORE_QUERIES_THAN_KEYS):
                keys = max(keys, q)
            return replace(s, query_len=q, encoder_len=enc, key_len=keys)
        sequences = tuple(lifted(s) for s in sequences)
    if caps.uniform_query_len:
        sequences = tuple(replace(s, query_len=sequences[0].query_len) for s in sequences)
    if sum(s.query_len for s in sequences) == 0:
        sequences = (replace(sequences[0], query_len=1),) + sequences[1:]
    cache = None
    if uses_cache and (caps.requires_cache or draw(BOOLEANS)):
        cache = draw(cache_specs(caps, dtype, num_kv_heads, head_size, value_size, block_size, limits))
    if cache is not None and cache.quant.kv_cache_dtype.is_fp8 and caps.fp8_decode_batches is not None:
        most, uniform = caps.fp8_decode_batches  # the decode path's batches only: queries cut to its length
        sequences = tuple(replace(s, query_len=min(sequences[0].query_len if uniform else s.query_len, most))
                          for s in sequences)
    if cache is not None and cache.quant.kv_cache_dtype.is_fp8 and caps.fp8_query_prefills is not None:
        most = caps.fp8_query_prefills  # with an fp8 query every sequence a prefill, without one every one a decode
        sequences = tuple(replace(s, query_len=max(s.query_len, most + 1) if cache.quant.q_fp8_scale is not None
                                  else min(s.query_len, most)) for s in sequences)
    first_forward = cache is not None and cache.quant.dynamic_scales and caps.dynamic_scales_first_forward
    if first_forward:  # the first forward computes the scales and stores every key: prompts, no cached context
        sequences = tuple(replace(s, context_len=0) for s in sequences)
    if cache is not None and attn_type == AttentionType.DECODER and BlockTableKind.SHARED_PREFIX in caps.block_tables \
            and not first_forward:
        sequences, cache = draw(shared_prefix(caps, sequences, cache))

    max_kv = max([kv_len(attn_type, s) for s in sequences] + [1])
    max_q = max(s.query_len for s in sequences)
    kernel = {}
    sizes = window_sizes(max_kv, max_q)
    boundary = window_boundary(max_kv, max_q)  # weighted: where masks start or stop cutting
    if attn_type == AttentionType.KERNEL:
        kernel = dict(causal=draw(pick(sorted(caps.causal_modes))),
                      causal_alignment=draw(pick(sorted(caps.causal_alignments, key=lambda a: a.value))),
                      window=_sometimes(draw, caps, Feature.WINDOW,
                                        window_pairs(tuple(boundary), tuple(sizes), caps.window_right)
                                        if limits.windows is None else
                                        window_pairs(*[tuple(sorted(limits.windows))] * 2, caps.window_right),
                                        on))
        if kernel["window"] == (None, None):
            kernel["window"] = None  # no bound on either side is no window: one spelling (encodings draw the others)
    window = None
    if attn_type not in (AttentionType.ENCODER_DECODER, AttentionType.KERNEL):
        window = _sometimes(draw, caps, Feature.WINDOW, window_widths(tuple(boundary), tuple(sizes), max_kv)
                            if limits.windows is None else pick(sorted(limits.windows)), on)
    soft_cap = _sometimes(draw, caps, Feature.SOFT_CAP, pick(SOFT_CAPS if limits.soft_caps is None else limits.soft_caps),
                          on)
    # Sinks near the scores, and on one head sometimes far above / below them: a kernel's running max must
    # start from the sink (the other heads keep the case able to see mask bugs).
    sinks = None
    if caps.sinks_dtypes is None or dtype in caps.sinks_dtypes:
        sinks = _sometimes(draw, caps, Feature.SINKS, _sinks(num_heads), on)
    if sinks is not None:
        far = draw(_far_sink(num_heads))
        if far is not None:
            sinks = tuple(far[1] if h == far[0] else x for h, x in enumerate(sinks))
        sinks = tuple(torch.tensor(sinks, dtype=dtype.torch).float().tolist())  # a model weight: in the model's dtype
    alibi = None
    if _has(caps, Feature.ALIBI) and (caps.alibi_attn_types is None or attn_type in caps.alibi_attn_types) \
            and (Feature.ALIBI.value in on or draw(BOOLEANS)):
        convention = draw(pick(sorted(caps.alibi_conventions, key=lambda c: c.value)))
        factor = 1.0 if caps.alibi_standard_slopes else draw(pick([1.0, 0.25, 4.0]))
        alibi = Alibi(tuple(s * factor for s in standard_alibi_slopes(num_heads)), convention,
                      in_model_dtype=caps.alibi_in_model_dtype)
    chunk = None
    if attn_type == AttentionType.DECODER:
        chunk = _sometimes(draw, caps, Feature.CHUNKED_LOCAL, either(pick([1, 2, 4, 8, 16]), integers(1, 40)))
    sparse = None
    if attn_type == AttentionType.DECODER:
        sparse = _sometimes(draw, caps, Feature.BLOCK_SPARSE, block_sparse_params())
    rules = {}
    if attn_type == AttentionType.DECODER and chunk is None and sparse is None:
        rules = draw(vllm_mask_rules(caps, sequences, window))
    # Logit magnitudes from nearly uniform to one-hot (scales 1e-3..10, logit scales up to 50); fp16 keeps
    # its scores under its 65504 limit so that the fp16 baseline stays an honest yardstick.
    logit_scales = [1.0, 0.5, 2.0, 4.0, 8.0, 16.0, 50.0] if dtype != DType.FLOAT16 else [1.0, 0.5, 2.0, 4.0, 8.0, 16.0]
    # RECENT (a trained decoder's recency bias) twice as often: it puts weight on mask edges, so few cases
    # are blind; the simplest class of a long sequence, where uniform attention would hide a one-key shift.
    classes = [ValueDistribution.NORMAL, ValueDistribution.RECENT, ValueDistribution.SHARP, ValueDistribution.OUTLIERS,
               ValueDistribution.RECENT]
    if tier == "long":
        classes[0], classes[1] = classes[1], classes[0]
    if max_kv > EDGE_ABOVE_KEYS:
        # Over a hundred keys a row's weight spreads so thin that a one-key shift of a full row (cross
        # attention, a decode's last query) hides under the tolerance in every other class (21-31 % of such
        # cross-attention cases were blind): EDGE keeps real weight on each sequence's last key, in 8 of 13 draws
        # (4 of 9 left vLLM's split-KV decode 8.8 % blind on the CPU twins:
        # campaigns/flashinfer-alibi-softcap-10k-h100-2026-11-24.md)
        classes = [ValueDistribution.EDGE, *classes, *[ValueDistribution.EDGE] * 7]
    distribution = draw(pick(classes))
    if distribution == ValueDistribution.OUTLIERS:  # its 8x channels and tokens already make 64x logits: a larger
        logit_scales = [s for s in logit_scales if s <= 4.0]  # scale only makes a one-hot row no mask shift moves
    logit_scale = draw(pick(logit_scales))
    if logit_scale >= SHARP_LOGITS and distribution != ValueDistribution.EDGE and draw(BOOLEANS):
        # At logit scales >= 8 rows are near one-hot on whichever key scores highest: a one-key shift moves them
        # only when that key is the edge one (vLLM's kernels, bf16: 24-38 % of such cases were blind)
        distribution = ValueDistribution.EDGE
    # A decode row's one-key shift drops its last key, worth ~1/n of the row: a larger last value makes it show
    # without moving the weights (CPU twins of vLLM's merge / decode: 5.95 / 8.05 % blind -> 3.66 / 4.90 %)
    gain = 1.0
    if distribution != ValueDistribution.EDGE and max_kv > 32:
        gain = 8.0 if max_kv <= EDGE_ABOVE_KEYS else 32.0
    values = Values(distribution=distribution, logit_scale=logit_scale,
                    outliers_at_edge=distribution == ValueDistribution.OUTLIERS, edge_value_gain=gain,
                    query_zero_dims=dict(caps.query_zero_dims).get((head_size, value_size)), source=ValueSource.TABLE)
    scales = [0.05, 0.3, 1.0, 0.001, 10.0] if dtype != DType.FLOAT16 else [0.05, 0.3, 1.0, 0.001]
    scale = draw(pick(scales)) if draw(integers(0, 5)) == 0 else None  # ~1 in 6 sets a scale
    encodings = tuple((name, draw(pick(focused_spellings(name, spellings, limits.encodings))))
                      for name, spellings in caps.encodings)
    seed = draw(integers(0, 2**31 - 1))
    if kernel and kernel["causal"] and caps.causal_equal_lengths:
        sequences = tuple(replace(s, key_len=s.query_len) for s in sequences)
    case = Case(**kernel, sequences=sequences, attn_type=attn_type, num_heads=num_heads, num_kv_heads=num_kv_heads,
                head_size=head_size, head_size_v=head_size_v, dtype=dtype, scale=scale, sliding_window=window,
                alibi=alibi, soft_cap=soft_cap, sinks=sinks, attn_chunk_size=chunk, block_sparse=sparse, cache=cache,
                values=values, encodings=encodings, seed=seed, **rules)
    if caps.windowless_encodings and sliding_window(case) is not None:  # such a value takes no window: another one
        off = dict(caps.windowless_encodings)
        case = case.replace(encodings=tuple(
            (name, next(v for v in dict(caps.encodings)[name] if v != value) if off.get(name) == value else value)
            for name, value in case.encodings))
    return case
