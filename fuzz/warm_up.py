"""A campaign's warm-up shard: shallow bugs in milliseconds, before the tile-crossing and long-context tiers cost time.

Its cases are small (fuzz.limits.warm_up), and half of them have every declared feature on. Hypothesis draws the
simplest case first, then, in the first tenth of its budget, the simplest completion of a new first choice. Here that
first choice is the branch, so the second case is the simplest one with every feature on (window, soft-cap, sinks,
ALiBi, ...), and a defect on any feature's path shows by the second example. With plain small cases alone, the second
case was the simplest one of another attention type, and a feature's defect waited for the random draws: on the 2-core
CPU, the planted window and soft-cap bugs took 8 examples (0.15-0.24 s) without the branch and 2 (0.01-0.02 s) with it
(benchmarks/results/detection/cpu-warm-up-features-on-2026-11-28.md).
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from backends.base import Capabilities

from .cached import either
from .limits import Limits, warm_up
from .strategies import cases


def warm_up_cases(caps: Capabilities, limits: Limits = Limits()) -> st.SearchStrategy:
    """The warm-up shard's cases inside `caps`: small ones as `limits` draw them, or the same with every declared
    feature drawn on (Limits.features_on; a focus's `features` still leaves the others out)."""
    small = warm_up(limits)
    every = tuple(sorted({f.value for f in caps.features} | set(small.features_on or ())))
    return either(cases(caps, small), cases(caps, replace(small, features_on=every)))
