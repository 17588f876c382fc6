"""Kernels that run P.V in fp8 (Capabilities.fp8_probabilities): the tolerance rule's baseline holds the probabilities
as the backend declares (reference.softmax.rounded_probabilities, fuzz.tolerance.probability_rounding), so a correct
such kernel passes, the same kernel undeclared fails, and a planted bug under the declaration still fails.
The kernel here is the naive paged twin with its split-K weights rounded tile by tile, relative to each split's own
maximum as an online softmax does: a second formulation of the rounding, not the baseline's code."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import backends.naive as naive
from backends.naive import Bug
from fuzz.strategies import Limits
from fuzz.tolerance import probability_rounding
from reference.case import KVCacheDType
from reference.softmax import ProbabilityRounding, probabilities, rounded_probabilities
from tests.fuzz.drawing import derandomized, twin_verdicts

E4M3 = torch.float8_e4m3fn


def held_partial(scale: float):
    """naive._partial whose unnormalized weights exp(s - split max) are multiplied by `scale` and rounded to e4m3
    before P.V (the normalizer sums the unrounded ones), as FlashInfer's sm90 fp8 prefill and vLLM's Triton
    attention with an fp8 query do."""
    def partial(s, v):
        if s.shape[-1] == 0:
            return PLAIN_PARTIAL(s, v)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        p = torch.exp(s - m)
        total = p.sum(-1)
        held = (p * scale).to(E4M3).float() / scale
        out = torch.einsum("hqk,khd->qhd", held, v) / torch.where(total > 0, total, torch.ones_like(total)).T[..., None]
        return out, (m[..., 0] + torch.log(total)).T
    return partial


PLAIN_PARTIAL = naive._partial  # before any test patches it

FP8_CAPS = replace(naive.NAIVE_CAPS, kv_cache_dtypes=frozenset({KVCacheDType.FP8_E4M3}), fp8_query_only=True,
                   dtypes=frozenset({naive.DType.BFLOAT16, naive.DType.FLOAT16}))


def drawn(n: int = 30) -> list:
    """Derandomized draws of the fp8 declaration: every one reads an fp8 query over an e4m3 cache."""
    return [c for c in derandomized(FP8_CAPS, Limits(tiers=("small", "tile")), n)
            if c.cache is not None and c.cache.quant.q_fp8_scale is not None]


@pytest.mark.parametrize("scale", [1.0, 448.0])
def test_a_kernel_holding_p_in_fp8_passes_when_declared_and_fails_undeclared(monkeypatch, scale):
    monkeypatch.setattr(naive, "_partial", held_partial(scale))
    todo = drawn()
    assert len(todo) >= 15
    assert "mismatch" not in twin_verdicts(replace(FP8_CAPS, fp8_probabilities=scale), todo)
    assert "mismatch" in twin_verdicts(FP8_CAPS, todo)  # the rounding is more than the plain baseline allows


def test_a_planted_bug_still_fails_under_the_declaration(monkeypatch):
    monkeypatch.setattr(naive, "_partial", held_partial(448.0))
    todo = [c for c in drawn(60) if c.soft_cap is not None and c.soft_cap < 5]
    assert todo
    assert "mismatch" in twin_verdicts(replace(FP8_CAPS, fp8_probabilities=448.0), todo, Bug.SOFT_CAP_IGNORED)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 40), st.floats(0.1, 30.0), st.sampled_from([1.0, 256.0, 448.0]),
       st.integers(0, 2**31 - 1))
def test_rounded_probabilities_round_each_weight_to_e4m3(heads, keys, spread, scale, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(heads, 3, keys, generator=g, dtype=torch.float64) * spread
    scores[0, 0] = -math.inf  # a row without a visible key
    lse = torch.logsumexp(scores, -1)
    exact = probabilities(scores, lse)
    # a format that holds every float64 weight: the readable formula itself
    assert torch.allclose(rounded_probabilities(scores, lse, ProbabilityRounding(torch.float64, scale)), exact,
                          rtol=1e-12, atol=0)
    held = rounded_probabilities(scores, lse, ProbabilityRounding(E4M3, scale))
    assert bool((held[0, 0] == 0).all())
    top = scores.amax(-1, keepdim=True)
    weights = (held / torch.exp(top - lse[..., None])).nan_to_num(0.0) * scale  # what the kernel stored
    finite = torch.isfinite(lse)[..., None].expand_as(weights)
    stored = weights[finite]
    assert torch.allclose(stored.to(E4M3).double(), stored, rtol=1e-12, atol=0)  # e4m3 values
    normal = (exact * torch.exp(lse[..., None] - top) * scale >= 2.0**-6) & finite
    assert bool(((held - exact).abs() <= 2.0**-4 * exact + 1e-15)[normal].all())  # half an e4m3 step


def test_probability_rounding_applies_to_fp8_queries_over_fp8_caches_only():
    case = drawn(10)[0]
    assert probability_rounding(case, None) is None
    assert probability_rounding(case, 448.0) == ProbabilityRounding(E4M3, 448.0)
    no_query = case.replace(cache=replace(case.cache, quant=replace(case.cache.quant, q_fp8_scale=None)))
    assert probability_rounding(no_query, 448.0) is None
    auto = case.replace(cache=replace(case.cache, quant=replace(case.cache.quant, kv_cache_dtype=KVCacheDType.AUTO,
                                                                q_fp8_scale=None)))
    assert probability_rounding(auto, 1.0) is None


def test_with_a_sink_the_weights_are_rounded_relative_to_it():
    """vLLM's Triton attention starts its running max at the sink (init_softmax_M): with a sink above every score
    the weights are exp(s - sink), and those under e4m3's smallest subnormal are 0. So modelled, the 57 failing
    fp8-query sink cases of its layer without PrefixLM or ALiBi pass (results/tolerance/fp8-probabilities-2026-11-26.md)."""
    scores = torch.tensor([[[-1.0, -2.0, -8.0]]], dtype=torch.float64)  # [H, q, k]
    lse = torch.logsumexp(scores, -1)
    rounding = ProbabilityRounding(E4M3, 1.0)
    held = rounded_probabilities(scores, lse, rounding, torch.tensor([[[3.0]]], dtype=torch.float64))
    expect = torch.exp(scores - 3.0).to(E4M3).double() * torch.exp(3.0 - lse[..., None])
    assert torch.allclose(held, expect, rtol=1e-12, atol=0)
    assert float(held[0, 0, 2]) == 0.0  # exp(-11)
    assert not torch.allclose(held, rounded_probabilities(scores, lse, rounding))
