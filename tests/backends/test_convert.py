"""Adapter-side conversions that a square shape could fool."""
from __future__ import annotations

import torch

from backends._convert import tokens_first_lse


def test_lse_layout_follows_the_documentation_when_tokens_equal_heads():
    th = torch.arange(9.0).reshape(3, 3)  # [tokens, heads] with tokens == heads
    out, notes = tokens_first_lse(th, 3, 3, documented="TH")
    assert torch.equal(out, th) and notes == {}
    out, notes = tokens_first_lse(th.T.contiguous(), 3, 3, documented="HT")
    assert torch.equal(out, th) and notes == {}


def test_lse_layout_that_contradicts_the_documentation_is_followed_and_reported():
    th = torch.arange(6.0).reshape(3, 2)  # 3 tokens, 2 heads, but documented [heads, tokens]
    out, notes = tokens_first_lse(th, 3, 2, documented="HT")
    assert torch.equal(out, th) and "documented HT" in notes["lse_layout"]
    out, _ = tokens_first_lse(th[..., None], 3, 2, documented="TH")  # cuDNN's trailing 1
    assert torch.equal(out, th)
