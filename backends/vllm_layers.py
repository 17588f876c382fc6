"""vLLM's attention backends driven whole, as vLLM's model runner drives them (vllm 0.26.0).

| backend | vLLM class | what runs |
|---|---|---|
| `vllm-backend-triton` | `v1/attention/backends/triton_attn.TritonAttentionBackend` | its metadata builder, `do_kv_cache_update` (Triton writer, per-token-head quantizer), `forward` (unified_attention) |
| `vllm-backend-flash` | `v1/attention/backends/flash_attn.FlashAttentionBackend` | its metadata builder (FA3 ahead-of-time scheduler metadata, cascade), `do_kv_cache_update` (CUDA writer), `forward` (FA3) |
| `vllm-backend-flex` | `v1/attention/backends/flex_attention.FlexAttentionBackend` | its metadata builder (paged block mask built directly from the block table), `do_kv_cache_update` (CUDA writer), `forward` (compiled `flex_attention` with its mask_mods: causal, sliding window, PrefixLM) |
| `vllm-backend-flashinfer` | `v1/attention/backends/flashinfer.FlashInferBackend` | its metadata builder (plans FlashInfer's prefill, decode and cascade wrappers), `do_kv_cache_update` (CUDA writer), `forward` (FlashInfer's kernels, JIT-compiled) |

Per case: a `VllmConfig` from a directory holding only a tiny llama `config.json` with the case's head
counts (nothing downloaded); an `AttentionImpl` built under that config on the GPU (as model loading
does); an Attention layer object carrying the impl and its k/v/q scales, registered in the config's
static forward context (the builders read head counts and windows from there); a KV cache of the
backend's own `get_kv_cache_shape` in its `get_kv_cache_stride_order` (K and V packed in the last
dimension; NHD or HND drawn as an encoding); the cached context and then the new tokens (padding
slots -1 included) written by the impl's own `do_kv_cache_update`; `CommonAttentionMetadata` from the
case, the builder's `build`, and `forward`. The oracle reads its own cache; the kernels read vLLM's.

Declarations follow each class's `supported_dtypes`, `supported_kv_cache_dtypes`, block sizes
(multiples of 16), `supports_sink` / `supports_alibi_sqrt` and the kernels under them: FLASH_ATTN picks
FA2 for ALiBi (not staged here) and takes sinks as FA3's bf16 `s_aux`. Needs vLLM's config code
(transformers and friends: `tools/stage-vllm.sh` with `.whl/vdeps`).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache

import torch

from reference.case import AlibiConvention, AttentionType, BlockTableKind, CausalAlignment, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs, KVCache, slots_for

from . import spellings
from .vllm_batch import common_metadata, from_runner_order, in_runner_order, runner_order
from .vllm_layers_repro import cascade_prefix, whole
from .base import (ENCODING_PIN, PTX_TANH_APPROX, Actual, Backend, Capabilities, Feature, cuda_library_reason,
                   poisoned_output)
from .flashinfer import LOADS_IN_PROCESS as FLASHINFER_LOADS_IN_PROCESS
from .vllm import TritonUnified

F16 = frozenset({DType.FLOAT16, DType.BFLOAT16})
LAYER = "model.layers.0.self_attn.attn"
KV_DTYPE_STRINGS = {KVCacheDType.AUTO: "auto", KVCacheDType.FP8_E4M3: "fp8_e4m3", KVCacheDType.FP8_E5M2: "fp8_e5m2",
                    KVCacheDType.INT8_PER_TOKEN_HEAD: "int8_per_token_head",
                    KVCacheDType.FP8_PER_TOKEN_HEAD: "fp8_per_token_head",
                    KVCacheDType.INT4_PER_TOKEN_HEAD: "int4_per_token_head"}


def cache_settings(case) -> dict:
    """The CacheConfig a case asks for: its page size, vLLM's cache_dtype string and calc_kv_scales (dynamic
    scales: the layer computes them in its first forward)."""
    return dict(block_size=case.cache.block_size, cache_dtype=KV_DTYPE_STRINGS[case.kv_cache_dtype],
                calculate_kv_scales=case.cache.quant.dynamic_scales)


def local_model(hf_config: dict, dtype: str, max_model_len: int):
    """vLLM's ModelConfig of a model known only by its `config.json` (nothing downloaded), written once per config to
    a folder named by its content: every worker and campaign builds its configs from the same few folders instead of
    leaving one temporary folder per config and process behind."""
    from vllm.config import ModelConfig

    text = json.dumps(hf_config, sort_keys=True)
    folder = os.path.join(tempfile.gettempdir(), "attnref-vllm-models", hashlib.sha1(text.encode()).hexdigest()[:16])
    if not os.path.exists(os.path.join(folder, "config.json")):
        os.makedirs(folder, exist_ok=True)
        partial = os.path.join(folder, f"config.json.{os.getpid()}")
        with open(partial, "w") as f:
            f.write(text)
        os.replace(partial, os.path.join(folder, "config.json"))  # atomic: a concurrent reader sees all or nothing
    return ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype=dtype,
                       max_model_len=max_model_len)


@lru_cache(maxsize=64)
def _config(num_heads: int, num_kv_heads: int, head_size: int, dtype: str, block_size: int, cache_dtype: str,
            calculate_kv_scales: bool):
    """A VllmConfig for a one-layer llama with the case's heads (built once per shape and process)."""
    from vllm.config import CacheConfig, VllmConfig

    model = local_model({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
                         "hidden_size": num_heads * head_size, "head_dim": head_size, "num_attention_heads": num_heads,
                         "num_key_value_heads": num_kv_heads, "intermediate_size": 64, "vocab_size": 256,
                         "max_position_embeddings": 1 << 17, "torch_dtype": dtype}, dtype, 1 << 17)
    return VllmConfig(model_config=model, cache_config=CacheConfig(block_size=block_size, cache_dtype=cache_dtype,
                                                                   calculate_kv_scales=calculate_kv_scales))


