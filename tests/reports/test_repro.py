"""`attnref repro` scripts: torch only, the case's own tensors, and the verdict attnref gave."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from backends.registry import get
from reports.repro import ReproUnsupported, write_repro
from fuzz.compare import evaluate
from fuzz.strategies import Limits, cases
from fuzz.tolerance import probability_rounding
from reference import attention
from reference.case import (BlockSparse, CacheSpec, Case, DType, GlobalPrefix, KVCacheDType, KVLayout, Quant, SequenceSpec, ValueDistribution,
                            ValueSource, Values)
from reference.inputs import materialize
from tests.repro_scripts import load

WINDOW_BUG = Case(sequences=(SequenceSpec(query_len=3, context_len=5),), num_heads=2, num_kv_heads=1, head_size=16,
                  sliding_window=3, dtype=DType.FLOAT32, seed=11)


def _imports(text: str) -> set[str]:
    return {line.split()[1].split(".")[0] for line in text.splitlines() if line.strip().startswith(("import ", "from "))}


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(get("torch-sdpa-math").caps, Limits(max_context=20, max_query=6)))
def test_the_script_draws_attnref_s_tensors_and_agrees_with_its_verdict(case):
    text = write_repro(case, "torch-sdpa-math")
    assert _imports(text) <= {"math", "sys", "torch"}
    ns = load(text)
    q, ks, vs = ns["draw_inputs"]()
    inputs = materialize(case)
    assert torch.equal(q, inputs.query)
    assert all(torch.equal(a, b) for a, b in zip(ks, inputs.keys)) and all(torch.equal(a, b) for a, b in zip(vs, inputs.values))
    assert ns["main"]() == 0  # a correct kernel: the script says OK, as attnref does
    expected, _ = ns["reference"](q, ks, vs)
    oracle = evaluate(get("torch-sdpa-math"), case)
    assert oracle.expected is not None and torch.allclose(expected, oracle.expected.output, atol=1e-12)


@pytest.mark.parametrize("values", [Values(d, 4.0) for d in ValueDistribution]
                         + [Values(ValueDistribution.OUTLIERS, 4.0, outliers_at_edge=True),
                            Values(ValueDistribution.RECENT, 4.0, edge_value_gain=32.0),
                            Values(ValueDistribution.EDGE, 4.0, query_zero_dims=(3, 12))])
def test_every_value_distribution_is_written_out_bit_for_bit(values):
    for source in ValueSource:  # 300 keys of 16 values: the first sequence's keys from the table, the rest not
        seqs = (SequenceSpec(query_len=3, context_len=300), SequenceSpec(query_len=2, context_len=7))
        case = WINDOW_BUG.replace(sequences=seqs, values=replace(values, source=source), dtype=DType.BFLOAT16)
        q, ks, vs = load(write_repro(case, "torch-sdpa-math"))["draw_inputs"]()
        inputs = materialize(case)
        assert torch.equal(q, inputs.query)
        assert all(torch.equal(a, b) for a, b in zip(ks, inputs.keys))
        assert all(torch.equal(a, b) for a, b in zip(vs, inputs.values))


@pytest.mark.parametrize("backend", ["torch-sdpa-math", "torch-sdpa-cpu-flash", "torch-naive-paged"])
def test_a_correct_cpu_kernel_s_script_exits_0(tmp_path, backend):
    path = tmp_path / "repro.py"
    path.write_text(write_repro(WINDOW_BUG, backend))
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout + out.stderr


def test_a_mutant_s_script_shows_its_bug_as_attnref_does(tmp_path):
    paged = WINDOW_BUG.replace(cache=CacheSpec(block_size=4))
    assert evaluate(get("mutant-window-off-by-one"), paged).row["verdict"] == "mismatch"
    path = tmp_path / "repro.py"
    path.write_text(write_repro(paged, "mutant-window-off-by-one"))
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and "MISMATCH" in out.stdout, out.stdout + out.stderr


def test_cases_the_script_cannot_write_out_say_why():
    sparse = WINDOW_BUG.replace(sliding_window=None, block_sparse=BlockSparse())
    with pytest.raises(ReproUnsupported, match="block_sparse"):
        write_repro(sparse, "torch-naive-paged")
    with pytest.raises(ReproUnsupported, match="no repro template"):
        write_repro(WINDOW_BUG, "mutant-wrong-block-size")
    fork = CacheSpec(layout=KVLayout.FLASH_HND, block_size=16, quant=Quant(KVCacheDType.INT8_KV))
    int8_fork = WINDOW_BUG.replace(cache=fork, dtype=DType.BFLOAT16)
    with pytest.raises(ReproUnsupported, match="int8_kv"):
        write_repro(int8_fork, "torch-naive-paged")
    fp8 = WINDOW_BUG.replace(cache=CacheSpec(block_size=16, quant=Quant(KVCacheDType.FP8_E4M3)), dtype=DType.BFLOAT16)
    with pytest.raises(ReproUnsupported, match="writes unquantized caches only"):  # never a script that drops the scales
        write_repro(fp8, "fa4-paged")


UNIFIED = get("vllm-triton-unified")  # declares every vLLM mask rule, qq_bias and the fp8 / per-token-head caches


RULED = Case(sequences=(SequenceSpec(query_len=4, context_len=9), SequenceSpec(query_len=3, context_len=2)),
             num_heads=2, num_kv_heads=1, head_size=32, dtype=DType.BFLOAT16, cache=CacheSpec(block_size=16), seed=5)


@pytest.mark.parametrize("case", [
    RULED.replace(bidirectional_ranges=(((3, 11),), ((0, 3), (4, 4)))),
    RULED.replace(global_prefix=GlobalPrefix(window=3, prefix_lens=(2, 1))),
    RULED.replace(sliding_window=6, chunk_lookback=1),
    RULED.replace(qq_bias=True, sliding_window=5),
    RULED.replace(cache=CacheSpec(block_size=16, quant=Quant(KVCacheDType.FP8_E4M3, dynamic_scales=True))),
    RULED.replace(cache=CacheSpec(block_size=16, quant=Quant(KVCacheDType.INT8_PER_TOKEN_HEAD))),
    RULED.replace(cache=CacheSpec(block_size=16, quant=Quant(KVCacheDType.FP8_PER_TOKEN_HEAD))),
    RULED.replace(cache=CacheSpec(block_size=16, quant=Quant(KVCacheDType.INT4_PER_TOKEN_HEAD)))],
    ids=["prefix_lm", "r_swa", "chunk_lookback", "qq_bias", "fp8_dynamic", "int8_per_token_head", "fp8_per_token_head",
         "int4_per_token_head"])
def test_each_rule_and_cache_dtype_is_written_out(case):
    assert_script_reference_is_the_oracle(case)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(UNIFIED.caps, Limits(max_context=40, max_query=6)))
def test_a_script_s_reference_is_the_oracle_for_mask_rules_and_quantized_caches(case):
    """The script's own float64 reference (its rules written out; the cache quantized with the case's scales and
    read back as stored x scale) equals attnref's oracle on what vLLM's unified attention accepts."""
    assert_script_reference_is_the_oracle(case)


def assert_script_reference_is_the_oracle(case, backend: str = UNIFIED.name):
    ns = load(write_repro(case, backend))
    q, ks, vs = ns["draw_inputs"]()
    args = ns["read_back"](*ns["store"](q, ks, vs), torch.float64) if "store" in ns else (q, ks, vs)
    out, lse = ns["reference"](*args)
    expected = attention(materialize(case))
    assert torch.allclose(out, expected.output, atol=1e-10, rtol=0)
    finite = torch.isfinite(expected.lse)
    assert torch.equal(finite, torch.isfinite(lse)) and torch.allclose(lse[finite], expected.lse[finite], atol=1e-10)


@pytest.mark.parametrize("kvd", [KVCacheDType.FP8_E4M3, KVCacheDType.INT8_PER_TOKEN_HEAD, KVCacheDType.FP8_PER_TOKEN_HEAD])
def test_a_whole_backend_script_hands_vllm_s_writer_the_unquantized_keys(kvd):
    """vLLM's backends driven whole quantize in their own writer: the script's kernel gets the drawn keys and
    values (and the per-tensor scales for the layer), its reference reads back the script's store()."""
    quant = Quant(kvd, k_scales=(0.05,), v_scales=(0.04,)) if kvd == KVCacheDType.FP8_E4M3 else Quant(kvd)
    case = RULED.replace(dtype=DType.FLOAT16, sliding_window=2, cache=CacheSpec(block_size=16, quant=quant))
    assert not get("vllm-backend-triton").not_supported_reasons(case)
    assert_script_reference_is_the_oracle(case, "vllm-backend-triton")
    ns = load(write_repro(case, "vllm-backend-triton"), device="cpu")
    seen = []
    ns["kernel"] = lambda *args: seen.append(args) or (torch.zeros(7, 2, 32), None)
    ns["main"]()
    q, ks, vs = ns["draw_inputs"]()
    _, _, _, k_scales, v_scales = ns["store"](q, ks, vs)
    got = seen[0]
    assert all(torch.equal(a, b) for a, b in zip(got[1], ks)) and all(torch.equal(a, b) for a, b in zip(got[2], vs))
    assert all(torch.equal(a, b) for a, b in zip(got[3], k_scales)) and all(torch.equal(a, b) for a, b in zip(got[4], v_scales))
    assert ns["CACHE_DTYPE"] == kvd.value


