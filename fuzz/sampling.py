"""A fixed sample of a backend's cases for benchmarks and device probes: the first `n` cases hypothesis draws from
`fuzz.strategies.cases`, derandomized, so the same command on the same tree draws the same cases."""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings

from reference.case import Case

from .strategies import Limits, cases


def sample_cases(caps, limits: Limits, n: int) -> list[Case]:
    """`n` cases of a backend declaring `caps`, within `limits` (hypothesis' generate phase only, no database)."""
    drawn: list[Case] = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate],
              database=None, derandomize=True)
    @given(cases(caps, limits))
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return drawn
