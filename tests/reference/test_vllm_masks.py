"""vLLM 0.26's extra decoder mask rules (PrefixLM ranges, R-SWA, chunk lookback, qq_bias): each checked
against an equivalent formulation built from the older semantics, not only against examples."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, strategies as st

import reference as r
from reference.case import Case, CaseError, GlobalPrefix, SequenceSpec
from reference.visibility import visible


@st.composite
def decoder_batches(draw, max_len: int = 20) -> tuple[SequenceSpec, ...]:
    n = draw(st.integers(1, 3))
    return tuple(SequenceSpec(query_len=draw(st.integers(1, 6)), context_len=draw(st.integers(0, max_len)))
                 for _ in range(n))


def masks(case: Case) -> list[torch.Tensor]:
    return [visible(case, s) for s in case.sequences]


def same_masks(a: Case, b: Case) -> bool:
    return all(torch.equal(x, y) for x, y in zip(masks(a), masks(b)))


@given(decoder_batches(), st.integers(1, 24))
def test_lookback_zero_is_chunked_local_attention(seqs, window):
    """Looking back no chunk, chunks of W positions: Llama-4's chunked local attention with chunk W."""
    base = Case(sequences=seqs, head_size=8)
    assert same_masks(base.replace(sliding_window=window, chunk_lookback=0), base.replace(attn_chunk_size=window))


@given(decoder_batches(), st.integers(1, 24), st.integers(0, 3))
def test_lookback_sees_whole_chunks_inside_the_window(seqs, window, lookback):
    """Every key seen lies within the window that sized the chunks, and every key of the query's own
    chunk up to the query is seen."""
    if window // (lookback + 1) < 1:
        return
    base = Case(sequences=seqs, head_size=8, sliding_window=window)
    size = window // (lookback + 1)
    for s, m, w in zip(seqs, masks(base.replace(chunk_lookback=lookback)), masks(base)):
        assert bool((m <= w).all())  # within the window (and causal)
        q = s.context_len + torch.arange(s.query_len)[:, None]
        k = torch.arange(s.context_len + s.query_len)[None, :]
        own_chunk = (k // size == q // size) & (k <= q)
        assert bool(m[0][own_chunk].all())


@given(decoder_batches(), st.integers(1, 24))
def test_global_prefix_bounds(seqs, window):
    """R-SWA with no prompt is vLLM's sliding window W; with the whole sequence as prompt it is causal."""
    base = Case(sequences=seqs, head_size=8)
    none = GlobalPrefix(window, tuple(0 for _ in seqs))
    whole = GlobalPrefix(window, tuple(s.context_len + s.query_len for s in seqs))
    assert same_masks(base.replace(global_prefix=none), base.replace(sliding_window=window))
    assert same_masks(base.replace(global_prefix=whole), base)


@given(decoder_batches(), st.data())
def test_ranges_are_an_or_and_trivial_ranges_add_nothing(seqs, data):
    """A range makes its tokens see each other both ways and changes nothing outside it; single-token
    and reversed ranges change nothing; the whole sequence as one range is bidirectional attention."""
    base = Case(sequences=seqs, head_size=8, sliding_window=data.draw(st.none() | st.integers(1, 8)))
    trivial = tuple(((s.context_len, s.context_len), (3, 1)) for s in seqs)
    assert same_masks(base.replace(bidirectional_ranges=trivial), base)
    whole = tuple(((0, s.context_len + s.query_len - 1),) for s in seqs)
    assert all(bool(m.all()) for m in masks(base.replace(bidirectional_ranges=whole)))
    start = data.draw(st.integers(0, 10))
    end = data.draw(st.integers(start, 25))
    ranged = base.replace(bidirectional_ranges=tuple(((start, end),) for _ in seqs))
    for s, m, b in zip(seqs, masks(ranged), masks(base)):
        q = s.context_len + torch.arange(s.query_len)[:, None]
        k = torch.arange(s.context_len + s.query_len)[None, :]
        inside = (q >= start) & (q <= end) & (k >= start) & (k <= end)
        assert torch.equal(m[0], b[0] | inside)


@given(decoder_batches(max_len=0), st.floats(-8, 8))
def test_constant_qq_bias_shifts_lse_only(seqs, c):
    """Without context every key is a new token: a constant bias c moves the LSE by c, not the output."""
    case = Case(sequences=seqs, num_heads=2, num_kv_heads=1, head_size=8, qq_bias=True, seed=3)
    inputs = r.materialize(case)
    flat = dataclasses.replace(inputs, qq_bias=torch.full_like(inputs.qq_bias, c))
    plain = r.attention(dataclasses.replace(inputs, case=case.replace(qq_bias=False), qq_bias=None))
    shifted = r.attention(flat)
    assert torch.allclose(shifted.output, plain.output, atol=1e-12)
    shift = float(flat.qq_bias[0, 0])  # c as the float32 bias holds it
    assert torch.allclose(shifted.lse, plain.lse + shift, atol=1e-12)


@given(st.integers(0, 12), st.integers(1, 5))
def test_qq_bias_skips_the_context(context, queries):
    """The bias lands on the new tokens' keys only: a decode's query gets qq_bias[0, 0] on its own key."""
    case = Case(sequences=(SequenceSpec(query_len=queries, context_len=context),), head_size=8, qq_bias=True, seed=5)
    inputs = r.materialize(case)
    big = torch.zeros_like(inputs.qq_bias)
    big[:, 0] = 50.0  # every query puts nearly all weight on the first new token
    out = r.attention(dataclasses.replace(inputs, qq_bias=big)).output
    v = inputs.values[0][context].double()  # [H_kv, D]
    assert torch.allclose(out, v[None].expand_as(out), atol=1e-9)


@pytest.mark.parametrize("changes, field", [
    (dict(chunk_lookback=1), "chunk_lookback"),  # needs a sliding window
    (dict(sliding_window=2, chunk_lookback=2), "chunk_lookback"),  # 2 // 3 = 0 positions per chunk
    (dict(sliding_window=4, global_prefix=GlobalPrefix(2, (1,))), "global_prefix"),
    (dict(global_prefix=GlobalPrefix(2, (1, 2))), "global_prefix"),
    (dict(bidirectional_ranges=(((1, 2),), ())), "bidirectional_ranges"),
    (dict(qq_bias=True, attn_chunk_size=4), "qq_bias"),
])
def test_invalid_rules_name_their_field(changes, field):
    with pytest.raises(CaseError, match=field):
        Case(sequences=(SequenceSpec(query_len=2, context_len=3),), head_size=8, **changes)


def test_one_spec_object_twice_keeps_each_sequences_own_rules():
    """Per-sequence rules are indexed by place, not by the (possibly shared) SequenceSpec object."""
    spec = SequenceSpec(query_len=2, context_len=3)
    case = Case(sequences=(spec, spec), head_size=8, bidirectional_ranges=(((0, 4),), ()))
    assert bool(visible(case, spec, 0)[0, 0, 4]) and not bool(visible(case, spec, 1)[0, 0, 4])
    with pytest.raises(ValueError, match="case.sequences"):
        visible(case, spec)
    distinct = case.replace(sequences=(spec, SequenceSpec(query_len=2, context_len=3)))  # equal, not the same
    assert torch.equal(r.attention(r.materialize(case)).output, r.attention(r.materialize(distinct)).output)
    assert not torch.equal(r.attention(r.materialize(case)).output,
                           r.attention(r.materialize(case.replace(bidirectional_ranges=((), ((0, 4),))))).output)
