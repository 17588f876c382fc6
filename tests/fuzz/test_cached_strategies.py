"""fuzz.cached: equal arguments give one strategy object (paid for once), values of other types another."""
from __future__ import annotations

from hypothesis import given

from fuzz.cached import or_none, pick


def test_equal_elements_share_one_strategy_and_other_types_do_not():
    assert pick([1, 2, 3]) is pick((1, 2, 3))
    assert pick([1, 2]) is not pick([1.0, 2.0])  # equal in a tuple, not as drawn values
    assert pick([True]) is not pick([1])
    assert pick([(1, (2, 3))]) is pick([(1, (2, 3))])
    assert pick([(1, (2, 3))]) is not pick([(1, (2, 3.0))])  # inside nested tuples too
    assert pick([(1, 2)]) is not pick([[1, 2]]) and pick([[1, 2]]) is not pick([[1, 2]])  # a list: built afresh
    assert or_none(pick([4])) is or_none(pick([4]))
    from typing import NamedTuple

    class Pair(NamedTuple):
        a: int
        b: int

    assert pick([Pair(1, 2)]) is pick([Pair(1, 2)]) and pick([Pair(1, 2)]) is not pick([(1, 2)])  # its own type


@given(pick([[1], [2]]))
def test_unhashable_elements_still_give_a_strategy(drawn):
    assert drawn in ([1], [2])


def test_a_union_of_the_same_strategies_is_one_object_and_draws_as_the_inline_one():
    """`either` replaces unions written inline in `cases` (a new object, validated again, at every draw: 13 % of a
    worker's drawing time on the CPU, benchmarks/results/throughput/generation-cpu-2026-11-27.md)."""
    from hypothesis import strategies as st

    from fuzz.cached import NONE, either, just

    assert either(pick([1, 2]), just(5), st.integers(0, 3)) is either(pick((1, 2)), just(5), st.integers(0, 3))
    assert either(NONE, NONE, st.integers(0, 3)) is not either(NONE, st.integers(0, 3))
    assert repr(either(pick([1, 2]), just(5))) == repr(st.sampled_from((1, 2)) | st.just(5))
