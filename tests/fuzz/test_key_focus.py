"""A focused shard draws from `key_limits` and keeps the cases of its compile key: nearly every draw must be of the
key, or the shard spends its worker on generation for no row. Drawing the key's features in every case (Limits.
features_on) and its value size (Limits.value_sizes) took the kept share from a median of 0.00-0.23 to 0.98-1.00
(benchmarks/results/campaigns/jit-untold-h100-2026-11-26.md, benchmarks/focus_acceptance.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from backends.registry import get
from campaign.compiles import key_text
from campaign.declarations import compile_keys
from fuzz.strategies import Limits, LimitsError, cases, compile_key, key_limits, limits_from_json


@pytest.mark.parametrize("name", ["fa4-varlen", "flashinfer-prefill-fa2"])
def test_a_focused_shard_s_draws_are_of_its_key(name):
    backend = get(name)
    per, keyed = backend.compiled_per, backend.compiled_features
    keys = compile_keys(backend)
    for key in keys[:: len(keys) // 6][:6]:
        strategy = cases(backend.caps, key_limits(backend.caps, Limits(), per, keyed, json.loads(key)))
        drawn = []

        @settings(max_examples=25, deadline=None, database=None, phases=[Phase.generate], derandomize=True,
                  suppress_health_check=list(HealthCheck))  # a share of draws: the same on every run
        @given(strategy)
        def draw(case):
            drawn.append(key_text(compile_key(case, per, keyed)))

        draw()
        assert drawn and sum(k == key for k in drawn) >= 0.8 * len(drawn), (key, drawn[:3])


def test_features_on_and_value_sizes_are_checked_like_the_other_limits():
    assert limits_from_json('{"features_on": ["sinks"], "value_sizes": [64]}') == Limits(features_on=("sinks",),
                                                                                         value_sizes=(64,))
    with pytest.raises(LimitsError, match="value_sizes"):
        limits_from_json('{"value_sizes": [0]}')
    with pytest.raises(LimitsError, match="features_on"):
        limits_from_json('{"features_on": ["nope"]}')


def test_declared_keys_follow_the_focus_s_value_sizes_and_features():
    """A focus that leaves head_size_v out (or narrows the value sizes) declares no key it cannot draw: a tour of such
    a key found no case, and hypothesis' Unsatisfiable ended the campaign with a harness error (exit 3)."""
    from fuzz.strategies import declared_compile_keys

    caps = get("torch-sdpa-math").caps
    per = ("dtypes", "head_sizes")
    both = declared_compile_keys(caps, Limits(dtypes=("float32",), head_sizes=(64,)), per)
    assert len(both) > 1 and all(k[1][0] == 64 for k in both)
    without = declared_compile_keys(caps, Limits(dtypes=("float32",), head_sizes=(64,), features=("gqa", "window")), per)
    assert without == [("float32", (64, 64))]
    narrowed = declared_compile_keys(caps, Limits(dtypes=("float32",), head_sizes=(64,), value_sizes=(32,)), per)
    assert {k[1] for k in narrowed} == {(64, 64), (64, 32)}
