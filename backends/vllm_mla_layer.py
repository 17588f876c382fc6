"""vLLM's MLA backends driven whole under its own `MLAAttention` layer (vllm 0.26.0,
`model_executor/layers/attention/mla_attention.py`).

| backend | what runs |
|---|---|
| `vllm-layer-triton-mla` | `MLAAttention(..., attn_backend=TritonMLABackend)` built under a one-layer DeepSeek-V2 config: `process_weights_after_loading` (W_UK_T, W_UV from kv_b_proj), the layer's forward: `concat_and_cache_mla` through `unified_mla_kv_cache_update`, then `forward_impl`: decodes absorbed (`bmm(q_nope, W_UK_T)`, TRITON_MLA's `forward_mqa`, `W_UV`), prefills expanded through the MLA prefill backend (FA3 on sm90) with the cached context gathered chunk by chunk (`gather_and_maybe_dequant_cache`, `kv_b_proj`) and merged by LSE |
| `vllm-layer-flashmla` | the same with FLASHMLA: 576 only, block size 64, its builder's tile scheduler metadata, uniform decode batches of up to 128 queries, fp8 e4m3 with the layer's fp8 query (bfloat16 models) |
| `vllm-layer-flash-attn-mla` | the same with FLASH_ATTN_MLA: 576 only, FA3 with q_v and the builder's AOT scheduler metadata, varlen decode batches of up to 512 queries, 16-bit caches |

The case is the absorbed one attnref judges (reference/mla.py): one latent head, key [c, k_pe] (head_size =
kv_lora_rank + rope). The layer gets the non-absorbed query and a kv_b_proj whose W_UK / W_UV are signed
permutations of the latent's first qk_nope / v_head dimensions (backends/mla_projections.py), under which its
decode and its prefill compute the case exactly, and the case is one such a layer can compute: its value is
the latent's first v_head dimensions (value_size = v_head) and its absorbed query is 0 past the first
qk_nope (`Values.query_zero_dims`). The output is gathered back out of the layer's v_head columns.

vLLM's MLA metadata takes a latent + rope of 576 or 320 (`MLACommonBackend.get_supported_head_sizes`) and
its prefill backend three (qk_nope, rope, v_head) shapes (`prefill/flash_attn.py` `supports_mla_dimensions`:
DeepSeek's 128 / 64 / 128, GLM's 192 / 64 / 256, Mistral S4's 64 / 64 / 128); `MLA_SHAPES` pairs them.

The batch is reordered as the model runner reorders it for a builder that splits decodes from prefills
(`runner_order`; `reorder_batch_threshold`: 1 for TRITON_MLA, 128 for FLASHMLA, 512 for FLASH_ATTN_MLA), and the
output is put back in the case's order.
The cached context is the oracle's write, which equals `concat_and_cache_mla`'s bit for bit (18,889 examples
of vllm-mla-writes-cache, benchmarks/results/vllm/mla-h100-2026-11-25.md); the layer writes the new tokens
itself and the written cache is compared with the oracle's, bit for bit. `kv_b_proj` is a plain linear
layer holding the weights (a checkpoint's unquantized ColumnParallelLinear computes the same product).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import torch

from reference.case import AttentionType, CausalAlignment, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs

from .base import Actual, Backend, Capabilities, Feature
from .mla_projections import exact_projections
from .vllm import F16
from .vllm_attention_layer import _load_scales
from .vllm_batch import common_metadata, runner_order, token_order
from .vllm_layers import KV_DTYPE_STRINGS, LAYER, layer_scales, local_model, outputs_of, whole_backend_reason
from .vllm_mla import FLASHMLA_FP8_PROBABILITIES
from .vllm_mla_layer_repro import layer as layer_script

# (head_size, value_size) of the case -> (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
MLA_SHAPES = {(576, 128): (512, 128, 64, 128),  # DeepSeek V2 / V3
              (576, 256): (512, 192, 64, 256),  # GLM's prefill shape
              (320, 128): (256, 128, 64, 128),  # a 256-wide latent, DeepSeek's heads
              (320, 256): (256, 192, 64, 256)}
# Mistral S4's (64, 64, 128) has DeepSeek's size pair with a narrower nope: one shape per pair keeps the query's zero
# dimensions a function of the pair (Capabilities.query_zero_dims)
ZERO_DIMS = tuple((pair, (nope, rank)) for pair, (rank, nope, _, _) in MLA_SHAPES.items())
# context_workspace: "vllm", the workspace of this config (64K tokens: the context in one chunk); "small", that of a
# config with max_model_len 16 and max_num_seqs the batch's size (determine_chunked_prefill_workspace_size:
# max(8 x 16, 4 x max_num_seqs x block size) tokens, 128 to 1,024): the context gathered in several chunks, merged by
# LSE. A batch never has more requests than max_num_seqs: FLASHMLA's fp8 decode copies its tile scheduler's splits
# into a CUDA-graph buffer of max_num_seqs + 1 (under max_num_seqs 1, 1,420 fp8 rows failed its assertion on an H200,
# every one with 2-4 requests and the small workspace; none after: vllm/mla-layers-flashinfer-h200-2026-11-26.md)
WORKSPACES = {"vllm": (1 << 17, 256), "small": (16, None)}  # (max_model_len, max_num_seqs; None: the batch's size)


def workspace(case) -> tuple[int, int]:
    """(max_model_len, max_num_seqs) of the config the case's `context_workspace` names."""
    max_model_len, max_num_seqs = WORKSPACES[case.encoding("context_workspace", "vllm")]
    return max_model_len, max_num_seqs or len(case.sequences)


