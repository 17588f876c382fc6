"""Hand-worked examples that pin each convention to numbers (the docstrings' pictures as tensors)."""
from __future__ import annotations

import math

import pytest
import torch

import reference as r
from reference.scores import alibi_bias
from reference.visibility import causal_visible, chunk_visible, visible, window_visible


def test_decoder_is_causal_bottom_right_aligned():
    case = r.Case(sequences=(r.SequenceSpec(query_len=2, context_len=2),), num_heads=1, num_kv_heads=1, head_size=8)
    assert visible(case, case.sequences[0])[0].tolist() == [[True, True, True, False], [True, True, True, True]]


def test_window_of_one_sees_only_itself():
    case = r.Case(sequences=(r.SequenceSpec(query_len=3, context_len=1),), num_heads=1, num_kv_heads=1,
                  head_size=8, sliding_window=1)
    mask = visible(case, case.sequences[0])[0]
    assert mask.tolist() == [[False, True, False, False], [False, False, True, False], [False, False, False, True]]


def test_encoder_only_window_is_symmetric():
    case = r.Case(sequences=(r.SequenceSpec(query_len=4),), attn_type=r.AttentionType.ENCODER_ONLY,
                  num_heads=1, num_kv_heads=1, head_size=8, sliding_window=2)
    assert visible(case, case.sequences[0])[0].int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]


def test_encoder_window_is_one_sided_as_in_vllm():
    # vLLM passes (W-1, W-1) only for encoder_only; attn_type=encoder gets (W-1, 0).
    case = r.Case(sequences=(r.SequenceSpec(query_len=3),), attn_type=r.AttentionType.ENCODER,
                  num_heads=1, num_kv_heads=1, head_size=8, sliding_window=8)
    assert visible(case, case.sequences[0])[0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]


def test_window_predicate_picture():
    q, k = torch.tensor([[2], [3]]), torch.arange(4)[None]
    assert (causal_visible(q, k) & window_visible(q, k, 1, 0)).int().tolist() == [[0, 1, 1, 0], [0, 0, 1, 1]]


def test_chunked_local_picture():
    q, k = torch.tensor([[2], [3]]), torch.arange(4)[None]
    assert (causal_visible(q, k) & chunk_visible(q, k, 2)).int().tolist() == [[0, 0, 1, 0], [0, 0, 1, 1]]


def test_alibi_conventions_agree_causally_and_differ_bidirectionally():
    slopes = torch.tensor([0.5], dtype=torch.float64)
    q, k = torch.tensor([[2]]), torch.arange(4)[None]
    signed = alibi_bias(slopes, q, k, r.AlibiConvention.SIGNED)[0, 0].tolist()
    symmetric = alibi_bias(slopes, q, k, r.AlibiConvention.SYMMETRIC)[0, 0].tolist()
    assert signed == [-1.0, -0.5, 0.0, 0.5]
    assert symmetric == [-1.0, -0.5, 0.0, -0.5]


def test_row_with_no_visible_key_gives_zero_output_and_lse_minus_inf():
    case = r.Case(sequences=(r.SequenceSpec(query_len=2, encoder_len=0), r.SequenceSpec(query_len=1, encoder_len=3)),
                  attn_type=r.AttentionType.ENCODER_DECODER, num_heads=2, num_kv_heads=1, head_size=8)
    e = r.attention(r.materialize(case))
    assert torch.equal(e.output[:2], torch.zeros_like(e.output[:2]))
    assert torch.isneginf(e.lse[:2]).all() and torch.isfinite(e.lse[2]).all()


def test_sink_alone_gives_zero_output_and_its_logit_as_lse():
    case = r.Case(sequences=(r.SequenceSpec(query_len=1, encoder_len=0),), attn_type=r.AttentionType.ENCODER_DECODER,
                  num_heads=2, num_kv_heads=2, head_size=8, sinks=(1.5, -2.0))
    e = r.attention(r.materialize(case))
    assert torch.equal(e.output, torch.zeros_like(e.output))
    assert e.lse[0].tolist() == [1.5, -2.0]


def test_single_key_output_is_its_value_and_lse_its_logit():
    case = r.Case(sequences=(r.SequenceSpec(query_len=1),), num_heads=1, num_kv_heads=1, head_size=4,
                  dtype=r.DType.FLOAT32)
    i = r.materialize(case)
    e = r.attention(i)
    logit = float((i.query[0, 0].double() * i.keys[0][0, 0].double()).sum()) * 0.5
    assert torch.allclose(e.output[0, 0], i.values[0][0, 0].double())
    assert math.isclose(float(e.lse[0, 0]), logit, rel_tol=1e-12)


@pytest.mark.parametrize("changes, field", [
    (dict(num_heads=8, num_kv_heads=3), "Case.num_kv_heads=3: must divide num_heads=8"),
    (dict(head_size=0), "Case.head_size=0"),
    (dict(sliding_window=0), "Case.sliding_window=0"),
    (dict(sequences=(r.SequenceSpec(query_len=-1),)), "Case.sequences[0].query_len=-1"),
    (dict(attn_type=r.AttentionType.ENCODER, sequences=(r.SequenceSpec(query_len=2, context_len=3),)),
     "attn_type=encoder has no cache"),
    (dict(soft_cap=-1.0), "Case.soft_cap=-1.0"),
    (dict(sinks=(1.0,)), "Case.sinks has 1 values"),
])
def test_invalid_case_names_field_value_and_allowed(changes, field):
    base = dict(sequences=(r.SequenceSpec(query_len=1),), num_heads=4, num_kv_heads=4, head_size=8)
    with pytest.raises(r.CaseError, match=__import__("re").escape(field)):
        r.Case(**{**base, **changes})


def test_unknown_enum_value_in_json_names_the_allowed_values():
    text = r.Case(sequences=(r.SequenceSpec(query_len=1),), head_size=8).to_json().replace('"bfloat16"', '"fp12"')
    with pytest.raises(r.CaseError, match="DType='fp12'.*float32"):
        r.Case.from_json(text)


def test_kernel_causal_alignment_pictures():
    """q=2, k=4: bottom-right puts the queries at keys 2, 3; top-left at keys 0, 1 (SDPA's is_causal)."""
    seq = r.SequenceSpec(query_len=2, key_len=4)
    br = r.Case(sequences=(seq,), attn_type=r.AttentionType.KERNEL, causal=True)
    tl = br.replace(causal_alignment=r.CausalAlignment.TOP_LEFT)
    assert visible(br, seq)[0].int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert visible(tl, seq)[0].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0]]


def test_kernel_more_queries_than_keys_leaves_leading_rows_empty():
    """q=3, k=1, bottom-right causal: queries sit at -2, -1, 0; only the last sees the key."""
    case = r.Case(sequences=(r.SequenceSpec(query_len=3, key_len=1),), attn_type=r.AttentionType.KERNEL, causal=True)
    e = r.attention(r.materialize(case))
    assert torch.isneginf(e.lse[:2]).all() and (e.output[:2] == 0).all() and torch.isfinite(e.lse[2]).all()


def test_kernel_window_pair_picture():
    """Non-causal (left=1, right=0) is one key back plus the query's own; (0, 1) is own plus one ahead."""
    seq = r.SequenceSpec(query_len=3, key_len=3)
    back = r.Case(sequences=(seq,), attn_type=r.AttentionType.KERNEL, window=(1, 0))
    ahead = back.replace(window=(0, 1))
    assert visible(back, seq)[0].int().tolist() == [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    assert visible(ahead, seq)[0].int().tolist() == [[1, 1, 0], [0, 1, 1], [0, 0, 1]]
