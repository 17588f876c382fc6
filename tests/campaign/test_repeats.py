"""The fixed-prefix filter removes the early cases hypothesis draws whatever the seed (work a campaign would do
twice): calibrated at a shard's max_examples, not below it, where hypothesis orders its first draws differently."""
from __future__ import annotations

from unittest import mock

import campaign.drawing as drawing
from backends.registry import get
from benchmarks.repeats import repeat_share
from fuzz.strategies import Limits, cases


def test_shards_of_a_campaign_rarely_draw_the_same_case():
    strategy = cases(get("torch-naive-paged").caps, Limits(dtypes=("bfloat16",), head_sizes=(128,)))
    drawing.pin_hypothesis_constants()
    prefix = drawing.fixed_prefix(strategy)
    share, _ = repeat_share(strategy, "torch-naive-paged", prefix, shards=6, per=100)
    unfiltered, _ = repeat_share(strategy, "torch-naive-paged", frozenset(), shards=6, per=100)
    assert share < 0.01 < unfiltered, (share, unfiltered)
    with mock.patch.object(drawing, "STEADY_MAX_EXAMPLES", 12):  # calibrated below the shards' budget: misses
        small = drawing.fixed_prefix(strategy)
    assert repeat_share(strategy, "torch-naive-paged", small, shards=6, per=100)[0] > share
