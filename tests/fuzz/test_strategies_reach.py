"""The strategies reach the edges they promise, in a stated fraction of draws."""
from __future__ import annotations

from hypothesis import HealthCheck, given, seed, settings

import dataclasses

import torch

import reference as r
from backends.base import Feature
from backends.naive import NAIVE_CAPS
from backends.registry import get
from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference.scores import standard_alibi_slopes as alibi_slopes

N = 500


def _draws(caps, limits=Limits(), n=N):
    out = []

    # a fixed seed: these measure the distribution the fuzzer draws from, the same on every run
    @seed(20261123)
    @settings(max_examples=n, database=None, derandomize=False, suppress_health_check=list(HealthCheck))
    @given(cases(caps, limits))
    def collect(case):
        out.append(case)

    collect()
    return out


def test_edges_appear_often_enough():
    draws = _draws(NAIVE_CAPS)
    frac = lambda pred: sum(1 for c in draws if pred(c)) / len(draws)  # noqa: E731
    assert frac(lambda c: any(s.context_len == 0 for s in c.sequences)) > 0.2
    assert frac(lambda c: c.sliding_window == 1) > 0.01
    assert frac(lambda c: c.cache and any(n % c.cache.block_size in (0, 1, c.cache.block_size - 1) for n in c.kv_lens)) > 0.3
    assert frac(lambda c: c.num_heads // c.num_kv_heads in (3, 5, 7)) > 0.05
    assert frac(lambda c: c.cache and c.cache.table.value == "shuffled") > 0.05
    assert frac(lambda c: c.cache and c.cache.quant.kv_cache_dtype.is_fp8 and set(c.cache.quant.k_scales) != {1.0}) > 0.02
    assert frac(lambda c: c.max_query_len == 1 and any(s.context_len for s in c.sequences)) > 0.05


def test_draws_stay_inside_the_declaration():
    for case in _draws(NAIVE_CAPS)[:100]:
        assert NAIVE_CAPS.reasons(case, "cpu") == []


def test_kernel_level_corners_appear_often_enough():
    caps = dataclasses.replace(ORACLE_CAPS, kv_layouts=frozenset())
    draws = _draws(caps, Limits(attn_types=("kernel",)))
    frac = lambda pred: sum(1 for c in draws if pred(c)) / len(draws)  # noqa: E731
    assert frac(lambda c: c.attn_type == r.AttentionType.KERNEL) == 1.0
    assert frac(lambda c: any(s.query_len > s.key_len for s in c.sequences)) > 0.1  # rows with no key
    assert frac(lambda c: any(abs(s.query_len - s.key_len) == 1 for s in c.sequences)) > 0.1
    assert frac(lambda c: c.causal and c.causal_alignment == r.CausalAlignment.TOP_LEFT) > 0.1
    assert frac(lambda c: c.window is not None and None in c.window) > 0.05  # one unbounded side
    assert frac(lambda c: c.window is not None and c.window[0] == c.max_kv_len) > 0.01


def test_largest_and_odd_head_sizes_get_weight():
    caps = get("fa4-varlen").caps
    draws = _draws(caps, n=1000)  # hypothesis starts from its simplest draws: measure past them
    frac = lambda pred: sum(1 for c in draws if pred(c)) / len(draws)  # noqa: E731
    assert frac(lambda c: c.head_size == max(caps.head_sizes)) > 0.2
    assert frac(lambda c: c.head_size & (c.head_size - 1)) > 0.4


def test_every_builtin_backend_gets_valid_cases_inside_its_declaration():
    # CPU or not, each declaration must yield valid Cases it accepts (the device campaign relies on it).
    from backends.registry import builtin_backends

    for backend in builtin_backends():
        device = sorted(backend.caps.devices)[0]
        for case in _draws(backend.caps, Limits(max_sequences=3, max_context=40, max_query=6), n=30):
            assert backend.caps.reasons(case, device) == [], (backend.name, case)


def test_size_tiers_cross_the_tiles_and_reach_long_contexts():
    for name in ("torch-naive-paged", "torch-sdpa-flash", "flashinfer-decode"):
        draws = _draws(get(name).caps, n=1000)  # past hypothesis's simplest first draws (400 measured 17-24 %)
        frac = lambda pred: sum(1 for c in draws if pred(c)) / len(draws)  # noqa: E731
        assert frac(lambda c: c.max_kv_len > 128) >= 0.2, name
        assert frac(lambda c: c.max_kv_len > 512) >= 0.05, name
        assert frac(lambda c: any(k in (127, 128, 129, 255, 256, 257) for k in c.kv_lens)) > 0.05, name
    small = _draws(NAIVE_CAPS, Limits(tiers=("small",)), n=100)
    assert max(c.max_kv_len for c in small) <= Limits().max_context + Limits().max_query


def test_magnitudes_encodings_and_the_recent_and_edge_classes_are_drawn():
    draws = _draws(NAIVE_CAPS)
    frac = lambda pred: sum(1 for c in draws if pred(c)) / len(draws)  # noqa: E731
    assert frac(lambda c: c.sinks is not None and max(abs(x) for x in c.sinks) >= 30) > 0.05
    assert frac(lambda c: c.values.logit_scale >= 16) > 0.05
    assert frac(lambda c: c.scale is not None and (c.scale <= 0.001 or c.scale >= 10)) > 0.01
    assert frac(lambda c: c.values.distribution == r.ValueDistribution.RECENT) > 0.2
    long = [c for c in draws if c.max_kv_len > 128]  # a full row over many keys is blind unless its last key weighs
    assert sum(c.values.distribution == r.ValueDistribution.EDGE for c in long) / len(long) > 0.5
    # outside EDGE, a sequence over 32 keys has its last value scaled (8, or 32 over 128 keys); shorter ones never
    others = [c for c in draws if c.values.distribution != r.ValueDistribution.EDGE]
    assert all((c.values.edge_value_gain > 1) == (c.max_kv_len > 32) for c in others)
    assert {c.values.edge_value_gain for c in others if c.max_kv_len > 128} == {32.0}
    assert all(c.values.logit_scale <= 4 for c in draws if c.values.distribution == r.ValueDistribution.OUTLIERS)
    assert frac(lambda c: c.attn_type == r.AttentionType.KERNEL and c.cache is not None) > 0.1  # paged raw-API cases


def test_sinks_differ_across_heads_lie_near_the_scores_and_are_stored_in_the_model_dtype():
    # a kernel that reads one head's sink for every head shows only where the heads' sinks differ
    draws = [c for c in _draws(get("flashinfer-decode").caps) if c.sinks is not None and c.num_heads > 1]
    assert len(draws) > 100
    assert sum(len(set(c.sinks)) > 1 for c in draws) / len(draws) > 0.5
    assert sum(len(set(c.sinks)) >= min(c.num_heads, 4) for c in draws) / len(draws) > 0.4
    for c in draws:
        near = sorted(c.sinks, key=abs)[:-1]  # one head's sink may be drawn far above / below the scores
        assert all(-4.0 <= x <= 6.0 for x in near), c.sinks
        assert list(c.sinks) == torch.tensor(c.sinks, dtype=c.dtype.torch).float().tolist()


def test_vllm_alibi_slopes_for_head_counts_that_are_not_powers_of_two():
    assert alibi_slopes(8) == tuple(2.0 ** (-i) for i in range(1, 9))
    # 6 heads: the 4-head series 2^-2, 2^-4, 2^-6, 2^-8, then odd powers of the 8-head base 2^-1: 2^-1, 2^-3
    assert alibi_slopes(6) == (0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125)
    assert len(alibi_slopes(12)) == 12 and len(set(alibi_slopes(12))) == 12


def test_a_kernel_that_computes_its_own_alibi_slopes_gets_only_those():
    """FlashInfer's pos_encoding_mode="ALIBI" takes no slopes: the declaration admits the standard ones only,
    and the fuzzer draws nothing else for it."""
    caps = dataclasses.replace(ORACLE_CAPS, alibi_standard_slopes=True, kv_layouts=frozenset())
    with_alibi = [c for c in _draws(caps, n=200) if c.alibi is not None]
    assert with_alibi and all(c.alibi.slopes == alibi_slopes(c.num_heads) for c in with_alibi)
    case = with_alibi[0]
    scaled = case.replace(alibi=r.Alibi(tuple(4 * s for s in case.alibi.slopes), case.alibi.convention))
    assert caps.reasons(case, "cpu") == []
    assert any("standard slopes" in why for why in caps.reasons(scaled, "cpu"))


def test_compile_slices_fix_one_dtype_and_head_size_and_switch_compile_keyed_features_off_or_allow_them():
    from fuzz.strategies import compile_slices

    caps = get("torch-naive-paged").caps
    keyed = (Feature.SINKS, Feature.WINDOW)
    slices = compile_slices(caps, Limits(), ("dtypes", "head_sizes"), keyed)
    assert len(slices) == len(caps.dtypes) * len(caps.head_sizes) * 4
    assert len({(s.dtypes, s.head_sizes, s.features) for s in slices}) == len(slices)
    off = next(s for s in slices if not {"sinks", "window"} & set(s.features))
    draws = _draws(caps, off, n=60)
    assert {(c.dtype.value,) for c in draws} == {off.dtypes} and {(c.head_size,) for c in draws} == {off.head_sizes}
    assert not any(c.sinks is not None or c.sliding_window is not None or c.window is not None for c in draws)
    assert compile_slices(caps, Limits(head_sizes=(16,)), ("head_sizes",)) == [Limits(head_sizes=(16,))]
    assert compile_slices(caps, Limits(), ()) == [Limits()]


def test_the_first_compile_slices_cover_every_declared_value_and_each_keyed_feature_on_and_off():
    """A JIT campaign builds only its first few slices (an sm90 FlashInfer module: minutes): in product
    order those were one dtype and one head size; covering first, the longest axis's length of them suffices."""
    from fuzz.strategies import compile_slices

    caps = get("torch-naive-paged").caps
    keyed = (Feature.SINKS, Feature.WINDOW)
    slices = compile_slices(caps, Limits(), ("dtypes", "head_sizes"), keyed)
    first = slices[:max(len(caps.dtypes), len(caps.head_sizes), 2)]
    assert {s.dtypes[0] for s in first} == {d.value for d in caps.dtypes}
    assert {s.head_sizes[0] for s in first} == set(caps.head_sizes)
    for f in ("sinks", "window"):
        assert {f in s.features for s in first} == {True, False}
    assert slices == compile_slices(caps, Limits(), ("dtypes", "head_sizes"), keyed)  # a fixed order: workers agree


def test_a_focus_whose_kv_dtypes_cannot_hold_the_model_dtype_draws_the_declared_ones_and_slices_skip_it():
    from fuzz.strategies import compile_slices

    caps = get("torch-naive-paged").caps
    draws = _draws(caps, Limits(dtypes=("float16",), kv_cache_dtypes=("bfloat16",)), n=30)
    assert draws and all(c.cache is None or c.kv_cache_dtype.value != "bfloat16" for c in draws)
    slices = compile_slices(caps, Limits(), ("dtypes", "kv_cache_dtypes"))
    assert not any(s.kv_cache_dtypes[0] in ("bfloat16", "float16") and s.kv_cache_dtypes[0] != s.dtypes[0]
                   for s in slices)
    assert any(s.kv_cache_dtypes == ("bfloat16",) and s.dtypes == ("bfloat16",) for s in slices)


def test_alibi_is_drawn_only_with_the_attention_types_it_is_declared_for():
    """FlashInfer's ALiBi is declared for decoders only: drawing it in cross attention and then refusing it
    wasted a third of a JIT campaign's rows (false-alarms/torch-xformers-jit-h100-2026-11-23.md)."""
    caps = dataclasses.replace(ORACLE_CAPS, alibi_attn_types=frozenset({r.AttentionType.DECODER}))
    draws = _draws(caps, n=300)
    assert any(c.alibi is not None for c in draws)
    assert all(c.attn_type == r.AttentionType.DECODER for c in draws if c.alibi is not None)
    cross = next(c for c in _draws(ORACLE_CAPS, n=300)
                 if c.alibi is not None and c.attn_type == r.AttentionType.ENCODER_DECODER)
    assert any("ALiBi with attn_type=encoder_decoder" in why for why in caps.reasons(cross, "cpu"))
