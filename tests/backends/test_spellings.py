"""Every spelling of one semantic means the same to the oracle, and a short campaign draws each one
(backends/spellings.py; torch-naive-paged is the CPU twin that takes them all)."""
from __future__ import annotations

import dataclasses
from collections import Counter

import torch
from hypothesis import given, settings, strategies as st

import reference as r
from backends import spellings
from backends.fa4 import resolved_window
from backends.naive import NAIVE_CAPS, NaivePaged
from campaign.engine import CampaignConfig, run_campaign
from fuzz.compare import evaluate
from fuzz.strategies import ORACLE_CAPS, Limits, cases, window_sizes
from reference.case import AttentionType, Case

SMALL = Limits(max_sequences=3, max_context=20, max_query=8, max_kv_heads=2, tiers=("small",))
KERNEL = dataclasses.replace(ORACLE_CAPS, attn_types=frozenset({AttentionType.KERNEL}), kv_layouts=frozenset())


def as_bounded(case: Case, spelling: str) -> Case:
    """The case with each unbounded window side replaced by the number `spelling` stands for (a bounded window
    to the oracle), and causality, when spelled as a window, as that window with the flag off."""
    spelled = case.replace(encodings=((spellings.UNBOUNDED_WINDOW, spelling), (spellings.CAUSAL, "window")))
    left, right = spellings.window_pair(spelled)
    return case.replace(causal=False, window=(left, right))


@settings(max_examples=150, deadline=None)
@given(cases(KERNEL, SMALL), st.sampled_from([spellings.EDGE, spellings.BEYOND]))
def test_a_side_past_the_sequence_and_causality_as_a_window_mean_what_the_case_means(case, spelling):
    bounded = as_bounded(case, spelling)
    want, got = r.attention(r.materialize(case)), r.attention(r.materialize(bounded))
    assert torch.equal(want.output, got.output) and torch.equal(want.lse, got.lse)


@given(cases(KERNEL, SMALL))
def test_one_less_than_the_edge_bounds_a_row_somewhere(case):
    """`edge` is the smallest unbounded number: one less masks a key of some row (when a window side there
    could bound anything), so the spelling sits exactly on the boundary it names."""
    bounded = as_bounded(case.replace(causal=False, window=None), spellings.EDGE)
    left, right = bounded.window
    if left == 0 or not case.sequences or max(case.kv_lens) == 0:
        return
    tighter = bounded.replace(window=(left - 1, right - 1))
    full, cut = r.attention(r.materialize(bounded)), r.attention(r.materialize(tighter))
    lengths = [(s.query_len, s.key_len) for s in case.sequences]
    if any(q and k and max(q, k) == spellings.extent(case) for q, k in lengths):
        # counted on the mask: a masked key whose weight underflows leaves the LSE bit for bit the same (a drawn
        # case: LSE 72.0720 with 3 and with 2 visible keys)
        assert not torch.equal(full.num_visible, cut.num_visible)


def test_window_sizes_reach_the_edges_and_past_the_sequence():
    sizes = window_sizes(max_kv=3, max_q=7)
    assert {0, 1, 2, 3, 4, 6, 7, 8} <= set(sizes) and max(sizes) > 2 * 7
    assert {63, 64, 65, 127, 128, 129} <= set(window_sizes(max_kv=200, max_q=1))
    assert sizes == sorted(sizes)  # shrinking goes toward 0


def test_the_naive_kernel_reads_every_spelling_right():
    """Each spelling of each declared encoding, forced on drawn cases, passes on the correct CPU kernel."""
    backend = NaivePaged()
    strategy = cases(NAIVE_CAPS, SMALL)
    seen: Counter = Counter()

    @settings(max_examples=40, deadline=None, database=None)
    @given(strategy, st.data())
    def check(case, data):
        name, values = data.draw(st.sampled_from(NAIVE_CAPS.encodings))
        spelled = case.replace(encodings=tuple((n, v) if n != name else (n, data.draw(st.sampled_from(values)))
                                               for n, v in case.encodings))
        row = evaluate(backend, spelled).row
        seen[dict(spelled.encodings)[name]] += 1
        assert row["verdict"] in ("pass", "blind"), (spelled.to_json(), row["message"])

    check()
    assert len(seen) >= 6