def whole_backend_reason(module: str) -> str | None:
    """Why a vLLM backend driven whole cannot run here: its config code's packages (.whl/vdeps) or vLLM itself."""
    if importlib.util.find_spec("transformers") is None and importlib.util.find_spec("vllm") is not None:
        return "vLLM's config code needs transformers (stage .whl/vdeps: tools/stage-vllm.sh)"
    return cuda_library_reason(module, "vllm")


def _layer(impl, k_scale: float, v_scale: float, q_scale: float, dev):
    """The Attention layer as forward and the builders see it: the impl and its scales (model loading
    would make it; only these attributes are read)."""
    from vllm.model_executor.layers.attention.attention import Attention

    layer = Attention.__new__(Attention)
    torch.nn.Module.__init__(layer)
    layer.impl = impl
    for name, value in (("_k_scale", k_scale), ("_v_scale", v_scale), ("_q_scale", q_scale)):
        setattr(layer, name, torch.tensor([value], dtype=torch.float32, device=dev))
        setattr(layer, name + "_float", value)
    layer.layer_name = LAYER
    return layer


class LayerBackend(Backend):
    """One vLLM AttentionBackend class, driven through builder + impl."""

    library = "vllm"
    zeroed_cache = False  # unwritten cache slots are NaN canaries unless the backend needs vLLM's zeroed cache
    # the builder's reorder_batch_threshold where it has one: the model runner then hands it decodes first
    # (vllm_batch.runner_order); None: the batch as drawn
    reorder_threshold: int | None = None
    under_the_layer = False  # vLLM's own Attention layer drives the step (backends/vllm_attention_layer.py)
    # the impl quantizes its query to fp8 itself, through `_custom_ops.scaled_fp8_quant` (FLASHINFER's prefills on sm90)
    impl_quantizes_query = False

    def __init__(self, name: str, module: str, cls: str, caps: Capabilities, description: str) -> None:
        self.name, self.module, self.cls, self.caps, self.description = name, module, cls, caps, description

    def availability(self) -> str | None:
        return whole_backend_reason(self.module)

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        if case.window is not None:
            reasons.append("a kernel-level window: a layer takes vLLM's sliding_window only")
        return reasons

    def _impl(self, backend_cls, case, inputs: Inputs):
        kw = dict(num_heads=case.num_heads, head_size=case.head_size, scale=case.softmax_scale,
                  num_kv_heads=case.num_kv_heads,
                  alibi_slopes=None if inputs.alibi_slopes is None else [float(x) for x in inputs.alibi_slopes],
                  sliding_window=spellings.sliding_window(case), kv_cache_dtype=KV_DTYPE_STRINGS[case.kv_cache_dtype],
                  logits_soft_cap=case.soft_cap,
                  sinks=None if inputs.sinks is None else inputs.sinks.to(inputs.device, case.dtype.torch))
        if case.alibi is not None and case.alibi.convention == AlibiConvention.SQRT:
            kw["use_alibi_sqrt"] = True
        if case.chunk_lookback is not None:
            kw["chunk_lookback"] = case.chunk_lookback
        with torch.device(inputs.device):  # model loading builds layers under the GPU as default device
            return backend_cls.get_impl_cls()(**kw)

    def run(self, inputs: Inputs) -> Actual:
        import importlib

        from vllm.config import set_current_vllm_config
        from vllm.v1.attention.backends.utils import set_kv_cache_layout
        from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode
        from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

        case = inputs.case
        dev = inputs.device
        settings = cache_settings(case)
        kvd, bs = settings["cache_dtype"], settings["block_size"]
        backend_cls = getattr(importlib.import_module(self.module), self.cls)
        cfg = _config(case.num_heads, case.num_kv_heads, case.head_size, case.dtype.value, **settings)
        set_kv_cache_layout(case.encoding("cache_layout", "NHD"))
        with set_current_vllm_config(cfg):
            layer = self._build_layer(backend_cls, cfg, case, inputs)
            impl = layer.impl
            num_blocks = inputs.cache.paged.num_blocks
            cfg.cache_config.num_gpu_blocks = num_blocks  # set by the engine after profiling; FLEX's builder reads it
            shape = backend_cls.get_kv_cache_shape(num_blocks, bs, case.num_kv_heads, case.head_size, kvd)
            order = backend_cls.get_kv_cache_stride_order()
            storage_dtype = case.dtype.torch if kvd == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kvd]
            # Unwritten slots hold NaN where the storage has one (a read past seq_len shows), else zero; a
            # backend declared `zeroed_cache` gets zeros, as vLLM allocates its caches (torch.zeros).
            nan_ok = storage_dtype.is_floating_point and storage_dtype.itemsize > 1 and not self.zeroed_cache
            canary = float("nan") if nan_ok else 0
            physical = torch.full([shape[i] for i in order], canary, dtype=storage_dtype, device=dev)
            kv_cache = physical.permute(*[order.index(i) for i in range(len(order))])
            slots = self._write_context(impl, layer, kv_cache, inputs)
            spec = FullAttentionSpec(block_size=bs, num_kv_heads=case.num_kv_heads, head_size=case.head_size,
                                     dtype=storage_dtype if kvd != "auto" else case.dtype.torch,
                                     kv_quant_mode=get_kv_quant_mode(kvd), sliding_window=spellings.sliding_window(case))
            builder = backend_cls.get_builder_cls()(spec, [LAYER], cfg, dev)
            reorder = None if self.reorder_threshold is None else runner_order(case, self.reorder_threshold)
            common = common_metadata(inputs, reorder)
            prefix = cascade_prefix(case)
            metadata = builder.build(common_prefix_len=prefix, common_attn_metadata=common)
            if reorder is None:
                output, buffer, query_fp8 = self._step(layer, kv_cache, metadata, cfg, inputs)
            else:  # the step in the runner's order, its results put back in the case's
                step, tokens = in_runner_order(inputs, reorder)
                output, buffer, query_fp8 = (from_runner_order(t, tokens) for t in
                                             self._step(layer, kv_cache, metadata, cfg, step))
        notes = {"cascade_prefix": prefix} if prefix else {}
        written = None
        all_slots = torch.cat([slots, inputs.slot_mapping.cpu()])
        if case.kv_cache_dtype.is_per_token_head:  # the codes and scales vLLM wrote, judged and attended over
            written = oracle_form_cache(inputs.cache_before_write, kv_cache, all_slots,
                                        impl._k_scale_cache, impl._v_scale_cache)
        elif case.kv_cache_dtype.is_fp8:  # byte for byte; with calc_kv_scales, with the scales the layer computed
            written = replace(oracle_form_cache(inputs.cache_before_write, kv_cache, all_slots),
                              **(layer_scales(layer) if case.cache.quant.dynamic_scales else {}))
        return Actual(output=output, output_buffer=buffer, buffer_rows=0 if buffer is None else case.num_tokens,
                      written_cache=written, query_fp8=query_fp8, notes=notes)

    def _build_layer(self, backend_cls, cfg, case, inputs: Inputs):
        """The impl on a stand-in layer holding the case's scales, registered where the builders look."""
        impl = self._impl(backend_cls, case, inputs)
        q_scale = case.cache.quant.q_fp8_scale  # an impl that quantizes the query itself reads the layer's
        layer = _layer(impl, float(inputs.cache.k_scale[0]), float(inputs.cache.v_scale[0]),
                       1.0 if q_scale is None else q_scale, inputs.device)
        cfg.compilation_config.static_forward_context[LAYER] = layer
        return layer

    def _step(self, layer, kv_cache, metadata, cfg, inputs: Inputs):
        """`_forward`, and where the impl quantizes the query itself (`impl_quantizes_query`) and the layer handed
        none back, the fp8 query it made: its ties are the impl's to decide (fuzz.cache_write)."""
        if not self.impl_quantizes_query:
            return self._forward(layer, kv_cache, metadata, cfg, inputs)
        from vllm import _custom_ops

        case = inputs.case
        with results_of(_custom_ops, "scaled_fp8_quant") as quantized:
            output, buffer, query_fp8 = self._forward(layer, kv_cache, metadata, cfg, inputs)
        shape = (case.num_tokens, case.num_heads, case.head_size)
        queries = [q for q, _ in quantized if q.numel() == math.prod(shape)]
        return output, buffer, query_fp8 if query_fp8 is not None or not queries else queries[0].reshape(shape)

    def _forward(self, layer, kv_cache, metadata, cfg, inputs: Inputs):
        """This step's new tokens stored by the impl, then its forward into a poisoned buffer: (output, buffer, the
        fp8 query the layer quantized itself or None)."""
        case = inputs.case
        layer.impl.do_kv_cache_update(layer, inputs.key, inputs.value, kv_cache, inputs.slot_mapping.to(inputs.device))
        buffer = poisoned_output(inputs)
        layer.impl.forward(layer, inputs.query, inputs.key[: case.num_tokens], inputs.value[: case.num_tokens],
                           kv_cache, metadata, output=buffer)
        return buffer[: case.num_tokens], buffer, None

    def _write_context(self, impl, layer, kv_cache, inputs: Inputs) -> torch.Tensor:
        """The cached context, stored by the backend's own writer (vLLM stored it in earlier steps); its slots."""
        case = inputs.case
        keys, values, slots = [], [], []
        for i, s in enumerate(case.sequences):
            if s.context_len:
                pos = torch.arange(s.context_len)
                keys.append(inputs.keys[i][: s.context_len])
                values.append(inputs.values[i][: s.context_len])
                slots.append(slots_for(inputs.block_table[i].cpu(), pos, case.cache.block_size))
        if keys:
            dev = inputs.device
            impl.do_kv_cache_update(layer, torch.cat(keys).to(dev), torch.cat(values).to(dev), kv_cache,
                                    torch.cat(slots).to(dev))
        return torch.cat(slots).to(torch.int64) if slots else torch.zeros(0, dtype=torch.int64)

    # quantized caches: the script hands the unquantized keys and values and the per-tensor scales; vLLM's writer
    # stores them (backends/vllm_layers_repro.py)
    repro_quantized = True
    repro_writes_cache = True

    def repro_kernel(self, case) -> str | None:
        return whole(case, self.module, self.cls, self.zeroed_cache, cascade_prefix(case),
                     KV_DTYPE_STRINGS[case.kv_cache_dtype], layer=self.under_the_layer)


