"""A JIT backend's `jit_variant` follows the arguments its library builds a module for, spelling included: a
campaign gates first calls by it (campaign.claims), so a variant it misses is a build outside the compile slots.
Runs on the CPU: only the declaration is read, never the library."""
from __future__ import annotations

import dataclasses

from hypothesis import given, settings

from backends import spellings
from backends.registry import get
from fuzz.strategies import Limits, cases
from reference.case import AttentionType, Case

SMALL = Limits(max_sequences=3, max_context=20, max_query=8, max_kv_heads=2, tiers=("small",))


def spelled(case: Case, unbounded: str, causal: str = "flag") -> Case:
    return case.replace(encodings=((spellings.UNBOUNDED_WINDOW, unbounded), (spellings.CAUSAL, causal)))


def kernel_cases(name: str):
    caps = get(name).caps
    return cases(dataclasses.replace(caps, attn_types=frozenset({AttentionType.KERNEL}), devices=frozenset({"cpu"})),
                 SMALL)


@settings(max_examples=40, deadline=None)
@given(kernel_cases("fa4-varlen"))
def test_fa4_variant_is_the_mask_its_interface_resolves(case):
    """FA4 resolves (causal, window_size) before it picks a kernel: (-1, -1) and (None, None) are no window, causality
    as the flag and as the window (None, 0) one causal kernel; a side spelled as a number past the keys is a local
    kernel, another compile."""
    fa4 = get("fa4-varlen")
    open_case = case.replace(causal=False, window=None)
    none, minus_one = (fa4.jit_variant(spelled(open_case, s)) for s in (spellings.NONE, spellings.MINUS_ONE))
    assert none == minus_one
    assert fa4.jit_variant(spelled(open_case, spellings.BEYOND)) != none
    causal = case.replace(causal=True, window=None)
    assert fa4.jit_variant(spelled(causal, spellings.NONE, "flag")) == fa4.jit_variant(
        spelled(causal, spellings.NONE, "window"))
    assert fa4.jit_variant(spelled(causal, spellings.NONE)) != none


@settings(max_examples=20, deadline=None)
@given(kernel_cases("fa4-paged"))
def test_fa4_builds_a_variant_per_soft_cap_value(case):
    """FA4's compile key hashes the soft-cap closure with its captured cap: each value is a build of its own, and an
    uncapped case is not a cap of 0 spelled otherwise."""
    fa4 = get("fa4-paged")
    capped = {fa4.jit_variant(case.replace(soft_cap=cap)) for cap in (2.0, 30.0)}
    assert len(capped) == 2 and fa4.jit_variant(case.replace(soft_cap=None)) not in capped


@settings(max_examples=40, deadline=None)
@given(kernel_cases("flashinfer-prefill-fa2"))
def test_flashinfer_variant_follows_the_spelled_window_left(case):
    """FlashInfer names its module use_swa = (window_left >= 0): an unbounded window spelled -1 is the plain module,
    spelled as a number past the keys the windowed one, the module of a bounded window of the same key."""
    fi = get("flashinfer-prefill-fa2")
    open_case = case.replace(window=None)
    plain = fi.jit_variant(spelled(open_case, spellings.MINUS_ONE))
    past = fi.jit_variant(spelled(open_case, spellings.BEYOND))
    assert plain != past
    assert past == fi.jit_variant(spelled(case.replace(window=(2, None if case.causal else 2)), spellings.MINUS_ONE))