@pytest.mark.parametrize("name", ["vllm-triton-mla", "vllm-flashmla", "vllm-fa3-mla", "vllm-mla-writes-cache"])
def test_an_mla_script_s_reference_is_the_oracle_over_the_latent_cache(name):
    """vLLM's MLA templates: the latent rows as keys, their first D_V dims as values, fp8 with one scale (and
    FlashMLA's fp8 query): the script's float64 reference equals the oracle on each backend's declaration."""
    backend = get(name)

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases(backend.caps, Limits(max_sequences=2, max_context=40, max_query=4)))
    def check(case):
        assert_script_reference_is_the_oracle(case, name)

    check()


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_layer_script_builds_vllm_s_attention_and_reads_back_its_scales(dynamic):
    """Under vLLM's Attention layer the script builds the layer (calc_kv_scales as the case says), binds the cache
    and runs the step through the forward context; with dynamic scales its query scale is calc_kv_scales' value
    for this case's query, and its reference is the oracle's."""
    quant = Quant(KVCacheDType.FP8_E4M3, dynamic_scales=True, q_fp8_scale=1.0) if dynamic else \
        Quant(KVCacheDType.FP8_E4M3, k_scales=(0.05,), v_scales=(0.04,), q_fp8_scale=0.5)
    fresh = RULED.replace(sequences=(SequenceSpec(query_len=4), SequenceSpec(query_len=3)))
    case = fresh.replace(cache=CacheSpec(block_size=16, quant=quant))
    backend = get("vllm-layer-triton")
    assert not backend.not_supported_reasons(case)
    with_context = backend.not_supported_reasons(RULED.replace(cache=case.cache))  # RULED's sequences have context
    assert any("calc_kv_scales" in r for r in with_context) == dynamic, with_context
    text = write_repro(case, backend.name)
    assert f"calculate_kv_scales={dynamic}" in text and "layer(q, k_new, v_new)" in text and "Attention(H, D" in text
    assert ("fill_(value)" in text) != dynamic  # static scales are loaded, dynamic ones computed by the layer
    ns = load(text)
    expected_q_scale = float(materialize(case).q_scale[0])
    assert ns["Q_FP8_SCALE"] == expected_q_scale and (expected_q_scale != 1.0 or not dynamic)
    assert_script_reference_is_the_oracle(case, backend.name)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(replace(get("vllm-layer-flashinfer").caps, kv_cache_dtypes=frozenset({KVCacheDType.FP8_E4M3})),
             Limits(max_context=40, max_query=6)))
def test_a_script_s_baseline_holds_p_as_its_backend_declares(case):
    """FLASHINFER runs its fp8-query prefills' P.V in fp8 (Capabilities.fp8_probabilities): the script's baseline holds
    its probabilities as attnref's does, and only then (its decodes read a 16-bit query). Compared in float32, where
    the two passes' scores agree closely enough that no weight rounds to another e4m3 value."""
    text = write_repro(case, "vllm-layer-flashinfer")
    rounding = probability_rounding(case, 448.0)
    assert ("P_FP8 = (torch.float8_e4m3fn, 448.0)" in text) == (rounding is not None)
    ns = load(text)
    stored = ns["store"](*ns["draw_inputs"]())
    script, _ = ns["reference"](*ns["read_back"](*stored, torch.float32), torch.float32)
    ours = attention(materialize(case), dtype=torch.float32, reorder=True, rounding=rounding).output
    assert torch.allclose(script, ours, rtol=0, atol=1e-4 * float(ours.abs().max()) + 1e-6)
    if rounding is None:
        assert "P_FP8 = None" in text
