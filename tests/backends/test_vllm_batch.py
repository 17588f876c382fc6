"""The batch as vLLM's model runner hands it to a builder that splits decodes from prefills (backends/vllm_batch.py),
and what vLLM's FLASHINFER and FLASH_ATTN_MLA backends declare from it, checked without vLLM."""
from __future__ import annotations

import pandas as pd
import torch
from hypothesis import given, strategies as st

import backends.vllm_layers as layers
from backends import spellings
from backends.base import Feature
from backends.registry import get
from backends.vllm_batch import from_runner_order, in_runner_order, runner_order
from reference.case import CacheSpec, Case, DType, SequenceSpec
from campaign.declarations import write_declarations
from fuzz.strategies import Limits
from reference.inputs import materialize
from reports.coverage import coverage_map, device_out, load_declarations, never_drawn
from tests.repro_scripts import drawn_cases

SEQS = st.lists(st.builds(SequenceSpec, query_len=st.integers(1, 4), context_len=st.sampled_from([0, 2, 9])),
                min_size=1, max_size=5)


@given(seqs=SEQS, padding=st.integers(0, 2))
def test_a_step_in_the_runners_order_comes_back_in_the_cases(seqs, padding):
    """FLASHINFER's builder takes decodes first (reorder_batch_threshold 1): the step's rows go to it in the runner's
    order with their slots, padding rows last, and its output rows come back to the case's tokens."""
    case = Case(sequences=tuple(seqs), num_heads=2, num_kv_heads=1, head_size=16, dtype=DType.FLOAT32,
                cache=CacheSpec(block_size=4, padding_slots=padding), seed=1)
    inputs = materialize(case)
    order = runner_order(case, 1)
    step, tokens = in_runner_order(inputs, order)
    n = case.num_tokens
    assert step.slot_mapping[n:].tolist() == [-1] * padding
    for row, token in enumerate(tokens.tolist()):  # each runner row carries its token's query, key, value, slot
        assert torch.equal(step.query[row], inputs.query[token]) and torch.equal(step.key[row], inputs.key[token])
        assert torch.equal(step.value[row], inputs.value[token])
        assert int(step.slot_mapping[row]) == int(inputs.slot_mapping[token])
    computed = step.query.clone()  # a kernel's output row r belongs to runner row r
    assert torch.equal(from_runner_order(computed[:n], tokens), inputs.query)


def test_flashinfer_builds_decode_and_prefill_modules_as_separate_variants():
    backend = get("vllm-backend-flashinfer")
    assert backend.reorder_threshold == 1 and get("vllm-layer-flashinfer").jit_module_space == backend.jit_module_space

    def variant(*seqs):
        return backend.jit_variant(Case(sequences=seqs, num_heads=2, num_kv_heads=1, head_size=64,
                                        dtype=DType.BFLOAT16, cache=CacheSpec(block_size=16)))

    decode, prefill = SequenceSpec(query_len=1, context_len=5), SequenceSpec(query_len=3, context_len=5)
    first_chunk = SequenceSpec(query_len=1, context_len=0)  # a one-token prompt prefills
    assert variant(decode) != variant(prefill) != variant(decode, prefill) != variant(decode)
    assert variant(first_chunk) == variant(prefill)


def test_declarations_follow_what_vllm_picks():
    """FLASHINFER never cascades (use_cascade_attention returns False); FLASH_ATTN_MLA has 16-bit caches only, so
    no calc_kv_scales; it keeps NaN canaries, which show FA3's whole-page reads (catalog vllm-fa3-mla-canary)."""
    assert "cascade" not in dict(get("vllm-backend-flashinfer").caps.encodings)
    assert "cascade" in dict(get("vllm-backend-flash").caps.encodings)
    fa_mla = get("vllm-layer-flash-attn-mla").caps
    assert Feature.DYNAMIC_SCALES not in fa_mla.features and not fa_mla.finite_canaries_only
    assert Feature.DYNAMIC_SCALES in get("vllm-layer-flashmla").caps.features


