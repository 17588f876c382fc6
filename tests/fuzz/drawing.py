"""Derandomized draws of a declaration: the same cases on every run and machine, for tests that assert on them."""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, seed, settings

from fuzz.strategies import Limits, cases


def drawn(strategy, n: int, seed_value: int | None = None) -> list:
    """The first `n` values hypothesis draws from `strategy`: derandomized, or seeded with `seed_value`."""
    out = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate],
              database=None, derandomize=seed_value is None)
    @given(strategy)
    def collect(value):
        out.append(value)

    (collect if seed_value is None else seed(seed_value)(collect))()
    return out


def derandomized(caps, limits: Limits, n: int) -> list:
    """The first `n` cases hypothesis draws from `caps` within `limits`, with a fixed seed."""
    return drawn(cases(caps, limits), n)


def twin_verdicts(caps, todo: list, bug=None) -> list[str]:
    """The verdicts of the naive paged twin (backends.naive; `bug`: a planted one) declaring `caps`, case by case."""
    from backends.naive import NaivePaged
    from fuzz.compare import evaluate

    twin = NaivePaged() if bug is None else NaivePaged(bug)
    twin.caps = caps
    return [evaluate(twin, case, check_blind=False).row["verdict"] for case in todo]