def test_a_short_campaign_draws_every_declared_spelling(tmp_path):
    cfg = CampaignConfig(out=tmp_path, backends=["torch-naive-paged"], examples=80, workers=1, progress=False,
                         limits={"tiers": ["small"]})  # spellings need no long sequence: the small tier keeps it fast
    rows = [x for x in run_campaign(cfg).rows if x.get("phase") == "generate"]
    drawn = {pair for x in rows for pair in (x.get("encodings") or "").split(",") if pair}
    declared = {f"{n}={v}" for n, values in NAIVE_CAPS.encodings for v in values}
    assert declared <= drawn, sorted(declared - drawn)
    assert all(x["verdict"] in ("pass", "blind") for x in rows)


DECODER = dataclasses.replace(ORACLE_CAPS, attn_types=frozenset({AttentionType.DECODER}), kv_layouts=frozenset())


@settings(max_examples=100, deadline=None)
@given(cases(DECODER, SMALL), st.sampled_from([spellings.NONE, spellings.MINUS_ONE, spellings.EDGE, spellings.BEYOND]))
def test_vllms_w_spellings_of_no_window_mean_no_window_and_the_edge_is_the_boundary(case, spelling):
    """vLLM's W (the keys a query sees, its own included): None and W <= 0 are no window, and so is any W of at
    least the extent; the edge spelling is exactly that extent (W - 1 masks the first key of a longest row)."""
    from hypothesis import assume

    assume(case.sliding_window is None and spellings.respellable(case))
    w = spellings.sliding_window(case.replace(encodings=((spellings.UNBOUNDED_WINDOW, spelling),)))
    if spelling in (spellings.NONE, spellings.MINUS_ONE):
        assert w is None or w <= 0
        return
    want, got = r.attention(r.materialize(case)), r.attention(r.materialize(case.replace(sliding_window=w)))
    assert torch.equal(want.output, got.output) and torch.equal(want.lse, got.lse)
    only_causal = case.attn_chunk_size is None and case.block_sparse is None  # no other rule cuts the first key
    if (spelling == spellings.EDGE and w > 1 and only_causal
            and any(k == w and q for q, k in zip(case.query_lens, case.kv_lens))):
        cut = r.attention(r.materialize(case.replace(sliding_window=w - 1)))
        assert not torch.equal(want.num_visible, cut.num_visible)


@settings(max_examples=150, deadline=None)
@given(cases(KERNEL, SMALL), st.sampled_from([spellings.NONE, spellings.MINUS_ONE, spellings.EDGE, spellings.BEYOND]),
       st.sampled_from(["flag", "window"]))
def test_fa4_s_window_arguments_by_fa4_s_rules_are_the_case_s_window(case, spelling, causal):
    """flash-attn 2/3 read a lone -1 as an unbounded side; FA4 keeps it as a bound, so (-1, 0) is a window of no key.
    Whatever the drawn spelling, the window FA4 resolves must be one the case can state (sides None or >= 0) and
    attend as the case does: a lone -1 made 90-93 % of the rows that had one fail on two H200s
    (benchmarks/results/campaigns/fa4-lone-minus-one-window-2026-11-27.md)."""
    c = case.replace(encodings=((spellings.UNBOUNDED_WINDOW, spelling), (spellings.CAUSAL, causal)))
    left, right = resolved_window(c)  # FA4's own rules, read from its interface
    assert all(side is None or side >= 0 for side in (left, right)), (left, right)
    as_fa4 = case.replace(causal=False, window=None if (left, right) == (None, None) else (left, right))
    want, got = r.attention(r.materialize(case)), r.attention(r.materialize(as_fa4))
    assert torch.equal(want.output, got.output) and torch.equal(want.lse, got.lse)
