"""How a Case is spelled as xformers 0.0.35 attention-bias objects (`xformers.ops.fmha.attn_bias`).

The packed operators take the block-diagonal masks over all sequences at once:
- `BlockDiagonalMask`: no mask inside a sequence;
- `BlockDiagonalCausalMask` (top-left) / `BlockDiagonalCausalFromBottomRightMask`: causal;
- their `make_local_attention(W)` / `make_local_attention_from_bottomright(W)`: causal with a window of W
  keys, the query's own included (`BlockDiagonalCausalLocalAttention[FromBottomRight]Mask`: "keys with
  index greater than i - window_size and less than or equal to i"), so a left side L is W = L + 1.
A window bounded on the right as well is `LocalAttentionFromBottomRightMask(window_left, window_right)`
("q - window_left <= k + s <= q + window_right", s = queries - keys): a dense mask, no block diagonal, so it
is called once per sequence. Its sides are ints, so an unbounded side is spelled as a number that reaches
past every key (the edge or beyond); a causal mask's unbounded left side is the plain causal mask or a
local one that wide (`spellings.unbounded`).
"""
from __future__ import annotations

from dataclasses import dataclass

from reference.case import AttentionType, Case, CausalAlignment

from . import spellings

PLAIN, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = "BlockDiagonalMask", "BlockDiagonalCausalMask", \
    "BlockDiagonalCausalFromBottomRightMask"
LOCAL_TWO_SIDED = "LocalAttentionFromBottomRightMask"


@dataclass(frozen=True)
class MaskPlan:
    """The attn_bias class a case is called with; `local` is W for make_local_attention(_from_bottomright),
    `sides` the (window_left, window_right) of the per-sequence two-sided mask."""

    cls: str
    local: int | None = None
    sides: tuple[int, int] | None = None

    @property
    def per_sequence(self) -> bool:
        return self.cls == LOCAL_TWO_SIDED


def _spelled_side(case: Case) -> int:
    """An unbounded side where only an int is accepted: the case's spelling, the edge where it says none."""
    side = spellings.unbounded(case, spellings.NONE)
    return spellings.extent(case) - 1 if side is None else side


def plan(case: Case) -> MaskPlan:
    """The packed operators' mask for a decoder (causal, bottom-right), an encoder (vLLM's xformers backend:
    no mask, or its window made local from the bottom right) or a raw kernel case."""
    if case.attn_type == AttentionType.ENCODER:
        if case.sliding_window is None:
            return MaskPlan(PLAIN)
        return MaskPlan(PLAIN, local=case.sliding_window)
    left, right = case.window_bounds
    if case.is_causal:  # a causal mask already bounds the right side at 0
        cls = CAUSAL_TOP_LEFT if case.causal_alignment == CausalAlignment.TOP_LEFT \
            and case.attn_type == AttentionType.KERNEL else CAUSAL_BOTTOM_RIGHT
        if left is None:
            left = spellings.unbounded(case, spellings.NONE)
        return MaskPlan(cls, local=None if left is None else left + 1)
    if left is None and right is None:
        side = spellings.unbounded(case, spellings.NONE)
        return MaskPlan(PLAIN) if side is None else MaskPlan(LOCAL_TWO_SIDED, sides=(side, side))
    return MaskPlan(LOCAL_TWO_SIDED, sides=(_spelled_side(case) if left is None else left,
                                            _spelled_side(case) if right is None else right))


def refusals(case: Case, operator: str) -> list[str]:
    """The cases xformers refuses for `operator` ("cutlass", "flash"), each with the library's rule."""
    if case.attn_type != AttentionType.KERNEL:
        return []
    p = plan(case)
    out = []
    pairs = list(zip(case.query_lens, case.kv_lens))
    if p.per_sequence and case.window is not None and case.causal_alignment == CausalAlignment.TOP_LEFT:
        out.append("a non-causal window aligned top-left: xformers' one two-sided window, "
                   "LocalAttentionFromBottomRightMask, is aligned bottom-right")
    if p.per_sequence and operator == "cutlass":
        out.append("a non-causal window: LocalAttentionFromBottomRightMask is not in cutlassF-pt's "
                   "SUPPORTED_ATTN_BIAS_TYPES (xformers/ops/fmha/cutlass.py)")
    if p.cls == CAUSAL_BOTTOM_RIGHT and any(k < q for q, k in pairs):
        out.append("causal bottom-right with fewer keys than queries: BlockDiagonalCausalFromBottomRightMask "
                   "raises 'Expected num_keys >= num_queries'")
    if p.cls == CAUSAL_TOP_LEFT and operator == "flash" and any(k != q for q, k in pairs):
        out.append("causal top-left with query_len != key_len: fa2F refuses it (flash._check_needs_no_topleft)")
    if p.cls == CAUSAL_TOP_LEFT and p.local is not None and any(q - p.local >= k for q, k in pairs):
        out.append("a top-left causal window that reaches no key of some query: BlockDiagonalCausalLocalAttentionMask "
                   "raises 'No keys are attended'")
    return out


def build(p: MaskPlan, query_lens: list[int], kv_lens: list[int], device):
    """The attn_bias object of the call: over the packed sequences, or for each sequence's own call."""
    from xformers.ops.fmha import attn_bias as ab

    if p.per_sequence:
        return ab.LocalAttentionFromBottomRightMask(window_left=p.sides[0], window_right=p.sides[1])
    bias = getattr(ab, p.cls).from_seqlens(query_lens, kv_lens, device=device)
    if p.local is None:
        return bias
    if p.cls == CAUSAL_TOP_LEFT:
        return bias.make_local_attention(p.local)
    return bias.make_local_attention_from_bottomright(p.local)


def source(p: MaskPlan) -> str:
    """`build` as script text (SEQS, DEVICE and `ab` in scope)."""
    if p.per_sequence:
        return f"ab.{p.cls}(window_left={p.sides[0]}, window_right={p.sides[1]})"
    text = f"ab.{p.cls}.from_seqlens([s[0] for s in SEQS], [s[1] for s in SEQS], device=DEVICE)"
    if p.local is not None:
        text += (f".make_local_attention({p.local})" if p.cls == CAUSAL_TOP_LEFT
                 else f".make_local_attention_from_bottomright({p.local})")
    return text
