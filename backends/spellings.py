"""How one semantic is spelled in a library's arguments: the encodings a backend declares and draws.

An API often accepts several spellings of one meaning: an unbounded window side as None, as -1 or as
any number that reaches past every key; causality as a flag or as the window (left, 0); the default
scale 1/sqrt(d) passed or left out; a page table exactly as wide as the longest sequence needs or
wider. Each is a different code path (a bounded window runs the tiled kernel's local-mask branch even
when it masks nothing), so a backend declares the spellings its library documents in
`Capabilities.encodings` and the fuzzer draws them; the oracle's answer never depends on the spelling.
The first spelling of each is the adapter's default, the one shrinking returns to.
"""
from __future__ import annotations

import torch

from reference.case import Case

UNBOUNDED_WINDOW = "unbounded_window"
CAUSAL = "causal"
SCALE = "scale"
PAGE_TABLE = "page_table"

# An unbounded side: None, -1, the smallest number that bounds nothing here (the sequence's extent less
# one), or far past it (int32-safe).
NONE, MINUS_ONE, EDGE, BEYOND = "none", "minus_one", "edge", "beyond"
BEYOND_EXTRA = 1 << 20
WIDE_TABLE_EXTRA = 3  # trailing page-table entries (the null block) past the widest sequence's pages


def extent(case: Case) -> int:
    """The largest key or query count of any sequence: a window side of at least extent - 1 masks
    nothing in either alignment (a bottom-right row with q > k sits at k - q, a top-left one at q - 1)."""
    return max([1, *case.query_lens, *case.kv_lens])


def unbounded(case: Case, default: str = NONE) -> int | None:
    """The case's spelling of an unbounded window side."""
    spelling = case.encoding(UNBOUNDED_WINDOW, default)
    if spelling == NONE:
        return None
    if spelling == MINUS_ONE:
        return -1
    if spelling == EDGE:
        return extent(case) - 1
    if spelling == BEYOND:
        return extent(case) + BEYOND_EXTRA
    raise ValueError(f"encoding {UNBOUNDED_WINDOW}={spelling!r}: not one of none, minus_one, edge, beyond")


def respellable(case: Case) -> bool:
    """Whether "no window" may be spelled as a window past every key in vLLM's calls: not where vLLM's own
    mask rules read the window (PrefixLM ranges, R-SWA, which replaces it), so only the window's spelling
    changes, never the rule it feeds."""
    return case.bidirectional_ranges is None and case.global_prefix is None


def unbounded_left(case: Case, default: str = MINUS_ONE) -> int:
    """A left window side as kernels with an int-only `window_size` take it: the case's, or its unbounded
    spelling (-1, the edge, beyond). (vLLM's chunk lookback, which sizes its chunks from the window, always
    comes with a bounded one: Case requires it.)"""
    left = case.window_bounds[0]
    if left is not None:
        return left
    spelled = unbounded(case, default) if respellable(case) else -1
    return -1 if spelled is None else spelled


def sliding_window(case: Case) -> int | None:
    """vLLM's W (the keys a query sees, its own included): the case's, or an unbounded one spelled as None,
    -1 (the kernels' "W <= 0: no window"), the smallest W that bounds nothing here (the extent), or far past
    it."""
    if case.sliding_window is not None or not respellable(case):
        return case.sliding_window
    left = unbounded(case, NONE)
    return left if left is None or left < 0 else left + 1


def window_pair(case: Case, default: str = NONE, causal_in_window: bool = False,
                lone_minus_one: bool = True) -> tuple[int | None, int | None]:
    """(left, right) as flash-attn style APIs take it: bounded sides as they are, unbounded ones spelled;
    causality as the window (left, 0) when the case spells it so (`causal_as_window`) or the API has no
    causal flag (`causal_in_window`). `lone_minus_one=False`: the API reads -1 as unbounded only for both sides
    at once, a -1 beside a bounded side being a bound of its own (FA4), so there one unbounded side is None."""
    left, right = case.window_bounds
    if case.is_causal and (causal_in_window or causal_as_window(case)):
        right = 0
    spell = unbounded(case, default)
    if spell == -1 and not lone_minus_one and (left is None) != (right is None):
        spell = None
    return (spell if left is None else left, spell if right is None else right)


def causal_as_window(case: Case) -> bool:
    """True when the case spells causality as the window (left, 0) with the causal flag off."""
    return case.is_causal and case.encoding(CAUSAL, "flag") == "window"


def causal_flag(case: Case) -> bool:
    """The causal flag to pass: off when causality travels in the window instead."""
    return case.is_causal and not causal_as_window(case)


def scale_kwargs(case: Case, name: str = "softmax_scale") -> dict:
    """{name: scale}, or {} when the case spells the default scale by leaving it out."""
    if case.scale is None and case.encoding(SCALE, "passed") == "omitted":
        return {}
    return {name: case.softmax_scale}


def page_table(case: Case, table: torch.Tensor) -> torch.Tensor:
    """The block table, with trailing null-block entries when the case spells it wide."""
    if case.encoding(PAGE_TABLE, "exact") != "wide":
        return table
    pad = torch.zeros(table.shape[0], WIDE_TABLE_EXTRA, dtype=table.dtype, device=table.device)
    return torch.cat([table, pad], dim=1)


def window_encodings(spellings: tuple[str, ...] = (NONE, MINUS_ONE, EDGE, BEYOND)) -> tuple[str, tuple[str, ...]]:
    return (UNBOUNDED_WINDOW, spellings)


CAUSAL_ENCODINGS = (CAUSAL, ("flag", "window"))
SCALE_ENCODINGS = (SCALE, ("passed", "omitted"))
PAGE_TABLE_ENCODINGS = (PAGE_TABLE, ("exact", "wide"))
