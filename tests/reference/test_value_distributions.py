"""The value distributions do what their names promise: EDGE's last key holds real weight at any length."""
from __future__ import annotations

import pytest
import torch

import reference as r
from reference.inputs import materialize
from reference.values import EDGE_MARGIN, edge_boost


def _last_key_weight(case: r.Case) -> torch.Tensor:
    """[H, q] softmax weight of each sequence's last key, for cross-attention cases (every key visible)."""
    inputs = materialize(case)
    group = case.num_heads // case.num_kv_heads
    start, out = 0, []
    for seq, k in zip(case.sequences, inputs.keys):
        q = inputs.query[start:start + seq.query_len].double()
        start += seq.query_len
        scores = torch.einsum("qhd,khd->hqk", q, k.double().repeat_interleave(group, 1)) * case.softmax_scale
        out.append(scores.softmax(-1)[..., -1])
    return torch.cat(out, -1)


@pytest.mark.parametrize("source", list(r.ValueSource))
@pytest.mark.parametrize("keys", [2, 129, 1000, 16384])
@pytest.mark.parametrize("logit_scale", [0.5, 1.0, 4.0, 16.0, 50.0])
def test_edge_gives_the_last_key_real_weight_at_any_length_and_logit_scale(keys, logit_scale, source):
    """Without EDGE, a row over thousands of keys gives its last key ~1/n: no one-key shift shows. With it, most
    rows give that key over 5 %; at logit scales <= 1 (rows not one-hot anyway) the other keys keep weight too.
    Each sequence's own length sets its boost (a short sequence beside the long one)."""
    case = r.Case(sequences=(r.SequenceSpec(query_len=8, encoder_len=keys), r.SequenceSpec(query_len=3, encoder_len=5)),
                  attn_type=r.AttentionType.ENCODER_DECODER, num_heads=4, num_kv_heads=2, head_size=64,
                  dtype=r.DType.FLOAT32, values=r.Values(r.ValueDistribution.EDGE, logit_scale, source=source), seed=keys)
    weight = _last_key_weight(case)
    assert float((weight > 0.05).double().mean()) >= 0.7, weight
    if logit_scale <= 1.0:
        assert 0.5 < float(weight.median()) < 0.97, weight


def test_edge_boost_grows_with_length_and_logit_scale_and_equals_the_margin_for_one_other_key():
    case = r.Case(sequences=(r.SequenceSpec(query_len=1, encoder_len=8),), attn_type=r.AttentionType.ENCODER_DECODER,
                  num_heads=1, num_kv_heads=1, head_size=16, values=r.Values(r.ValueDistribution.EDGE, 1.0))
    sd = case.softmax_scale * 4.0  # the scores' sd: logit_scale * sqrt(D) * softmax_scale
    assert edge_boost(case, 2) == EDGE_MARGIN + sd  # one other key: log(1) = 0
    assert edge_boost(case, 100) < edge_boost(case, 10_000)
    loud = case.replace(values=r.Values(r.ValueDistribution.EDGE, 50.0))
    assert edge_boost(case, 1000) < edge_boost(loud, 1000)


@pytest.mark.parametrize("keys", [1, 17, 300])
def test_outliers_at_edge_makes_the_last_key_an_outlier_and_leaves_the_rest_as_saved_cases_had_them(keys):
    seqs = (r.SequenceSpec(query_len=2, encoder_len=keys),)
    old = r.Case(sequences=seqs, attn_type=r.AttentionType.ENCODER_DECODER, seed=3,
                 values=r.Values(r.ValueDistribution.OUTLIERS))
    new = old.replace(values=r.Values(r.ValueDistribution.OUTLIERS, outliers_at_edge=True))
    k_old, k_new = materialize(old).keys[0], materialize(new).keys[0]
    assert torch.equal(materialize(old).query, materialize(new).query)  # the generator's stream is unchanged
    assert torch.equal(k_old[:-1], k_new[:-1])
    assert torch.equal(k_new[-1], k_old[-1]) or torch.equal(k_new[-1], 8 * k_old[-1])  # already an outlier, or now
    if keys > 1:
        assert (k_new[-1].norm(dim=-1) > 4 * k_new[:-1].norm(dim=-1).median(0).values).all()  # per kv head

@pytest.mark.parametrize("keys", [1, 40, 300])
def test_edge_value_gain_scales_each_last_value_and_leaves_every_other_draw_as_saved_cases_had_them(keys):
    seqs = (r.SequenceSpec(query_len=1, context_len=keys - 1), r.SequenceSpec(query_len=2, context_len=5))
    old = r.Case(sequences=seqs, seed=11, values=r.Values(r.ValueDistribution.NORMAL))
    new = old.replace(values=r.Values(r.ValueDistribution.NORMAL, edge_value_gain=8.0))
    a, b = materialize(old), materialize(new)
    assert torch.equal(a.query, b.query) and all(torch.equal(x, y) for x, y in zip(a.keys, b.keys))
    for v_old, v_new in zip(a.values, b.values):
        assert torch.equal(v_new[:-1], v_old[:-1]) and torch.equal(v_new[-1], 8.0 * v_old[-1])


def test_edge_value_gain_moves_a_decode_row_s_one_key_shift_by_the_gain():
    # the shift of a decode row (its last key dropped) moves the output by w * (v_last - rest): gain x as far
    case = r.Case(sequences=(r.SequenceSpec(query_len=1, context_len=63),), num_heads=1, num_kv_heads=1, head_size=16,
                  dtype=r.DType.FLOAT32, seed=5)
    moves = []
    for gain in (1.0, 8.0):
        inputs = materialize(case.replace(values=r.Values(r.ValueDistribution.NORMAL, edge_value_gain=gain)))
        q, k, v = inputs.query[0, 0].double(), inputs.keys[0][:, 0].double(), inputs.values[0][:, 0].double()
        w = torch.softmax(k @ q * case.softmax_scale, 0)
        moves.append((w @ v - (w[:-1] / w[:-1].sum()) @ v[:-1]).norm())
    assert moves[1] > 4 * moves[0]


def test_edge_value_gain_must_be_a_positive_number():
    with pytest.raises(r.CaseError, match="edge_value_gain"):
        r.Case(sequences=(r.SequenceSpec(1, 4),), values=r.Values(edge_value_gain=0.0))


def test_outliers_at_edge_belongs_to_the_outliers_class():
    with pytest.raises(r.CaseError, match="outliers_at_edge"):
        r.Case(sequences=(r.SequenceSpec(1, 4),), values=r.Values(r.ValueDistribution.NORMAL, outliers_at_edge=True))