class _Linear(torch.nn.Module):
    """kv_b_proj as MLAAttention calls it: `(x W^T, None)`, unquantized (quant_method None)."""

    quant_method = None

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor):
        return torch.nn.functional.linear(x, self.weight), None


@lru_cache(maxsize=32)
def _config(num_heads: int, shape: tuple[int, int, int, int], dtype: str, block_size: int, cache_dtype: str,
            max_model_len: int, max_num_seqs: int, calculate_kv_scales: bool):
    """A VllmConfig for a one-layer DeepSeek-V2 with the case's heads and MLA shape (nothing downloaded)."""
    from vllm.config import CacheConfig, SchedulerConfig, VllmConfig

    rank, nope, rope, v_head = shape
    model = local_model({"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                         "num_hidden_layers": 1, "hidden_size": 64 * num_heads, "num_attention_heads": num_heads,
                         "num_key_value_heads": num_heads, "kv_lora_rank": rank, "q_lora_rank": None,
                         "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": v_head,
                         "intermediate_size": 64, "vocab_size": 256, "max_position_embeddings": 1 << 17,
                         "torch_dtype": dtype}, dtype, max_model_len)
    scheduler = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max(max_model_len, 2048),
                                max_model_len=max_model_len, is_encoder_decoder=False)
    return VllmConfig(model_config=model, scheduler_config=scheduler,
                      cache_config=CacheConfig(block_size=block_size, cache_dtype=cache_dtype,
                                               calculate_kv_scales=calculate_kv_scales))


def all_decode(case, threshold: int, uniform: bool) -> bool:
    """Whether the MLA builder sends every sequence of the runner-ordered batch down the decode path
    (`split_decodes_and_prefills`: queries of at most `threshold` tokens, all of one length where the backend's
    decode takes uniform batches only)."""
    lens = [case.sequences[i].query_len for i in runner_order(case, threshold)]
    if uniform:
        return lens[0] <= threshold and all(n in (lens[0], 0) for n in lens)
    return max(lens) <= threshold


