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
import operator
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import strategies as st


def _key(value: Any) -> Any:
    """A cache key that tells values of other types apart: 1, 1.0 and True are equal, also inside a tuple, but are
    not the same drawn value; a tuple subclass (a NamedTuple) keys as itself, with its type. Built with `map`: some 190
    keys a drawn case were 2 % of a campaign worker's profiled time
    (benchmarks/results/throughput/harness-batched-masks-one-copy-views-h200-2026-12-02.md), and through a generator a
    key of 1-6 arguments cost 0.8-3.4 us against 0.6-1.8 (one thread of the 2-core box)."""
    if type(value) is tuple:
        return (tuple, tuple(map(_key, value)))
    return (type(value), value)


def memo(build: Callable[..., st.SearchStrategy]) -> Callable[..., st.SearchStrategy]:
    """A strategy builder (a composite, or a function returning a strategy) that returns one object per distinct
    positional arguments (type-aware); calls with keywords or unhashable arguments build afresh."""
    cache: dict[tuple, st.SearchStrategy] = {}

    @functools.wraps(build)
    def built(*args: Any, **kwargs: Any) -> st.SearchStrategy:
        if kwargs:
            return build(*args, **kwargs)
        try:
            key = _key(args)
            strategy = cache.get(key)
        except TypeError:
            return build(*args)
        if strategy is None:
            if len(cache) >= 8192:
                cache.clear()
            strategy = cache[key] = build(*args)
        return strategy

    return built


_sampled = memo(st.sampled_from)


def pick(elements: Iterable[Any]) -> st.SearchStrategy:
    """st.sampled_from(elements), one object per distinct tuple of hashable elements."""
    return _sampled(tuple(elements))


@memo
def or_none(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """st.none() | strategy, one object per strategy object."""
    return st.none() | strategy


just = memo(st.just)  # st.just and st.none build a new object at each call
NONE = st.none()
BOOLEANS = st.booleans()
# st.integers(lo, hi) with bounds of earlier draws, six calls a case: hypothesis' own strategy cache (an LRU whose
# every hit rebalances a heap) took 58 us a call, 3.4 % of a small-tier worker's time on the 2-core CPU
# (benchmarks/results/throughput/drawing-cpu-2026-11-27.md)
integers = memo(st.integers)


@memo
def either(*strategies: st.SearchStrategy) -> st.SearchStrategy:
    """strategies[0] | strategies[1] | ..., one object per tuple of strategy objects: a union written inline in a
    composite was a new object at every draw, which hypothesis validated and labelled again."""
    return functools.reduce(operator.or_, strategies)
