"""`attnref repro` template for vLLM's attention backends driven whole (backends/vllm_layers.py): the script
builds what vLLM's model runner builds, with vLLM's public API only: a one-layer llama config in a temporary
folder, the backend's AttentionImpl, the backend's own KV cache (its shape and stride order), the context and
the new tokens stored by the impl's do_kv_cache_update, CommonAttentionMetadata, the builder's metadata, forward.
Quantized caches: the kernel gets the keys and values unquantized (vLLM's writer quantizes them itself, with the
case's per-tensor scales on the layer); the script's reference reads back its own store(), vLLM's writer rules
(backends/_repro_cache.py), so a writer that stores other codes shows as the backend being off.
"""
from __future__ import annotations

from reference.case import AlibiConvention, BlockTableKind, Case

from . import spellings

LAYER = "model.layers.0.self_attn.attn"


def whole(case: Case, module: str, cls: str, zeroed_cache: bool, cascade_prefix: int, kv_dtype: str = "auto",
          layer: bool = False) -> str:
    """The script; with `layer`, vLLM's own Attention layer builds the impl and runs the step
    (backends/vllm_attention_layer.py) instead of a stand-in layer and the impl's own calls."""
    flex = cls == "FlexAttentionBackend"
    dynamic = case.cache.quant.dynamic_scales
    impl = [f"num_heads=H, head_size=D, scale=SCALE, num_kv_heads=H_KV, sliding_window={spellings.sliding_window(case)}",
            'kv_cache_dtype=CACHE_DTYPE, logits_soft_cap=SOFT_CAP',
            "alibi_slopes=None if ALIBI is None else [float(x) for x in ALIBI]",
            "sinks=None if SINKS is None else SINKS.to(DEVICE, DTYPE)"]
    if case.alibi is not None and case.alibi.convention == AlibiConvention.SQRT:
        impl.append("use_alibi_sqrt=True")
    if case.chunk_lookback is not None:
        impl.append("chunk_lookback=LOOKBACK[1]")
    impl_args = (",\n" + " " * 16).join(impl)
    text = f'''
BLOCK = {case.cache.block_size}  # tokens per page
CACHE_DTYPE = "{kv_dtype}"  # vLLM's cache_dtype string


def llama_config(folder):
    """A one-layer llama with this case's heads: all vLLM's config code needs (nothing is downloaded)."""
    import json
    import os

    from vllm.config import CacheConfig, ModelConfig, VllmConfig

    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
                   "hidden_size": H * D, "head_dim": D, "num_attention_heads": H, "num_key_value_heads": H_KV,
                   "intermediate_size": 64, "vocab_size": 256, "max_position_embeddings": 1 << 17,
                   "torch_dtype": "{case.dtype.value}"}}, f)
    model = ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="{case.dtype.value}",
                        max_model_len=1 << 17)
    return VllmConfig(model_config=model, cache_config=CacheConfig(block_size=BLOCK, cache_dtype=CACHE_DTYPE,
                                                                   calculate_kv_scales={dynamic}))


def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """vLLM's {cls} as its model runner drives it ({case.encoding("cache_layout", "NHD")} cache layout)."""
    import tempfile

    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.attention.backends.utils import set_kv_cache_layout
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode
    from {module} import {cls} as Backend
'''
    if flex:
        text += '''    # vLLM caps dynamo's recompiles at 16 on import; one script compiles once, but keep vLLM's runner's room
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 1 << 16)
'''
    if layer:
        build = _layer_build(case)
        store_new = ""
        forward = f'''        layer.kv_cache = kv_cache  # bind_kv_cache
        with set_forward_context({{"{LAYER}": metadata}}, cfg, slot_mapping={{"{LAYER}": new_slots}}):
            out = layer(q, k_new, v_new).view(q.shape[0], H, D_V)  # stores this step's tokens, then attends
'''
    else:
        build = f'''    with set_current_vllm_config(cfg):
        with torch.device(DEVICE):  # model loading builds layers with the GPU as default device
            impl = Backend.get_impl_cls()(
                {impl_args})
        layer = Attention.__new__(Attention)  # what forward and the builders read of the layer
        torch.nn.Module.__init__(layer)
        layer.impl, layer.layer_name = impl, "{LAYER}"
        # fp8 per tensor: the case's scales, as the checkpoint gives them (per-token-head writers compute their own)
        per_tensor = CACHE_DTYPE.startswith("fp8") and not CACHE_DTYPE.endswith("per_token_head")
        scales = (float(k_scales[0].reshape(-1)[0]), float(v_scales[0].reshape(-1)[0])) if per_tensor else (1.0, 1.0)
        # an impl that quantizes the query itself (FLASHINFER's prefills on sm90) reads the layer's q scale
        q_scale = Q_FP8_SCALE if per_tensor and Q_FP8_SCALE is not None else 1.0
        for name, value in zip(("_k_scale", "_v_scale", "_q_scale"), scales + (q_scale,)):
            setattr(layer, name, torch.tensor([value], dtype=torch.float32, device=DEVICE))
            setattr(layer, name + "_float", value)
        cfg.compilation_config.static_forward_context["{LAYER}"] = layer
'''
        store_new = "        impl.do_kv_cache_update(layer, k_new, v_new, kv_cache, new_slots)\n"
        forward = '''        out = torch.full(q.shape[:2] + (D_V,), float("nan"), dtype=DTYPE, device=DEVICE)
        impl.forward(layer, q, k_new, v_new, kv_cache, metadata, output=out)
'''
    text += f'''
    cfg = llama_config(tempfile.mkdtemp())
    set_kv_cache_layout("{case.encoding("cache_layout", "NHD")}")
    table, pages, seq_lens = block_table(BLOCK)  # vLLM writes its own cache
{build}        num_blocks = 1 + sum(pages)
        cfg.cache_config.num_gpu_blocks = num_blocks
        shape = Backend.get_kv_cache_shape(num_blocks, BLOCK, H_KV, D, CACHE_DTYPE)
        order = Backend.get_kv_cache_stride_order()
        storage = DTYPE if CACHE_DTYPE == "auto" else STR_DTYPE_TO_TORCH_DTYPE[CACHE_DTYPE]
        # unwritten slots: {"zeros, as vLLM allocates its caches (this backend computes whole blocks)" if zeroed_cache
                             else "NaN where the storage has one, so a read past a sequence shows"}
        fill = {0.0 if zeroed_cache else 'float("nan") if storage.is_floating_point and storage.itemsize > 1 else 0.0'}
        physical = torch.full([shape[i] for i in order], fill, device=DEVICE).to(storage)
        kv_cache = physical.permute(*[order.index(i) for i in range(len(order))])
        slots = [table[i, torch.arange(kv_len, device=DEVICE) // BLOCK].long() * BLOCK
                 + torch.arange(kv_len, device=DEVICE) % BLOCK for i, (_, kv_len, _) in enumerate(SEQS)]
        context = [kv_len - q_len for q_len, kv_len, _ in SEQS]
        if any(context):  # the context was stored in earlier steps, then this step's new tokens
            impl.do_kv_cache_update(layer, torch.cat([k[:c] for k, c in zip(ks, context)]),
                                    torch.cat([v[:c] for v, c in zip(vs, context)]), kv_cache,
                                    torch.cat([s[:c] for s, c in zip(slots, context)]))
        k_new = torch.cat([k[c:] for k, c in zip(ks, context)])
        v_new = torch.cat([v[c:] for v, c in zip(vs, context)])
        new_slots = torch.cat([s[c:] for s, c in zip(slots, context)])
{store_new}        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=H_KV, head_size=D, dtype=storage,
                                 kv_quant_mode=get_kv_quant_mode(CACHE_DTYPE), sliding_window={spellings.sliding_window(case)})
        builder = Backend.get_builder_cls()(spec, ["{LAYER}"], cfg, DEVICE)
        qsl = cu_seqlens(0)
        lens = seq_lens.cpu()
        common = CommonAttentionMetadata(
            query_start_loc=qsl, query_start_loc_cpu=qsl.cpu(), seq_lens=seq_lens, num_reqs=len(SEQS),
            num_actual_tokens=q.shape[0], max_query_len=max(max(s[0] for s in SEQS), 1),
            max_seq_len=max(max(s[1] for s in SEQS), 1), block_table_tensor=table, slot_mapping=new_slots, causal=True,
            seq_lens_cpu_upper_bound=lens, _seq_lens_cpu=lens,
            _num_computed_tokens_cpu=torch.tensor(context, dtype=torch.int32),
            is_prefilling=torch.tensor([s[0] > 1 for s in SEQS], device=DEVICE),
            mm_req_doc_ranges=None if RANGES is None else {{i: list(r) for i, r in enumerate(RANGES) if r}})
        # {"cascade attention: the shared prefix's tokens (whole blocks)" if cascade_prefix else "no cascade"}
        metadata = builder.build(common_prefix_len={cascade_prefix}, common_attn_metadata=common)
{forward}    return out, None
'''
    return text