@contextmanager
def outputs_of(module):
    """The outputs `module` returns while the block runs (a forward hook, removed after; None: nothing to watch): how
    the layers hand back the fp8 query they quantize themselves."""
    seen: list = []
    hook = None if module is None else module.register_forward_hook(lambda m, args, result: seen.append(result))
    try:
        yield seen
    finally:
        if hook is not None:
            hook.remove()


def layer_scales(layer) -> dict:
    """The per-tensor k / v scales a vLLM layer holds (after calc_kv_scales: the ones its first forward computed)."""
    return {f"{n}_scale": getattr(layer, f"_{n}_scale").detach().float().cpu().reshape(1) for n in ("k", "v")}


def oracle_form_cache(template: KVCache, packed: torch.Tensor, slots: torch.Tensor, k_scales: torch.Tensor | None = None,
                      v_scales: torch.Tensor | None = None) -> KVCache:
    """vLLM's cache (logical [nb, H_kv, bs, 2 * padded], K and V packed in the last dimension, `get_kv_cache_shape`)
    in the oracle's form. TRITON_ATTN's per-token-head formats put one float32 scale inline after each half's codes,
    [K codes | K scale | V codes | V scale] per (block, head, slot), read through float32 views [nb, bs, H_kv]
    (`_ensure_scale_caches`): `k_scales`, `v_scales`; per-tensor caches have no padding and no scale caches. The
    written `slots` (-1 skipped) are copied byte for byte into a clone of `template`, the oracle's cache before the
    write, so slots vLLM was not asked to write keep the oracle's canaries and a code or scale vLLM left out shows as
    its zero or 1.0."""
    written = template.clone()
    keys, values = written.paged.key_view(), written.paged.value_view()
    data, padded, bs = keys.shape[-1], packed.shape[-1] // 2, keys.shape[1]
    canonical = packed.transpose(1, 2).view(torch.uint8)  # [nb, bs, H_kv, 2 * padded] bytes
    slots = slots[slots >= 0].to(device=keys.device, dtype=torch.int64)
    at = slots // bs, slots % bs
    keys.view(torch.uint8)[at] = canonical[..., :data][at]
    values.view(torch.uint8)[at] = canonical[..., padded: padded + data][at]
    if k_scales is not None:
        written.k_token_scales[at] = k_scales[at]
        written.v_token_scales[at] = v_scales[at]
    return written


