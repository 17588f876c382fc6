"""Hypothesis strategies for what a case's mask adds to causality: window sides and sizes at the edges where kernels cut,
vLLM's block-sparse parameters and its extra decoder rules (chunk lookback, R-SWA, PrefixLM ranges, qq_bias)."""
from __future__ import annotations

from hypothesis import strategies as st

from backends.base import Capabilities, Feature
from reference.case import BlockSparse, GlobalPrefix, SequenceSpec

from .cached import NONE, either, integers, memo, pick

TILE_EDGES = (63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513)  # where tiled kernels cut keys
BEYOND = 7  # a window side this far past twice the longest sequence: "wider than the sequence", drawn on purpose


def window_boundary(max_kv: int, max_q: int) -> list[int]:
    """The key and query counts -1 / 0 / +1, where a window side starts or stops cutting rows (a right side
    at or past the keys of a q > k sequence still bounds its first rows)."""
    return sorted({n + d for n in (max_kv, max_q) for d in (-1, 0, 1) if n + d >= 0})


def window_sizes(max_kv: int, max_q: int) -> list[int]:
    """A bounded window side's size class: 0, 1, 2, the tile edges the sequence reaches, `window_boundary`,
    and beyond both counts. Sorted: shrinking goes toward 0."""
    longest = max(max_kv, max_q)
    sizes = {0, 1, 2, 2 * longest + BEYOND, *window_boundary(max_kv, max_q)}
    sizes |= {t for t in TILE_EDGES if t <= longest + 1}
    return sorted(sizes)


@memo
def window_pairs(boundary: tuple[int, ...], sizes: tuple[int, ...], right: bool) -> st.SearchStrategy:
    """A kernel window (left, right): each side unbounded, at a boundary or a size class (right: where declared)."""
    side = st.none() | pick(boundary) | pick(sizes)
    return st.tuples(side, side if right else st.none())


@memo
def window_widths(boundary: tuple[int, ...], sizes: tuple[int, ...], max_kv: int) -> st.SearchStrategy:
    """vLLM's sliding window W >= 1: at a boundary, a size class, or any up to past the longest sequence."""
    return pick([w for w in boundary if w >= 1] or [1]) | pick([w for w in sizes if w >= 1]) | integers(1, max_kv + 2)


@memo
@st.composite
def block_sparse_params(draw) -> BlockSparse:
    """vLLM's BlocksparseParams, tiny blocks so a short sequence spans several; TP ranks included."""
    tp_size = draw(pick([1, 1, 2, 4]))
    homo = draw(pick(["no", "no", "head", "group"]))
    return BlockSparse(block_size=draw(pick([1, 2, 3, 4, 8])), local_blocks=draw(integers(0, 3)),
                       vert_stride=draw(integers(1, 8)), homo_head=homo == "head", homo_head_group=homo == "group",
                       head_sliding_step=draw(either(NONE, NONE, integers(0, 3))),
                       tp_size=tp_size, tp_rank=draw(integers(0, tp_size - 1)))


@memo
@st.composite
def vllm_mask_rules(draw, caps: Capabilities, sequences: tuple[SequenceSpec, ...], window: int | None) -> dict:
    """Case fields for vLLM's extra decoder mask rules, each where declared: chunk lookback (on a drawn
    window), R-SWA (where no window was drawn: it replaces one), PrefixLM ranges around the context /
    new-token boundary (and past the sequence's end: chunked prefill inside an image), qq_bias."""
    rules: dict = {}  # each rule is on at the largest draw, so shrinking (towards 0) switches it off
    if window is not None and Feature.CHUNK_LOOKBACK in caps.features and draw(integers(0, 2)) == 2:
        rules["chunk_lookback"] = draw(pick([lb for lb in (0, 1, 2, 3) if window // (lb + 1) >= 1]))
    elif window is None and Feature.GLOBAL_PREFIX in caps.features and draw(integers(0, 1)) == 1:
        kv = max(s.context_len + s.query_len for s in sequences)
        prefix = [draw(either(pick(sorted({0, 1, s.context_len, s.context_len + s.query_len})),
                              integers(0, s.context_len + s.query_len))) for s in sequences]
        rules["global_prefix"] = GlobalPrefix(draw(either(pick(sorted({1, 2, max(1, kv // 2), kv})),
                                                          integers(1, kv + 1))), tuple(prefix))
    if Feature.PREFIX_LM in caps.features and draw(integers(0, 2)) == 2:
        rules["bidirectional_ranges"] = tuple(draw(_ranges(s)) for s in sequences)
    if Feature.QQ_BIAS in caps.features and draw(integers(0, 2)) == 2:  # as often as PrefixLM: the rarest rule
        rules["qq_bias"] = True
    return rules


@memo
def _ranges(seq: SequenceSpec) -> st.SearchStrategy:
    """0-2 inclusive (start, end) ranges of one sequence; the first often straddles the first new token,
    where a range changes what a query sees (a range wholly in the context only matters to earlier steps)."""
    n, ctx = seq.context_len + seq.query_len, seq.context_len
    point = integers(0, max(n, 1))
    straddle = st.tuples(integers(0, ctx), integers(ctx, n + 1))
    return st.lists(straddle | st.tuples(point, point), max_size=2).map(tuple)
