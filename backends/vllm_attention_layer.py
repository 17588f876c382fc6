"""vLLM's own Attention layer object over the backends driven whole (vllm 0.26.0,
`vllm/model_executor/layers/attention/attention.py`).

| backend | what runs |
|---|---|
| `vllm-layer-triton` | `Attention(...)` built under the one-layer config with TRITON_ATTN: its impl, its scale buffers, its fp8 query quantization, `calc_kv_scales`; `forward` through `unified_kv_cache_update` and `unified_attention_with_output` |
| `vllm-layer-flash` | the same with FLASH_ATTN (FA3) |
| `vllm-layer-flex` | the same with FLEX_ATTENTION |
| `vllm-layer-flashinfer` | the same with FLASHINFER |

What differs from the backends driven whole (backends/vllm_layers.py), whose stand-in layer only holds scales:
the layer builds its own impl from its arguments (`per_layer_sliding_window`, `logits_soft_cap`, sinks,
`use_alibi_sqrt`, `chunk_lookback`); model loading's `process_weights_after_loading` runs, then the case's
per-tensor scales are loaded as a checkpoint's kv-cache scheme loads them; the KV cache is bound to the layer
and the metadata and slot mapping reach it through vLLM's forward context; `layer(query, key, value)` writes
this step's tokens and attends, into an output the layer allocates itself.

`calc_kv_scales` (CacheConfig.calculate_kv_scales): the first forward sets the q / k / v scales to
amax(|x|) / Q_, K_, V_SCALE_CONSTANT (200, 200, 100) of that forward's query, keys and values, before it writes
them: the oracle's `dynamic_scales` (reference.inputs). The first forward is the one that stored every key of
the cache, so a case with dynamic scales has no cached context (a declared restriction, with its reason).
With an fp8 cache TRITON_ATTN's impl takes an fp8 query on CUDA (`supports_quant_query_input`): the layer
quantizes the query with its q scale, so those cases come with one (`Capabilities.fp8_query_only`); FLASHINFER's
takes it only on SM100.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from reference.case import AlibiConvention, KVCacheDType
from reference.inputs import Inputs

from . import spellings
from .base import Backend, Feature
from .vllm_layers import LAYER, outputs_of, vllm_layer_backends


# impl.supports_quant_query_input on an sm90 GPU with an fp8 cache: TRITON_ATTN on any CUDA device; FLASHINFER only on
# SM100's trtllm-gen (vllm/v1/attention/backends/triton_attn.py, flashinfer.py). FLASHINFER's impl quantizes its
# prefills' queries itself on sm90 (vllm_layers.on_sm90).
QUANTIZES_QUERY = frozenset({"TritonAttentionBackend"})


class _UnderTheLayer:
    """Mixed into a whole backend's class (its declaration narrowing and run hooks kept): the layer drives it."""

    under_the_layer = True

    def _build_layer(self, backend_cls, cfg, case, inputs: Inputs):
        from vllm.model_executor.layers.attention.attention import Attention
        from vllm.utils.torch_utils import set_default_torch_dtype

        cfg.compilation_config.static_forward_context.pop(LAYER, None)  # the config is cached per shape
        extra = {}
        if inputs.sinks is not None:
            extra["sinks"] = inputs.sinks.to(inputs.device, case.dtype.torch)
        if case.chunk_lookback is not None:
            extra["chunk_lookback"] = case.chunk_lookback
        slopes = None if inputs.alibi_slopes is None else [float(x) for x in inputs.alibi_slopes]
        with torch.device(inputs.device), set_default_torch_dtype(case.dtype.torch):  # as model loading builds layers
            layer = Attention(case.num_heads, case.head_size, case.softmax_scale, num_kv_heads=case.num_kv_heads,
                              alibi_slopes=slopes, use_alibi_sqrt=self._alibi_sqrt(case),
                              cache_config=cfg.cache_config, logits_soft_cap=case.soft_cap,
                              per_layer_sliding_window=spellings.sliding_window(case), prefix=LAYER,
                              attn_backend=backend_cls, **extra)
        layer.process_weights_after_loading(case.dtype.torch)
        if not case.cache.quant.dynamic_scales:
            q = case.cache.quant.q_fp8_scale
            _load_scales(layer, float(inputs.cache.k_scale[0]), float(inputs.cache.v_scale[0]), 1.0 if q is None else q)
        return layer

    @staticmethod
    def _alibi_sqrt(case) -> bool | None:
        return True if case.alibi is not None and case.alibi.convention == AlibiConvention.SQRT else None

    def _forward(self, layer, kv_cache, metadata, cfg, inputs: Inputs):
        from vllm.forward_context import set_forward_context

        case = inputs.case
        n = case.num_tokens
        layer.kv_cache = kv_cache  # bind_kv_cache
        slots = {LAYER: inputs.slot_mapping[:n].to(inputs.device)}
        # the query QuantFP8 hands the impl, (fp8 query, scale): its ties are the layer's to decide (fuzz.cache_write)
        with outputs_of(layer.query_quant) as quantized, set_forward_context({LAYER: metadata}, cfg, slot_mapping=slots):
            out = layer(inputs.query, inputs.key[:n], inputs.value[:n])
        query_fp8 = quantized[0][0].reshape(n, case.num_heads, case.head_size) if quantized else None
        return out.view(n, case.num_heads, case.value_size), None, query_fp8


def _load_scales(layer, k: float, v: float, q: float) -> None:
    """The per-tensor scales a checkpoint's kv-cache scheme loads: device tensors, floats and host copies."""
    for name, value in (("k", k), ("v", v), ("q", q)):
        getattr(layer, f"_{name}_scale").fill_(value)
        setattr(layer, f"_{name}_scale_float", value)
        if hasattr(layer, f"_{name}_scale_cpu"):
            getattr(layer, f"_{name}_scale_cpu").fill_(value)


def vllm_attention_layer_backends() -> list[Backend]:
    out = []
    for whole in vllm_layer_backends():
        name = whole.name.replace("vllm-backend-", "vllm-layer-")
        caps = replace(whole.documented_caps, writes_output_buffer=False)  # the layer allocates its output
        if KVCacheDType.FP8_E4M3 in caps.kv_cache_dtypes:  # calc_kv_scales on fp8 per-tensor caches
            caps = replace(caps, features=caps.features | {Feature.DYNAMIC_SCALES}, dynamic_scales_first_forward=True)
            if whole.cls in QUANTIZES_QUERY:  # the layer hands the impl an fp8 (e4m3) query
                # over an e5m2 cache the query is e4m3 too, which the Case's q_fp8 (e4m3 caches) does not describe
                # and with an fp8 query triton_unified_attention keeps V in fp8 (_cast_kv_tile) and runs
                # tl.dot(P.to(V.dtype), V): P rounded to e4m3 unscaled, relative to a running max that starts at the
                # sink (init_softmax_M)
                caps = replace(caps, features=caps.features | {Feature.Q_FP8}, fp8_query_only=True,
                               kv_cache_dtypes=caps.kv_cache_dtypes - {KVCacheDType.FP8_E5M2}, fp8_probabilities=1.0)
        description = whole.description.replace(" whole", " under vLLM's Attention layer")
        cls = type(f"{type(whole).__name__.strip('_')}UnderAttention", (_UnderTheLayer, type(whole)), {})
        backend = cls(name, whole.module, whole.cls, caps, description)
        backend.compiled_per, backend.compiled_features = whole.compiled_per, whole.compiled_features
        backend.jit_shape_per = whole.jit_shape_per
        out.append(backend)
    return out
