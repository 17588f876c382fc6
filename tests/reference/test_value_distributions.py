"""The value distributions do what their names promise: EDGE's last key holds real weight at any length."""
from __future__ import annotations

import pytest
import torch

import reference as r
from reference.inputs import EDGE_MARGIN, edge_boost, materialize


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


@pytest.mark.parametrize("keys", [2, 129, 1000, 16384])
@pytest.mark.parametrize("logit_scale", [0.5, 1.0, 4.0, 16.0, 50.0])
def test_edge_gives_the_last_key_real_weight_at_any_length_and_logit_scale(keys, logit_scale):
    """Without EDGE, a row over thousands of keys gives its last key ~1/n: no one-key shift shows. With it, most
    rows give that key over 5 %; at logit scales <= 1 (rows not one-hot anyway) the other keys keep weight too.
    Each sequence's own length sets its boost (a short sequence beside the long one)."""
    case = r.Case(sequences=(r.SequenceSpec(query_len=8, encoder_len=keys), r.SequenceSpec(query_len=3, encoder_len=5)),
                  attn_type=r.AttentionType.ENCODER_DECODER, num_heads=4, num_kv_heads=2, head_size=64,
                  dtype=r.DType.FLOAT32, values=r.Values(r.ValueDistribution.EDGE, logit_scale), seed=keys)
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
