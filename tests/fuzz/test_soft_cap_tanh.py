"""Kernels that cap logits with an approximate tanh (Capabilities.soft_cap_tanh_error: FA3's and FlashInfer's
tanh.approx.f32, relative error up to 2^-11): the tolerance rule adds what that error moves the output by
(fuzz.tolerance.soft_cap_shift), so such a correct kernel passes, the same kernel undeclared fails, and a planted
soft-cap bug under the declaration still fails. The kernel is the naive paged twin whose tanh is off by the full 2^-11
in a sign that follows the logit's bits, not the rule's formula."""
from __future__ import annotations

from dataclasses import replace

import torch
import backends.naive as naive
from backends.base import PTX_TANH_APPROX
from backends.naive import Bug
from fuzz.strategies import Limits
from fuzz.tolerance import soft_cap_shift
from reference.case import DType
from tests.fuzz.drawing import derandomized, twin_verdicts

CAPS = replace(naive.NAIVE_CAPS, dtypes=frozenset({DType.FLOAT32, DType.FLOAT16}))


def approximate_cap(s: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(s / cap) with tanh off by a relative 2^-11, up or down by the parity of the logit's float32 bits."""
    t = torch.tanh(s / cap)
    sign = (s.float().view(torch.int32) & 1).to(t.dtype) * 2 - 1
    return cap * t * (1 + PTX_TANH_APPROX * sign)


def drawn(n: int = 80) -> list:
    """Derandomized soft-capped draws of the twin's declaration."""
    return [c for c in derandomized(CAPS, Limits(tiers=("small", "tile")), n) if c.soft_cap is not None]


def test_an_approximate_tanh_passes_when_declared_and_fails_undeclared(monkeypatch):
    monkeypatch.setattr(naive, "_soft_cap", approximate_cap)
    todo = drawn()
    assert len(todo) >= 15
    assert "mismatch" not in twin_verdicts(replace(CAPS, soft_cap_tanh_error=PTX_TANH_APPROX), todo)
    assert "mismatch" in twin_verdicts(CAPS, [c for c in todo if c.dtype == DType.FLOAT32])


def test_a_planted_soft_cap_bug_still_fails_under_the_declaration(monkeypatch):
    monkeypatch.setattr(naive, "_soft_cap", approximate_cap)
    todo = [c for c in drawn() if c.soft_cap < 5]
    assert todo
    assert "mismatch" in twin_verdicts(replace(CAPS, soft_cap_tanh_error=PTX_TANH_APPROX), todo, Bug.SOFT_CAP_IGNORED)


def test_the_soft_cap_shift_needs_a_cap_and_a_declaration_and_is_bounded_by_the_cap():
    case = drawn(40)[0]
    assert soft_cap_shift(case, 0.0, 3.0) == 0.0
    assert soft_cap_shift(case.replace(soft_cap=None), PTX_TANH_APPROX, 3.0) == 0.0
    assert soft_cap_shift(case, PTX_TANH_APPROX, 1e9) == PTX_TANH_APPROX * case.soft_cap  # every capped logit <= cap