class MLALayerBackend(Backend):
    """One vLLM MLA backend class, driven through its own MLAAttention layer."""

    library = "vllm"
    module = "vllm.model_executor.layers.attention.mla_attention"

    def __init__(self, name: str, backend_module: str, cls: str, caps: Capabilities, description: str, *,
                 threshold: int, uniform: bool = False) -> None:
        """`threshold`, `uniform`: the builder's reorder_batch_threshold and whether its decode takes only batches
        of one query length (QueryLenSupport.UNIFORM)."""
        self.name, self.backend_module, self.cls = name, backend_module, cls
        self.caps, self.description = caps, description
        self.threshold, self.uniform = threshold, uniform

    def availability(self) -> str | None:
        return whole_backend_reason(self.backend_module)

    # fp8 caches: the script hands the layer the unquantized latents (and the case's scale); the layer's writer
    # quantizes them (backends/vllm_mla_layer_repro.py)
    repro_quantized = True
    repro_writes_cache = True

    def repro_kernel(self, case) -> str | None:
        return layer_script(case, self.backend_module, self.cls, runner_order(case, self.threshold),
                            MLA_SHAPES[(case.head_size, case.value_size)], workspace(case),
                            KV_DTYPE_STRINGS[case.kv_cache_dtype])

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        if case.kv_cache_dtype.is_fp8 and not all_decode(case, self.threshold, self.uniform):
            reasons.append("an fp8 cache with a prefill: vLLM's MLA prefill attends the new tokens' latents as given "
                           "and the cached context dequantized, a mixed precision the Case does not describe")
        return reasons

    def run(self, inputs: Inputs) -> Actual:
        import importlib

        from vllm.config import set_current_vllm_config
        from vllm.forward_context import set_forward_context
        from vllm.model_executor.layers.attention.mla_attention import MLAAttention
        from vllm.utils.torch_utils import set_default_torch_dtype
        from vllm.v1.kv_cache_interface import MLAAttentionSpec, get_kv_quant_mode

        case, dev = inputs.case, inputs.device
        shape = MLA_SHAPES[(case.head_size, case.value_size)]
        rank, nope, rope, v_head = shape
        heads, dtype = case.num_heads, case.dtype.torch
        kvd = KV_DTYPE_STRINGS[case.kv_cache_dtype]
        backend_cls = getattr(importlib.import_module(self.backend_module), self.cls)
        dynamic = case.cache.quant.dynamic_scales
        cfg = _config(heads, shape, case.dtype.value, case.cache.block_size, kvd, *workspace(case), dynamic)
        proj = exact_projections(heads, nope, v_head, case.seed)
        order = runner_order(case, self.threshold)
        tokens = token_order(case, order).to(dev)
        n, pad = case.num_tokens, inputs.key.shape[0] - case.num_tokens
        weight = proj.kv_b_proj_weight(rank, dtype).to(dev)
        with set_current_vllm_config(cfg):
            cfg.compilation_config.static_forward_context.pop(LAYER, None)  # the config is cached per shape
            with torch.device(dev), set_default_torch_dtype(dtype):  # as model loading builds layers
                layer = MLAAttention(num_heads=heads, scale=case.softmax_scale, qk_nope_head_dim=nope,
                                     qk_rope_head_dim=rope, v_head_dim=v_head, q_lora_rank=None, kv_lora_rank=rank,
                                     kv_b_proj=_Linear(weight),
                                     cache_config=cfg.cache_config, prefix=LAYER, attn_backend=backend_cls)
            layer.process_weights_after_loading(dtype)
            if not dynamic:  # else the layer's first forward computes them (MLAAttention.calc_kv_scales)
                scale, q_scale = float(inputs.cache.k_scale[0]), case.cache.quant.q_fp8_scale
                _load_scales(layer, scale, scale, 1.0 if q_scale is None else q_scale)  # it quantizes an fp8 query
            layer.impl.dcp_world_size = 1  # vLLM reads it from the DCP group of a one-GPU run
            cache = inputs.cache_before_write.clone()
            layer.kv_cache = cache.paged.tensors[0]  # [blocks, block_size, rank + rope]: bind_kv_cache
            cfg.cache_config.num_gpu_blocks = cache.paged.num_blocks
            spec = MLAAttentionSpec(block_size=case.cache.block_size, num_kv_heads=1, head_size=case.head_size,
                                    dtype=layer.kv_cache.dtype if kvd != "auto" else dtype, cache_dtype_str=kvd,
                                    kv_quant_mode=get_kv_quant_mode(kvd))
            builder = backend_cls.get_builder_cls()(spec, [LAYER], cfg, dev)
            metadata = builder.build(common_prefix_len=0, common_attn_metadata=common_metadata(inputs, order))
            # this step's tokens in the reordered batch, then zero rows for the padding slots (-1) as the runner pads
            # them: zeros leave calc_kv_scales' amax to the case's keys, and a padding row the writer stored anyway
            # would still overwrite a canary
            q_latent = torch.cat([inputs.query[tokens], inputs.query.new_zeros(pad, heads, case.head_size)])
            q = torch.cat([proj.uk.spread(q_latent[..., :nope]), q_latent[..., rank:]], dim=-1)
            new = torch.cat([inputs.key[:n][tokens], torch.zeros_like(inputs.key[n:])])[:, 0]  # [tokens + pad, R + P]
            slots = torch.cat([inputs.slot_mapping[:n].to(dev)[tokens], inputs.slot_mapping[n:].to(dev)])
            # the absorbed decode query the layer quantizes itself: its ties are its own (fuzz.cache_write)
            with outputs_of(layer._decode_concat_quant_fp8_op) as quantized, \
                    set_forward_context({LAYER: metadata}, cfg, slot_mapping={LAYER: slots}):
                out = layer(q.contiguous(), new[:, :rank].contiguous(), new[:, None, rank:].contiguous(),
                            output_shape=torch.Size([n + pad, heads * v_head]))
        latent = proj.uv.gather(out[:n].view(n, heads, v_head))
        output = torch.empty_like(latent)
        output[tokens] = latent
        query_fp8 = None
        if quantized and quantized[0].shape[0] >= n:  # an fp8 batch decodes whole (not_supported_reasons)
            query_fp8 = torch.empty_like(quantized[0][:n])
            query_fp8[tokens] = quantized[0][:n]
        if dynamic:  # the latent's one scale (the key's), as calc_kv_scales computed it
            scale = layer_scales(layer)["k_scale"]
            cache = replace(cache, k_scale=scale, v_scale=scale)
        return Actual(output=output, written_cache=cache, query_fp8=query_fp8)


