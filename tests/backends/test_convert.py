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


def test_position_rule_with_tensor_scalars_is_the_same_rule():
    # flex's FLASH backend needs the rule's integers as device tensors; the mask must not change.
    from hypothesis import HealthCheck, given, settings

    from backends._convert import key_offset, position_rule
    from fuzz.strategies import ORACLE_CAPS, Limits, cases

    @settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases(ORACLE_CAPS, Limits(max_sequences=2, max_context=30, max_query=6)))
    def check(case):
        plain, tensors = position_rule(case, "cpu"), position_rule(case, "cpu", tensor_scalars=True)
        for i, s in enumerate(case.sequences):
            qp = torch.arange(s.query_len)[:, None] + key_offset(case, i)
            kp = torch.arange(case.kv_lens[i])[None, :]
            for h in range(case.num_heads):
                assert torch.equal(plain(h, qp, kp), tensors(h, qp, kp))

    check()


def test_an_alibi_bias_without_the_query_position_moves_only_the_lse_and_by_alibi_query_term():
    """FlashInfer's decode LSE (measured) uses slope * k; the oracle slope * (k - q): the adapter subtracts
    alibi_query_term. Checked here on the oracle: the softmax over slope * k scores has its LSE."""
    import reference as r
    from backends._convert import alibi_query_term
    from reference.attention import attention
    from reference.inputs import materialize

    slopes = (0.5, 0.125, 0.03125, 2.0 ** -7)
    case = r.Case(sequences=(r.SequenceSpec(query_len=1, context_len=40), r.SequenceSpec(query_len=3, context_len=9)),
                  num_heads=4, num_kv_heads=2, head_size=16, dtype=r.DType.FLOAT32,
                  alibi=r.Alibi(slopes, r.AlibiConvention.SIGNED))
    inputs = materialize(case)
    expected = attention(inputs)
    lse_k_only, start = [], 0
    for seq, k in zip(case.sequences, inputs.keys):
        q = inputs.query[start:start + seq.query_len].double()
        start += seq.query_len
        pos_q = torch.arange(seq.query_len) + case.query_offset(seq)
        scores = torch.einsum("qhd,khd->hqk", q, k.double().repeat_interleave(2, 1)) * case.softmax_scale
        bias = torch.tensor(slopes, dtype=torch.float64)[:, None, None] * torch.arange(k.shape[0])[None, None]
        scores = scores + bias
        scores = scores.masked_fill(torch.arange(k.shape[0])[None, None] > pos_q[None, :, None], float("-inf"))
        lse_k_only.append(scores.logsumexp(-1).T)
    shifted = torch.cat(lse_k_only) - alibi_query_term(case, torch.tensor(slopes)).double()
    assert torch.allclose(shifted, expected.lse, atol=1e-5)
