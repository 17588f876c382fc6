"""vLLM's own Attention layer over its backends (backends/vllm_attention_layer.py), checked without vLLM: the
declarations, and that the config a case runs under asks the layer for calc_kv_scales exactly when the case's
scales are dynamic (a stand-in vLLM records the CacheConfig the adapter builds)."""
from __future__ import annotations

import json
import os
import sys
import types

import pytest

from backends import vllm_layers
from backends.registry import get
from reference.case import CacheSpec, Case, DType, KVCacheDType, Quant, SequenceSpec
from reference.inputs import materialize

FRESH = Case(sequences=(SequenceSpec(query_len=4), SequenceSpec(query_len=3)), num_heads=2, num_kv_heads=1,
             head_size=32, dtype=DType.BFLOAT16, seed=3)
DYNAMIC = FRESH.replace(cache=CacheSpec(block_size=16, quant=Quant(KVCacheDType.FP8_E4M3, dynamic_scales=True,
                                                                   q_fp8_scale=1.0)))
STATIC = FRESH.replace(cache=CacheSpec(block_size=16, quant=Quant(KVCacheDType.FP8_E4M3, k_scales=(0.5,),
                                                                  v_scales=(0.25,), q_fp8_scale=0.75)))


class _Stop(Exception):
    pass


def _stand_in_vllm(monkeypatch, seen: list) -> None:
    """Just enough of vLLM's module tree for LayerBackend.run to build its config, then stop."""
    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)

    def refuse(*a, **k):
        raise _Stop

    module("vllm")
    module("vllm.config", CacheConfig=lambda **kw: seen.append(kw) or kw, ModelConfig=lambda **kw: kw,
           VllmConfig=lambda **kw: types.SimpleNamespace(**kw), set_current_vllm_config=refuse)
    for name in ("vllm.v1", "vllm.v1.attention", "vllm.utils", "vllm.v1.attention.backends"):
        module(name)
    module("vllm.v1.attention.backend", CommonAttentionMetadata=None)
    module("vllm.v1.attention.backends.utils", set_kv_cache_layout=lambda layout: None)
    module("vllm.v1.kv_cache_interface", FullAttentionSpec=None, get_kv_quant_mode=None)
    module("vllm.utils.torch_utils", STR_DTYPE_TO_TORCH_DTYPE={})
    module("vllm.v1.attention.backends.triton_attn", TritonAttentionBackend=object)
    vllm_layers._config.cache_clear()


@pytest.mark.parametrize("case,dynamic", [(DYNAMIC, True), (STATIC, False)])
def test_the_layer_computes_the_scales_exactly_when_the_case_s_are_dynamic(monkeypatch, case, dynamic):
    seen: list = []
    _stand_in_vllm(monkeypatch, seen)
    backend = get("vllm-layer-triton")
    assert not backend.not_supported_reasons(case)
    with pytest.raises(_Stop):
        backend.run(materialize(case))
    assert seen == [dict(block_size=16, cache_dtype="fp8_e4m3", calculate_kv_scales=dynamic)]


def test_declarations_follow_what_the_layer_does():
    triton, flashinfer = get("vllm-layer-triton"), get("vllm-layer-flashinfer")
    assert triton.under_the_layer and not get("vllm-backend-triton").under_the_layer
    assert not triton.caps.writes_output_buffer  # the layer allocates its output
    # TRITON_ATTN takes the layer's fp8 query on CUDA; FLASHINFER only on SM100's trtllm-gen
    assert triton.caps.fp8_query_only and not flashinfer.caps.fp8_query_only
    assert KVCacheDType.FP8_E5M2 not in triton.caps.kv_cache_dtypes  # the Case's fp8 query comes with e4m3 only
    with_context = DYNAMIC.replace(sequences=(SequenceSpec(query_len=2, context_len=5),))
    assert any("calc_kv_scales" in r for r in triton.not_supported_reasons(with_context))
    assert not any("calc_kv_scales" in r for r in triton.not_supported_reasons(
        with_context.replace(cache=STATIC.cache)))


def test_dynamic_scale_cases_are_drawn_as_the_first_forward():
    """Capabilities.dynamic_scales_first_forward: the fuzzer draws dynamic-scale cases without cached context
    (the step that computes the scales stores every key), so none is drawn only to be refused."""
    from fuzz.strategies import Limits
    from tests.repro_scripts import drawn_cases

    backend = get("vllm-layer-triton")
    dynamic = [c for c in drawn_cases(backend.caps, Limits(max_sequences=3, max_context=40, max_query=6), 200)
               if c.cache is not None and c.cache.quant.dynamic_scales]
    assert len(dynamic) >= 10
    assert all(not any(s.context_len for s in c.sequences) for c in dynamic)
    assert all(not backend.not_supported_reasons(c) for c in dynamic)


def test_a_local_models_folder_is_named_by_its_config_and_reused(monkeypatch, tmp_path):
    """Every worker builds its one-layer configs from config.json folders: one per distinct config, not one
    temporary folder per config and process (72 were left behind in /tmp by one day's test runs)."""
    monkeypatch.setattr(vllm_layers.tempfile, "gettempdir", lambda: str(tmp_path))
    _stand_in_vllm(monkeypatch, [])
    llama = {"model_type": "llama", "num_attention_heads": 4}
    first = vllm_layers.local_model(llama, "bfloat16", 64)["model"]
    assert vllm_layers.local_model(dict(reversed(list(llama.items()))), "bfloat16", 64)["model"] == first
    assert vllm_layers.local_model({**llama, "num_attention_heads": 8}, "bfloat16", 64)["model"] != first
    assert json.loads((tmp_path / "attnref-vllm-models" / os.path.basename(first) / "config.json").read_text()) == llama
    assert sorted(p.name for p in (tmp_path / "attnref-vllm-models").iterdir()) == sorted(
        {os.path.basename(first), os.path.basename(vllm_layers.local_model({**llama, "num_attention_heads": 8},
                                                                           "bfloat16", 64)["model"])})