def test_flashinfer_on_sm90_draws_what_its_builder_takes_there(monkeypatch, tmp_path):
    """On an sm90 GPU vLLM's FLASHINFER builder raises for any window: there the declaration draws none (neither a
    window nor an unbounded one spelled as a number), and the coverage map lists them as refused by the device, not
    as blind spots; elsewhere they are drawn. Its impl quantizes the queries of an fp8 cache's prefills and not its
    decodes': fp8 cases come all prefill with an fp8 query, all decode without one, none refused."""
    names = ["vllm-backend-flashinfer", "vllm-layer-flashinfer"]
    windowed = [spellings.sliding_window(c) is not None for c in drawn_cases(get(names[0]).caps, Limits(), 60)]
    assert any(windowed)
    monkeypatch.setattr(layers, "_sm90", lambda: True)
    for name in names:
        backend = get(name)
        drawn = drawn_cases(backend.caps, Limits(), 60)
        assert not any(spellings.sliding_window(c) is not None for c in drawn)
        assert not any(backend.not_supported_reasons(c) for c in drawn if c.kv_cache_dtype.value == "auto")
        assert Feature.WINDOW in backend.documented_caps.features
        fp8 = [c for c in drawn_cases(backend.caps, Limits(kv_cache_dtypes=("fp8_e4m3", "fp8_e5m2")), 80)
               if c.kv_cache_dtype.is_fp8]
        assert not any(backend.not_supported_reasons(c) for c in fp8)
        with_query = [c for c in fp8 if c.cache.quant.q_fp8_scale is not None]
        assert with_query and all(min(s.query_len for s in c.sequences) > 1 for c in with_query)  # prefills only
        assert all(max(s.query_len for s in c.sequences) == 1 for c in fp8 if c not in with_query)  # decodes only
        assert all(c.kv_cache_dtype.value == "fp8_e4m3" for c in with_query)  # e5m2 prefills: a known crash
    write_declarations(tmp_path, [get(n) for n in names])
    declared = load_declarations(tmp_path)
    assert {"feature window"} <= set(device_out(declared)[0]["values"].split(", "))
    assert "sm90" in device_out(declared)[0]["why"]
    rows = pd.DataFrame([dict(backend=names[0], phase="generate", verdict="pass", features="gqa", encodings="")])
    blind = never_drawn(coverage_map(rows, declared))
    assert not ((blind["dimension"] == "feature") & (blind["value"] == "window")).any()


def test_flash_attn_draws_only_what_its_builder_and_fa3_take():
    """FLASH_ATTN: FA3's s_aux takes bfloat16 sinks and vLLM never cascades a sliding window; the declaration draws
    neither (48 % of an H200 campaign's draws were these refusals), and a hand-made case of each is refused."""
    for name in ("vllm-backend-flash", "vllm-layer-flash"):
        backend = get(name)
        drawn = drawn_cases(backend.caps, Limits(), 80)
        assert not any(backend.not_supported_reasons(c) for c in drawn)
        assert any(c.sinks is not None for c in drawn) and any(c.encoding("cascade", "off") == "on" for c in drawn)
        windowed = [c for c in drawn if spellings.sliding_window(c) is not None]
        assert windowed and all(c.encoding("cascade", "off") == "off" for c in windowed)
        case = Case(sequences=(SequenceSpec(query_len=2, context_len=5),), num_heads=2, num_kv_heads=1, head_size=64,
                    dtype=DType.FLOAT16, sinks=(0.0, 1.0), sliding_window=3, encodings=(("cascade", "on"),),
                    cache=CacheSpec(block_size=16), seed=1)
        reasons = " / ".join(backend.not_supported_reasons(case))
        assert "sinks with dtype=float16" in reasons and "cascade=on with a sliding window" in reasons
