"""fuzz.cached: equal arguments give one strategy object (paid for once), values of other types another."""
from __future__ import annotations

from hypothesis import given

from fuzz.cached import or_none, pick


def test_equal_elements_share_one_strategy_and_other_types_do_not():
    assert pick([1, 2, 3]) is pick((1, 2, 3))
    assert pick([1, 2]) is not pick([1.0, 2.0])  # equal in a tuple, not as drawn values
    assert pick([True]) is not pick([1])
    assert or_none(pick([4])) is or_none(pick([4]))


@given(pick([[1], [2]]))
def test_unhashable_elements_still_give_a_strategy(drawn):
    assert drawn in ([1], [2])
