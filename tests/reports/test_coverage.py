"""The coverage map: every declared value of every dimension, drawn or not; a short campaign on the
CPU paged kernel draws all of them."""
from __future__ import annotations

import json

import pandas as pd

from backends.registry import get
from campaign.declarations import declarations
from campaign.engine import CampaignConfig, run_campaign
from reports.build import load_rows
from reports.coverage import coverage_map, load_declarations, never_drawn


def test_a_declared_value_never_drawn_shows_as_zero_and_an_undeclared_one_is_flagged():
    rows = pd.DataFrame([dict(backend="k", phase="generate", verdict="pass", features="gqa,window", dtype="bfloat16"),
                         dict(backend="k", phase="generate", verdict="mismatch", features="window", dtype="float16")])
    cov = coverage_map(rows, {"k": {"feature": ["gqa", "window", "alibi"], "dtype": ["bfloat16"]}})
    get_ = lambda d, v: cov[(cov.dimension == d) & (cov.value == v)].iloc[0]  # noqa: E731
    assert (get_("feature", "window").drawn, get_("feature", "window").failed) == (2, 1)
    assert get_("feature", "alibi").drawn == 0 and list(never_drawn(cov).value) == ["alibi"]
    assert not get_("dtype", "float16").declared


def test_a_short_campaign_on_the_cpu_paged_kernel_draws_everything_it_declares(tmp_path):
    run_campaign(CampaignConfig(out=tmp_path, backends=["torch-naive-paged"], examples=500, workers=2, progress=False))
    cov = coverage_map(load_rows(tmp_path), load_declarations(tmp_path))
    declared = declarations(get("torch-naive-paged"))
    assert set(cov.dimension) == {d for d, values in declared.items() if values}
    missing = never_drawn(cov)
    assert missing.empty, missing.to_string()
    tiers = cov[cov.dimension == "size_tier"].set_index("value")["share"]
    assert tiers["tile"] + tiers["long"] >= 0.3
    # hypothesis starts every shard with its simplest cases: those, and repeats within a shard, are not
    # examples (before campaign.drawing.Fresh about 11 % of such a campaign's rows repeated an earlier case)
    rows = load_rows(tmp_path)
    generated = rows[rows["phase"].fillna("generate") == "generate"]
    repeats = generated["case"].map(lambda c: c if isinstance(c, str) else json.dumps(c, sort_keys=True)).duplicated()
    assert repeats.mean() < 0.05, repeats.mean()


def test_values_left_out_by_the_focus_are_marked_apart_not_called_blind_spots():
    from campaign.declarations import focused_out
    from fuzz.strategies import Limits

    declared = declarations(get("vllm-triton-unified"))
    out = focused_out(declared, Limits(dtypes=("bfloat16",), kv_cache_dtypes=("auto",), attn_types=("decoder",)))
    assert out["dtype"] == ["float16"] and "auto" not in out["kv_cache_dtype"] and "kernel" in out["attn_type"]
    assert {"kv_fp8_e4m3", "paged_kernel", "more_queries_than_keys"} <= set(out["feature"])
    assert focused_out(declared, Limits(dtypes=("float32",))) == {}  # a focus that keeps nothing keeps everything
    assert "value_class" not in focused_out(declared, Limits(tiers=("small",)))  # edge: large logit scales too
    rows = pd.DataFrame([dict(backend="k", phase="generate", verdict="pass", features="", dtype="bfloat16")])
    cov = coverage_map(rows, {"k": {"dtype": ["bfloat16", "float16"], "_focused_out": {"dtype": ["float16"]}}})
    assert set(cov.dimension) == {"dtype"} and never_drawn(cov).empty
    assert not cov.set_index("value").loc["float16", "in_focus"]


def test_kernel_only_features_are_not_declared_without_kernel_cases():
    assert "more_queries_than_keys" not in declarations(get("flex-decode-cuda"))["feature"]
    assert {"more_queries_than_keys", "paged_kernel"} <= set(declarations(get("fa4-paged"))["feature"])