_CAPS = Capabilities(
    devices=frozenset({"cuda"}), dtypes=F16, head_sizes=tuple(sorted({h for h, _ in MLA_SHAPES})),
    head_size_pairs=tuple(MLA_SHAPES), query_zero_dims=ZERO_DIMS, max_kv_heads=1,
    attn_types=frozenset({AttentionType.DECODER}),
    features=frozenset({Feature.MQA, Feature.CONTEXT, Feature.HEAD_SIZE_V, Feature.DYNAMIC_SCALES}),
    kv_layouts=frozenset({KVLayout.MLA_LATENT}), kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3}),
    block_sizes=(16, 32, 64), lse_base=None, requires_cache=True, reads_paged_cache=True, writes_cache=True,
    min_query_len=1, causal_alignments=frozenset({CausalAlignment.BOTTOM_RIGHT}),
    # calc_kv_scales (CacheConfig.calculate_kv_scales): the first forward scales the latent cache by
    # amax(kv_c_normed) / 200, the latent without the rope key (MLAAttention.calc_kv_scales), and an fp8 query by
    # amax(q) / 200; that forward stored every key, so such a case has no cached context
    dynamic_amax_dims=tuple((pair, rank) for pair, (rank, _, _, _) in MLA_SHAPES.items()),
    dynamic_scales_first_forward=True,
    fp8_decode_batches=(1, False),  # TRITON_MLA's decode: one-token queries (SINGLE_ONLY)
    encodings=(("context_workspace", tuple(WORKSPACES)),))


def vllm_mla_layer_backends() -> list[Backend]:
    # TRITON_MLA: TritonMLABackend.supported_dtypes, supported_kv_cache_dtypes (fp8 = e4m3 with one scale, its
    # decode kernel dequantizes; the query stays 16-bit), any head size (get_supported_head_sizes() is empty),
    # kernel block sizes MultipleOf(16); its builder is SINGLE_ONLY: one-token queries decode, the rest prefill
    triton = MLALayerBackend(
        "vllm-layer-triton-mla", "vllm.v1.attention.backends.mla.triton_mla", "TritonMLABackend", _CAPS,
        "vLLM TRITON_MLA under its MLAAttention layer: concat_and_cache_mla, absorbed decode (Triton split-KV), "
        "expanded prefill (FA3) over chunked context, merged by LSE", threshold=1)
    triton.compiled_per = ("dtypes", "head_sizes", "kv_cache_dtypes")  # Triton specializes on Lk, Lv, cache dtype
    # FLASHMLA: kv_lora_rank 512 only (FlashMLA's 576 / 512), kernel block size 64, fp8 e4m3 with the layer's fp8
    # query (supports_quant_query_input) and bfloat16 output (benchmarks/results/vllm/mla-h100-2026-11-25.md); its
    # builder decodes uniform batches of up to 128 queries (QueryLenSupport.UNIFORM, reorder_batch_threshold 128); its
    # fp8 P.V rounds the probabilities to e4m3 unscaled (FLASHMLA_FP8_PROBABILITIES)
    wide = tuple(pair for pair in MLA_SHAPES if pair[0] == 576)
    flashmla = MLALayerBackend(
        "vllm-layer-flashmla", "vllm.v1.attention.backends.mla.flashmla", "FlashMLABackend",
        replace(_CAPS, head_sizes=(576,), head_size_pairs=wide, block_sizes=(64,),
                features=_CAPS.features | {Feature.Q_FP8}, fp8_query_only=True,
                fp8_model_dtypes=frozenset({DType.BFLOAT16}), fp8_decode_batches=(128, True),
                fp8_probabilities=FLASHMLA_FP8_PROBABILITIES),
        "vLLM FLASHMLA under its MLAAttention layer: concat_and_cache_mla, absorbed decode (FlashMLA, its tile "
        "scheduler; fp8 with the layer's fp8 query), expanded prefill (FA3) over chunked context", threshold=128,
        uniform=True)
    # FLASH_ATTN_MLA: 16-bit caches only ("FP8 FlashAttention MLA not yet supported"), 576 / 512, MultipleOf(16);
    # its builder decodes varlen batches of up to 512 queries (QueryLenSupport.VARLEN, threshold 512)
    fa3 = MLALayerBackend(
        "vllm-layer-flash-attn-mla", "vllm.v1.attention.backends.mla.flashattn_mla", "FlashAttnMLABackend",
        replace(_CAPS, head_sizes=(576,), head_size_pairs=wide, kv_cache_dtypes=frozenset({KVCacheDType.AUTO}),
                features=_CAPS.features - {Feature.DYNAMIC_SCALES}),  # calc_kv_scales scales fp8 caches only
        "vLLM FLASH_ATTN_MLA under its MLAAttention layer: concat_and_cache_mla, absorbed decode (FA3 with q_v, its "
        "AOT scheduler metadata), expanded prefill (FA3) over chunked context", threshold=512)
    return [triton, flashmla, fa3]