def _layer_build(case: Case) -> str:
    """vLLM's Attention layer as model loading makes it: built under the config (it builds its impl and registers
    itself), weights processed, then the case's per-tensor scales as a checkpoint's kv-cache scheme loads them
    (none with calc_kv_scales: the first forward computes them)."""
    extra = [f"per_layer_sliding_window={spellings.sliding_window(case)}", "logits_soft_cap=SOFT_CAP",
             "alibi_slopes=None if ALIBI is None else [float(x) for x in ALIBI]"]
    if case.sinks is not None:
        extra.append("sinks=SINKS.to(DEVICE, DTYPE)")
    if case.alibi is not None and case.alibi.convention == AlibiConvention.SQRT:
        extra.append("use_alibi_sqrt=True")
    if case.chunk_lookback is not None:
        extra.append("chunk_lookback=LOOKBACK[1]")
    args = (",\n" + " " * 30).join(extra)
    load = "" if case.cache.quant.dynamic_scales else f'''        per_tensor = CACHE_DTYPE.startswith("fp8") and not CACHE_DTYPE.endswith("per_token_head")
        q_scale = Q_FP8_SCALE if per_tensor and Q_FP8_SCALE is not None else 1.0
        scales = (float(k_scales[0].reshape(-1)[0]), float(v_scales[0].reshape(-1)[0])) if per_tensor else (1.0, 1.0)
        for name, value in zip("kvq", scales + (q_scale,)):  # device tensor, float, host copy
            getattr(layer, f"_{{name}}_scale").fill_(value)
            setattr(layer, f"_{{name}}_scale_float", value)
            if hasattr(layer, f"_{{name}}_scale_cpu"):
                getattr(layer, f"_{{name}}_scale_cpu").fill_(value)
'''
    return f'''    with set_current_vllm_config(cfg):
        with torch.device(DEVICE), set_default_torch_dtype(DTYPE):  # as model loading builds layers
            layer = Attention(H, D, SCALE, num_kv_heads=H_KV, cache_config=cfg.cache_config, prefix="{LAYER}",
                              attn_backend=Backend, {args})
        layer.process_weights_after_loading(DTYPE)
{load}        impl = layer.impl
'''


def cascade_prefix(case: Case) -> int:
    """FLASH_ATTN's common_prefix_len: the shared prefix's tokens when the case draws cascade attention."""
    if case.encoding("cascade", "off") != "on" or case.cache.table != BlockTableKind.SHARED_PREFIX:
        return 0
    return case.cache.prefix_blocks * case.cache.block_size
