"""fuzz.sampling: the fixed sample benchmarks and device probes draw (tools/probe-slow-calls.py,
benchmarks/profile_evaluate.py) is the same in two calls, so two runs of a probe see the same cases."""
from backends.registry import get
from fuzz.sampling import sample_cases
from fuzz.strategies import Limits


def test_the_sample_is_the_same_in_two_calls_and_as_large_as_asked():
    caps = get("torch-sdpa-math").caps
    first = sample_cases(caps, Limits(tiers=("small",)), 12)
    again = sample_cases(caps, Limits(tiers=("small",)), 12)
    assert len(first) == 12
    assert [c.to_json() for c in first] == [c.to_json() for c in again]
    assert len({c.to_json() for c in first}) > 1  # a sample, not one case twelve times
