"""reference.widening.widen is t.to(dtype) to the bit, whichever road it takes: every narrow float (float16, bfloat16,
fp8) is a float32 and every float32 a float64, so the road through float32 may not change a value, an infinity, a
NaN's place or a zero's sign."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from reference.widening import widen

NARROW = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


@pytest.mark.parametrize("dtype", NARROW)
def test_every_bit_pattern_widens_as_a_direct_conversion(dtype):
    if torch.empty((), dtype=dtype).element_size() == 2:
        patterns = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16)
    else:
        patterns = torch.arange(2 ** 8, dtype=torch.int32).to(torch.uint8)
    values = patterns.view(dtype)
    direct, widened = values.to(torch.float64), widen(values)
    assert widened.dtype == torch.float64
    assert torch.equal(torch.isnan(direct), torch.isnan(widened))
    finite = ~torch.isnan(direct)
    assert torch.equal(direct[finite].view(torch.int64), widened[finite].view(torch.int64))  # signs of zeros too


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=64),
       st.sampled_from((torch.float32, torch.float64, torch.float16, torch.bfloat16)))
def test_other_targets_are_a_plain_conversion(values, dtype):
    t = torch.tensor(values, dtype=torch.float32)
    assert torch.equal(widen(t, dtype).view(torch.uint8), t.to(dtype).view(torch.uint8))