_BASE = Capabilities(
    devices=frozenset({"cuda"}), dtypes=F16, head_sizes=(64, 128), attn_types=frozenset({AttentionType.DECODER}),
    features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SOFT_CAP, Feature.SINKS, Feature.CONTEXT}),
    kv_layouts=frozenset({KVLayout.FLASH_NHD}), block_sizes=(16, 32, 64),
    kv_cache_dtypes=frozenset({KVCacheDType.AUTO}), lse_base=None, requires_cache=True, reads_paged_cache=True,
    writes_output_buffer=True, causal_alignments=frozenset({CausalAlignment.BOTTOM_RIGHT}),
    # sliding_window: None, or a W that reaches past every key (a model whose window is longer than the context:
    # the impl still builds the window (W - 1, 0) and runs the kernels' windowed branch)
    encodings=(("cache_layout", ("NHD", "HND")), spellings.window_encodings((spellings.NONE, spellings.EDGE,
                                                                            spellings.BEYOND))))


def vllm_layer_backends() -> list[Backend]:
    # The model runner hands TRITON_ATTN PrefixLM ranges (mm_req_doc_ranges) and a layer's chunk_lookback;
    # R-SWA comes from the model's config (rswa_window), which this one-layer llama does not have.
    triton = replace(
        _BASE, head_sizes=(32, 40, 64, 72, 80, 96, 112, 128, 160, 192, 256),
        features=_BASE.features | {Feature.ALIBI, Feature.PREFIX_LM, Feature.CHUNK_LOOKBACK},
        alibi_conventions=frozenset({AlibiConvention.SIGNED, AlibiConvention.SQRT}),
        # fp8 / int8 per-token-head writes are read back from the inline-scale layout (`oracle_form_cache`): the
        # write is judged and the attention is judged over the codes vLLM wrote. int4_per_token_head is not
        # declared: its writer's Hadamard kernel has a known defect (ledger: vllm-pth-writes-cache) and its
        # attention drops chunk_lookback (benchmarks/results/repro/vllm-int4-drops-mask-rules.py), both covered by
        # vllm-pth-writes-cache and vllm-triton-unified; here they would bury anything new under known rows.
        kv_cache_dtypes=frozenset(KV_DTYPE_STRINGS) - {KVCacheDType.INT4_PER_TOKEN_HEAD})
    # FA3's s_aux takes bfloat16 sinks; vLLM's use_cascade_attention never picks cascade for a sliding window: both
    # drawn so (48 % of vllm-layer-flash's draws were these refusals, vllm/flashinfer-sm90-h200-2026-11-26.md)
    # FA3 and FlashInfer cap logits with tanh.approx.f32 (PTX_TANH_APPROX)
    flash = replace(_BASE, head_sizes=(64, 96, 128, 192, 256), soft_cap_tanh_error=PTX_TANH_APPROX,
                    block_tables=frozenset(BlockTableKind), sinks_dtypes=frozenset({DType.BFLOAT16}),
                    windowless_encodings=(("cascade", "on"),),
                    encodings=_BASE.encodings + (("cascade", ("off", "on")),))
    # FLEX_ATTENTION: FlexAttentionBackend.supported_dtypes / supported_kv_cache_dtypes, any head size
    # (get_supported_head_sizes() is empty), block sizes MultipleOf(16), supports_mm_prefix; its impl raises
    # NotImplementedError for ALiBi, soft-cap and quantized caches, and sinks are not among its arguments
    # (AttentionBackend.supports_sink is False). Its KV cache has one stride order: no cache_layout encoding.
    flex = replace(_BASE, dtypes=F16 | {DType.FLOAT32}, head_sizes=(32, 64, 80, 96, 128, 256),
                   features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.CONTEXT, Feature.PREFIX_LM}),
                   encodings=(spellings.window_encodings((spellings.NONE, spellings.EDGE, spellings.BEYOND)),))
    # FLASHINFER: FlashInferBackend.supported_dtypes / supported_kv_cache_dtypes (nvfp4: Blackwell only), head sizes
    # 64 / 128 / 256 (512 has no sm90 prefill module), kernel block sizes 16 / 32 / 64 (larger ones only on
    # Blackwell's trtllm-gen); no sinks off SM100 (supports_sink), no ALiBi (the impl keeps the slopes, the wrappers
    # are never given them); no cascade: its builder's use_cascade_attention returns False ("Cascade attention doesn't
    # work, disable it for now"), and a cascade plan over an fp8 cache fails its own assertion (q dtypes of prefill and
    # decode differ; 2 of 2 fp8 cascade rows on the H200, vllm/mla-layers-flashinfer-h200-2026-11-26.md). On an sm90
    # machine without NVIDIA's artifactory (this one) the XQA / trtllm-gen paths are off: FlashInfer's own decode and
    # prefill wrappers.
    # An fp8 cache's prefills read an fp8 query, its decodes a 16-bit one: get_q_data_type gives the prefill wrapper
    # the cache's fp8 dtype and the decode wrapper the model's (sm90, where attnref measures it), and the impl quantizes
    # the prefills' queries with the layer's q scale (maybe_quant_query). Undeclared, 5,701 of 5,854 e4m3 rows with a
    # prefill mismatched, none of 4,768 decode-only ones (vllm/flashinfer-sm90-h200-2026-11-26.md). The fp8 query is
    # drawn for e4m3 caches only: over e5m2 every prefill fails (catalog vllm-flashinfer-e5m2-prefill-query), so e5m2
    # cases come all decode.
    flashinfer = replace(_BASE, head_sizes=(64, 128, 256),
                         features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SOFT_CAP, Feature.CONTEXT,
                                             Feature.Q_FP8}),
                         kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3, KVCacheDType.FP8_E5M2}),
                         block_tables=frozenset(BlockTableKind), fp8_query_prefills=1,
                         soft_cap_tanh_error=PTX_TANH_APPROX,
                         # its sm90 fp8 prefill (StandardFP8Attention, hopper/variants.cuh) multiplies P by p_scale, the
                         # cache format's largest value (448 for e4m3, the only fp8 query drawn), and runs P.V in fp8
                         # (convert_type<DTypeKV>, hopper/quantization/mainloop_mma.cuh)
                         fp8_probabilities=448.0)
    flashinfer_whole = _FlashInferLayer(
        "vllm-backend-flashinfer", "vllm.v1.attention.backends.flashinfer", "FlashInferBackend", flashinfer,
        "vLLM FLASHINFER whole: metadata builder (plans FlashInfer's prefill / decode / cascade wrappers), "
        "do_kv_cache_update, forward")
    flashinfer_whole.compiled_per = ("dtypes", "head_sizes", "kv_cache_dtypes")  # FlashInfer's nvcc JIT modules
    flashinfer_whole.compiled_features = (Feature.SOFT_CAP, Feature.WINDOW)
    triton_whole = LayerBackend("vllm-backend-triton", "vllm.v1.attention.backends.triton_attn", "TritonAttentionBackend",
                                triton, "vLLM TRITON_ATTN whole: metadata builder, do_kv_cache_update, forward")
    # its forward is unified_attention: Triton builds per dtype, head size, cache dtype, USE_* flag and shape, as for
    # vllm-triton-unified, whose declaration it takes
    triton_whole.compiled_per = TritonUnified.compiled_per
    triton_whole.compiled_features = TritonUnified.compiled_features
    triton_whole.jit_shape_per = TritonUnified.jit_shape_per
    return [
        triton_whole,
        LayerBackend("vllm-backend-flash", "vllm.v1.attention.backends.flash_attn", "FlashAttentionBackend", flash,
                     "vLLM FLASH_ATTN whole (FA3): metadata builder with AOT scheduling and cascade, do_kv_cache_update, forward"),
        _FlexLayer("vllm-backend-flex", "vllm.v1.attention.backends.flex_attention", "FlexAttentionBackend", flex,
                     "vLLM FLEX_ATTENTION whole: metadata builder (direct paged block mask), do_kv_cache_update, "
                     "forward (compiled flex_attention)"),
        flashinfer_whole,
    ]


