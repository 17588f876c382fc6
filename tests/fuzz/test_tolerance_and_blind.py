from __future__ import annotations

import torch
from hypothesis import given, strategies as st

import reference as r
from fuzz.blind import shift_by_one_key
from fuzz.compare import evaluate
from fuzz.tolerance import RULES, limits, rounding_floor, rule_for
from backends.naive import NaivePaged


def test_floor_is_never_zero_even_when_the_baseline_is_exact():
    expected = torch.zeros(3, 2, 4, dtype=torch.float64)
    lim = limits(RULES[r.DType.BFLOAT16], expected, expected.clone(), torch.bfloat16)
    assert lim.max_limit > 0 and lim.floor >= RULES[r.DType.BFLOAT16].abs_floor


def test_rounding_floor_grows_with_magnitude():
    values = torch.linspace(0.11, 0.97, 50, dtype=torch.float64)
    small = rounding_floor(values, torch.bfloat16)
    big = rounding_floor(values * 300, torch.bfloat16)
    assert big > small >= 0


def test_quantized_caches_get_the_quantization_factor():
    assert rule_for(r.DType.BFLOAT16, r.KVCacheDType.FP8_E4M3).factor > RULES[r.DType.BFLOAT16].factor


@given(st.integers(1, 6), st.integers(1, 6))
def test_mask_shift_changes_each_row_by_exactly_one_key_where_possible(q, k):
    mask = torch.rand(2, q, k) > 0.5
    shifted = shift_by_one_key(mask)
    changed = (shifted != mask).sum(-1)
    assert (changed <= 1).all()
    can_add = ~mask[..., -1]  # some hidden key follows the last visible one
    can_drop = mask.sum(-1) >= 2
    assert (changed[can_add | can_drop] == 1).all()


def _shifted_row(row: list[bool], keys: int) -> list[bool]:
    """shift_by_one_key's rule read row by row: the key after the last visible one joins where it is a real key (before
    `keys`), else the last visible one leaves where the row sees two or more."""
    seen = [j for j, v in enumerate(row) if v]
    last = seen[-1] if seen else -1
    out = list(row)
    if last + 1 < keys:
        out[last + 1] = True
    elif len(seen) >= 2:
        out[last] = False
    return out


@given(st.integers(1, 7), st.integers(0, 7), st.data())
def test_mask_shift_is_the_row_by_row_rule_with_padded_keys(q, k, data):
    mask = torch.tensor(data.draw(st.lists(st.lists(st.lists(st.booleans(), min_size=k, max_size=k), min_size=q,
                                                        max_size=q), min_size=3, max_size=3)), dtype=torch.bool)
    num_keys = torch.tensor(data.draw(st.lists(st.integers(0, k), min_size=3, max_size=3)))
    mask &= torch.arange(k) < num_keys[:, None, None]  # a padded mask sees nothing past its real keys
    plain, padded = shift_by_one_key(mask), shift_by_one_key(mask, num_keys[:, None])
    for b in range(3):
        for i in range(q):
            assert plain[b, i].tolist() == _shifted_row(mask[b, i].tolist(), k)
            assert padded[b, i].tolist() == _shifted_row(mask[b, i].tolist(), int(num_keys[b]))


def test_uniform_attention_over_many_keys_is_reported_blind():
    # Values near 0 and a tiny logit scale: shifting the mask by one key cannot exceed the limit.
    case = r.Case(sequences=(r.SequenceSpec(query_len=1, context_len=400),), num_heads=1, num_kv_heads=1,
                  head_size=8, values=r.Values(logit_scale=0.01), dtype=r.DType.BFLOAT16,
                  cache=r.CacheSpec(block_size=16))
    row = evaluate(NaivePaged(), case).row
    assert row["verdict"] in ("blind", "pass")
    assert row["mask_shift_error"] < 0.2


def test_logit_rounding_floor_scales_with_logit_size_and_output():
    from fuzz.tolerance import FP32_EPS, logit_rounding_floor

    out = torch.full((2, 2, 4), 3.0, dtype=torch.float64)
    small = logit_rounding_floor(out, torch.zeros(2, 2, dtype=torch.float64))
    large = logit_rounding_floor(out, torch.full((2, 2), -60.0, dtype=torch.float64))
    assert small == 2 * FP32_EPS * 1.0 * 3.0 and large == 60 * small
    assert logit_rounding_floor(out, torch.full((2, 2), float("-inf"), dtype=torch.float64)) == 0.0
    assert large < 1e-4  # far below any planted bug's error, and the fp16 / bf16 floors
