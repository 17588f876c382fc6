"""The oracle's 16-bit products (reference.attention.product, reference.packed's score and value products) widen their
operands to float32 on the CPU where its own GEMM of that dtype is slow (reference.attention.gemm_operand): the result,
rounded back once, must be what torch's GEMM in that dtype gives, float32 accumulation and one rounding, up to the
order of the float32 sums: the same bits in nearly every element, and within a GEMM's rounding bound elsewhere."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from reference.attention import _cpu_has_bf16_gemm, _WIDENED_FOR_GEMM, gemm_operand, product
from reference.packed import score_product, value_product

SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def assert_same_gemm(ours: torch.Tensor, own: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """`ours` and `own` (products of a and b in a 16-bit dtype) are the same bits in all but 1 % of elements (and one),
    and apart by at most the dtype's epsilon x sum |a||b| (a GEMM's rounding bound) elsewhere."""
    assert ours.dtype == own.dtype
    assert int((ours != own).sum()) <= 1 + ours.numel() // 100
    bound = torch.finfo(ours.dtype).eps * torch.matmul(a.double().abs(), b.double().abs())
    assert bool(((ours.double() - own.double()).abs() <= bound.reshape(ours.shape)).all())


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SIXTEEN_BIT), st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.integers(1, 40),
       st.integers(1, 70), st.sampled_from((16, 64, 128)), st.integers(0, 2 ** 31 - 1))
def test_widened_products_are_the_dtypes_own_gemm(dtype, batch, kv_heads, group, queries, keys, dim, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, kv_heads * group, queries, dim, generator=gen).to(dtype)
    k = torch.randn(batch, kv_heads, keys, dim, generator=gen).to(dtype)
    grouped = q.reshape(batch, kv_heads, group * queries, dim), k.transpose(-1, -2)
    scores = score_product(q, k)
    assert_same_gemm(scores, torch.matmul(*grouped).reshape(scores.shape), *grouped)
    p = torch.rand(batch, kv_heads * group, queries, keys, generator=gen).to(dtype)
    v = torch.randn(batch, kv_heads, keys, dim, generator=gen).to(dtype)
    grouped = p.reshape(batch, kv_heads, group * queries, keys), v
    out = value_product(p, v).to(dtype)
    assert_same_gemm(out, torch.matmul(*grouped).reshape(out.shape), *grouped)


@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
def test_the_chunked_product_rounds_like_the_packed_one(dtype):
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(9, 2, 3, 64, generator=gen).to(dtype)  # [q, n, g, d]
    k = torch.randn(33, 2, 64, generator=gen).to(dtype)  # [k, n, d]
    chunked = product("qngd,knd->ngqk", q, k).reshape(6, 9, 33)
    packed = score_product(q.permute(1, 2, 0, 3).reshape(1, 6, 9, 64), k.permute(1, 0, 2).unsqueeze(0))[0]
    grouped = q.permute(1, 2, 0, 3).reshape(2, 27, 64), k.permute(1, 2, 0)  # [n, g * q, d], [n, d, k]
    assert_same_gemm(chunked, packed, *grouped)


def test_bfloat16_is_widened_only_where_the_cpu_has_no_bfloat16_gemm():
    assert torch.float16 in _WIDENED_FOR_GEMM
    assert (torch.bfloat16 in _WIDENED_FOR_GEMM) == (not _cpu_has_bf16_gemm())
    t = torch.ones(2, dtype=torch.bfloat16)
    assert gemm_operand(t).dtype == (torch.float32 if torch.bfloat16 in _WIDENED_FOR_GEMM else torch.bfloat16)
    assert gemm_operand(torch.ones(2, dtype=torch.float64)).dtype == torch.float64
