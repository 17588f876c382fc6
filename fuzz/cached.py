"""Strategy objects built once per distinct argument.

`cases()` draws its choices from lists that depend on earlier draws (head sizes of the declaration, window sizes
of the drawn lengths), so each draw built fresh `sampled_from` / `lists` / composite objects that hypothesis then
validated and labelled again (a quarter of a draw's profile). The same arguments now give the same object, so those
costs are paid once per process: 1.6-2.3x faster draws of the same cases on one CPU thread
(benchmarks/results/throughput/harness-batched-h100-2026-11-25.md). What a seed draws is unchanged: an equal
strategy draws equal values whichever object it is.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import strategies as st


_SAMPLED: dict[tuple, st.SearchStrategy] = {}


def pick(elements: Iterable[Any]) -> st.SearchStrategy:
    """st.sampled_from(elements), one object per distinct tuple of hashable elements. The key holds each
    element's type: 1, 1.0 and True are equal in a tuple but not as drawn values."""
    items = tuple(elements)
    try:
        key = tuple((type(x), x) for x in items)
        strategy = _SAMPLED.get(key)
    except TypeError:  # unhashable elements: a fresh strategy, as before
        return st.sampled_from(items)
    if strategy is None:
        if len(_SAMPLED) >= 8192:
            _SAMPLED.clear()
        strategy = _SAMPLED[key] = st.sampled_from(items)
    return strategy


@functools.lru_cache(maxsize=8192)
def or_none(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """st.none() | strategy, one object per strategy object."""
    return st.none() | strategy


def memo(build: Callable[..., st.SearchStrategy]) -> Callable[..., st.SearchStrategy]:
    """A strategy builder (a composite, or a function returning a strategy) that returns one object per distinct
    positional arguments (type-aware, as `pick`); calls with keywords or unhashable arguments build afresh."""
    cache: dict[tuple, st.SearchStrategy] = {}

    @functools.wraps(build)
    def built(*args: Any, **kwargs: Any) -> st.SearchStrategy:
        if kwargs:
            return build(*args, **kwargs)
        try:
            key = tuple((type(a), a) for a in args)
            strategy = cache.get(key)
        except TypeError:
            return build(*args)
        if strategy is None:
            if len(cache) >= 8192:
                cache.clear()
            strategy = cache[key] = build(*args)
        return strategy

    return built