class _FlashInferLayer(LayerBackend):
    """FLASHINFER's metadata builder raises NotImplementedError("FlashInfer backend on SM90 currently crashes with
    sliding-window attention layers") for any window_left != -1 on an sm90 GPU (flashinfer issue #3578; measured on
    the H100: 29 of 29 windowed rows): there its declaration draws no window (`on_sm90`), and a saved case with one,
    spelled or real, is refused with vLLM's reason.
    Its builder splits decodes from prefills (reorder_batch_threshold 1), so the runner hands it decodes first, and
    it plans FlashInfer's decode and prefill modules for the parts the batch has: JIT builds of their own."""

    reorder_threshold = 1
    # an unbounded window spelled None plans FlashInfer's modules without a window, one spelled as a number the
    # windowed ones (jit_variant): each focused shard draws one spelling (as backends.flashinfer's)
    jit_shape_per = (ENCODING_PIN + spellings.UNBOUNDED_WINDOW,)
    impl_quantizes_query = True  # its prefills' query (maybe_quant_query), on sm90
    jit_module_space = "vllm-flashinfer"  # the layer and the whole backend build the same modules
    loads_in_process = FLASHINFER_LOADS_IN_PROCESS  # FlashInfer's own modules (backends.flashinfer)

    def jit_variant(self, case) -> tuple:
        """The FlashInfer modules the builder plans, each built on its first use: the compile key's fields, and whether
        the runner-ordered batch has decodes (context and one new token: the decode wrapper's module) and prefills
        (the prefill wrapper's)."""
        decodes = [s.context_len > 0 and s.query_len <= self.reorder_threshold for s in case.sequences]
        return (case.dtype.value, case.kv_cache_dtype.value, case.head_size, case.soft_cap is not None,
                spellings.sliding_window(case) is not None, any(decodes), not all(decodes))

    @property
    def caps(self) -> Capabilities:
        """The declaration as an sm90 GPU takes it (`on_sm90`) there, else as documented."""
        return on_sm90(self.declared) if _sm90() else self.declared

    @caps.setter
    def caps(self, value: Capabilities) -> None:
        self.declared = value

    @property
    def documented_caps(self) -> Capabilities:
        return self.declared

    @property
    def device_out_reason(self) -> str | None:
        return SM90_WINDOW if _sm90() else None

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        if spellings.sliding_window(case) is not None and _sm90():
            reasons.append(SM90_WINDOW)
        return reasons


