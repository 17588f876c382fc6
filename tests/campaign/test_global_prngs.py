"""campaign.drawing.global_prngs_left_alone, inside which campaign workers draw and evaluate: what a seed draws is the
same as with hypothesis' seeding of the global PRNGs, and the seeding is back once the block is left."""
import random

import pytest
from hypothesis import Phase, core, given, seed
from hypothesis import strategies as st

from backends.registry import get
from campaign.drawing import early_draws, global_prngs_left_alone, hypothesis_settings
from fuzz.strategies import Limits, cases


@pytest.mark.parametrize("backend", ["flashinfer-decode", "aten-flash-varlen"])
def test_a_seed_draws_the_same_cases_with_the_global_prngs_left_alone(backend):
    strategy = cases(get(backend).caps, Limits())
    seeded = early_draws(strategy, 7, 40, 58)
    with global_prngs_left_alone():
        alone = early_draws(strategy, 7, 40, 58)
    assert len(seeded) == 40 and alone == seeded


def _global_draws() -> list[float]:
    """random.random() as each of 5 examples of a hypothesis test reads it."""
    seen: list[float] = []

    def test(n: int) -> None:
        seen.append(random.random())

    hypothesis_settings(5, [Phase.generate])(seed(1)(given(st.integers(0, 10**6))(test)))()
    return seen


def test_inside_the_examples_go_on_with_the_global_random_and_after_it_hypothesis_seeds_it_again():
    assert len(set(_global_draws())) == 1  # hypothesis: every example starts from the same seeded state
    with global_prngs_left_alone():
        inside = _global_draws()
    assert len(inside) == 5 and len(set(inside)) == 5
    assert len(set(_global_draws())) == 1


def test_the_seeding_is_back_when_the_block_raises():
    before = core.deterministic_PRNG
    with pytest.raises(RuntimeError):
        with global_prngs_left_alone():
            assert core.deterministic_PRNG is not before
            raise RuntimeError("in a task")
    assert core.deterministic_PRNG is before