SM90_WINDOW = ("a sliding window on an sm90 GPU: vLLM's FLASHINFER builder refuses it ('FlashInfer backend on SM90 "
               "currently crashes with sliding-window attention layers', flashinfer issue #3578)")


def on_sm90(caps: Capabilities) -> Capabilities:
    """FLASHINFER's declaration on an sm90 GPU: no sliding window. Its builder refuses every one, so neither a window
    nor an unbounded one spelled as a number is drawn there (run B of vllm/mla-layers-flashinfer-h200-2026-11-26.md:
    230 of 300 drawn cases had one, 273 of 308 rows were refusals)."""
    encodings = tuple((name, (spellings.NONE,)) if name == spellings.UNBOUNDED_WINDOW else (name, values)
                      for name, values in caps.encodings)
    return replace(caps, features=caps.features - {Feature.WINDOW}, encodings=encodings)


@contextmanager
def results_of(owner, name: str):
    """What `owner.name` (a module's function) returns while the block runs: the attribute wrapped, restored after;
    for a quantization a library calls by its module attribute rather than through a torch module."""
    seen: list = []
    original = getattr(owner, name)

    def recorded(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append(result)
        return result

    setattr(owner, name, recorded)
    try:
        yield seen
    finally:
        setattr(owner, name, original)


@lru_cache(maxsize=1)
def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


class _FlexLayer(LayerBackend):
    """FLEX_ATTENTION computes whole 16-slot key blocks: a masked slot's probability is 0, and 0 x its value is
    0 only while the value is finite. Measured on the H100 (vLLM 0.26.0): with NaN canaries in the unwritten
    tail slots of each sequence's last block, 467 of 512 non-crash rows had NaN outputs, and every passing row
    had lengths that fill their last block. vLLM zeroes its KV caches at allocation and later writes only finite
    keys, so the harness gives this backend zeros there (declared, not a tolerance).
    vLLM sets dynamo's recompile_limit to 16 when the module is imported: a server compiles a handful of
    shapes, a fuzzer one per case, and `fullgraph=True` turns the 17th into FailOnRecompileLimitHit (21,119
    crash rows in the first run). The limits are raised after vLLM's import."""

    zeroed_cache = True
    # dynamo compiles flex_attention once per dtype, head size, KV head count and mask_mod / score_mod: measured on
    # the H200, every new one of these costs 0.7-3 s (a new graph), a repeat 3-7 ms (tools/probe-flex-compiles.py,
    # vllm/layers-flex-flashinfer-fp8-h200-2026-11-26.md). Keyed so, a campaign's focused shards draw repeats of a key.
    compiled_per = ("dtypes", "head_sizes")
    compiled_features = (Feature.WINDOW, Feature.PREFIX_LM)

    def run(self, inputs: Inputs) -> Actual:
        import importlib

        importlib.import_module(self.module)  # vLLM sets its recompile limit at import: raise it after
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 1 << 16)
        torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit,
                                                               1 << 16)
        return super().run(inputs)
