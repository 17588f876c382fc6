"""`attnref repro` template for vLLM's MLA backends under their own MLAAttention layer (backends/vllm_mla_layer.py).

The script builds what a DeepSeek-V2 model's attention is, with vLLM's public API only: a one-layer config in a
temporary folder, `kv_b_proj` weights whose W_UK / W_UV are signed permutations of the latent's first qk_nope /
v_head dimensions (backends/mla_projections.py says why the layer then computes the case exactly), the layer and
its `process_weights_after_loading`, a latent cache with the context stored by `concat_and_cache_mla` (the layer's
own writer), the batch in the model runner's order, the builder's metadata and the layer's forward. The kernel is
handed the case's absorbed query and latent rows; it gives the layer the non-absorbed query and gathers the case's
output back out of the layer's v_head columns. fp8 caches: the layer quantizes (with the case's scale, or its own
from calc_kv_scales), and the script's reference reads back its own store().
"""
from __future__ import annotations

from reference.case import Case

# The helpers below are plain torch and run without vLLM (tests/reports/test_repro_mla_layer.py checks them against
# the layer's own algebra); `kernel` needs vLLM on a GPU.
PROJECTIONS = '''
def signed_permutations(size, g):
    """Per head, latent dimension r < size -> column index[h, r] with sign[h, r] (a signed permutation)."""
    index = torch.stack([torch.randperm(size, generator=g, device="cpu") for _ in range(H)])
    sign = torch.randint(0, 2, (H, size), generator=g, device="cpu").double() * 2 - 1
    return index, sign


def projections():
    """(W_UK's, W_UV's) signed permutations, from the case's seed."""
    g = torch.Generator().manual_seed(SEED)
    return signed_permutations(MLA[1], g), signed_permutations(MLA[3], g)


def kv_b_proj_weight(uk, uv):
    """kv_b_proj's [H * (qk_nope + v_head), rank] weight: vLLM views its transpose as [rank, H, qk_nope + v_head]
    and splits it into W_UK and W_UV; latent dimensions past qk_nope (v_head) have no column."""
    rank, nope, _, v_head = MLA
    w = torch.zeros(rank, H, nope + v_head, dtype=torch.float64, device="cpu")
    for h in range(H):
        w[torch.arange(nope, device="cpu"), h, uk[0][h]] = uk[1][h]
        w[torch.arange(v_head, device="cpu"), h, nope + uv[0][h]] = uv[1][h]
    return w.reshape(rank, -1).T.contiguous()


def spread(x, perm):
    """[..., H, size]: latent dimension r to column index[h, r], times sign[h, r] (exact in any dtype)."""
    index, sign = perm
    return torch.zeros_like(x).scatter_(-1, index.to(x.device).expand(*x.shape), x * sign.to(x.device, x.dtype))


def gather(y, perm):
    """The inverse of spread."""
    index, sign = perm
    return y.gather(-1, index.to(y.device).expand(*y.shape)) * sign.to(y.device, y.dtype)


def layer_query(q, uk):
    """The non-absorbed query [tokens, H, qk_nope + rope] whose absorption (q_nope W_UK) is the case's query."""
    rank, nope = MLA[0], MLA[1]
    return torch.cat([spread(q[..., :nope], uk), q[..., rank:]], dim=-1)


def runner_tokens():
    """The query rows of the sequences taken in ORDER (the batch as the model runner hands it)."""
    starts = cu_seqlens(0).tolist()
    return torch.cat([torch.arange(starts[i], starts[i + 1], device="cpu") for i in ORDER])
'''


def layer(case: Case, module: str, cls: str, order: list[int], shape: tuple[int, int, int, int],
          workspace: tuple[int, int], kv_dtype: str) -> str:
    """The script: `order` the runner's sequence order, `shape` (kv_lora_rank, qk_nope, rope, v_head), `workspace`
    (max_model_len, max_num_seqs) of the config."""
    dynamic = case.cache.quant.dynamic_scales
    max_model_len, max_num_seqs = workspace
    return f'''
MLA = {shape}  # kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
BLOCK = {case.cache.block_size}  # tokens per page
CACHE_DTYPE = "{kv_dtype}"  # vLLM's cache_dtype string
ORDER = {order}  # the model runner's order: decodes, then extends, then first chunks
LAYER = "model.layers.0.self_attn.attn"
{PROJECTIONS}

def deepseek_config(folder):
    """A one-layer DeepSeek-V2 with this case's heads and MLA shape (nothing is downloaded); max_model_len
    {max_model_len} and max_num_seqs {max_num_seqs} size the context workspace, which the prefill gathers chunk by chunk."""
    import json
    import os

    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    rank, nope, rope, v_head = MLA
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({{"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "num_hidden_layers": 1,
                   "hidden_size": 64 * H, "num_attention_heads": H, "num_key_value_heads": H, "kv_lora_rank": rank,
                   "q_lora_rank": None, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": v_head,
                   "intermediate_size": 64, "vocab_size": 256, "max_position_embeddings": 1 << 17,
                   "torch_dtype": "{case.dtype.value}"}}, f)
    model = ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="{case.dtype.value}",
                        max_model_len={max_model_len})
    scheduler = SchedulerConfig(max_num_seqs={max_num_seqs}, max_num_batched_tokens={max(max_model_len, 2048)},
                                max_model_len={max_model_len}, is_encoder_decoder=False)
    return VllmConfig(model_config=model, scheduler_config=scheduler,
                      cache_config=CacheConfig(block_size=BLOCK, cache_dtype=CACHE_DTYPE,
                                               calculate_kv_scales={dynamic}))


class KvBProj(torch.nn.Module):
    """kv_b_proj as MLAAttention calls it: (x W^T, None), unquantized."""

    quant_method = None

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight), None


def kernel(q, ks, vs, k_scales=None, v_scales=None):
    """vLLM's {cls} under its MLAAttention layer, as a DeepSeek model's forward runs it."""
    import tempfile

    from vllm import _custom_ops as ops
    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE, set_default_torch_dtype
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, get_kv_quant_mode
    from {module} import {cls} as Backend

    rank, nope, rope, v_head = MLA
    cfg = deepseek_config(tempfile.mkdtemp())
    uk, uv = projections()
    weight = kv_b_proj_weight(uk, uv).to(DEVICE, DTYPE)
    with set_current_vllm_config(cfg):
        with torch.device(DEVICE), set_default_torch_dtype(DTYPE):  # as model loading builds layers
            layer = MLAAttention(num_heads=H, scale=SCALE, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                                 v_head_dim=v_head, q_lora_rank=None, kv_lora_rank=rank,
                                 kv_b_proj=KvBProj(weight),
                                 cache_config=cfg.cache_config, prefix=LAYER, attn_backend=Backend)
        layer.process_weights_after_loading(DTYPE)  # W_UK_T, W_UV from kv_b_proj
        if k_scales is not None and not {dynamic}:  # the checkpoint's scales (else calc_kv_scales computes them)
            q_scale = globals().get("Q_FP8_SCALE") or 1.0
            for name, value in (("k", float(k_scales[0].reshape(-1)[0])), ("v", float(k_scales[0].reshape(-1)[0])),
                                ("q", q_scale)):
                getattr(layer, f"_{{name}}_scale").fill_(value)  # device tensor, float, host copy
                setattr(layer, f"_{{name}}_scale_float", value)
                if hasattr(layer, f"_{{name}}_scale_cpu"):
                    getattr(layer, f"_{{name}}_scale_cpu").fill_(value)
        layer.impl.dcp_world_size = 1  # a one-GPU run
        table, pages, seq_lens = block_table(BLOCK)
        num_blocks = 1 + sum(pages)
        storage = DTYPE if CACHE_DTYPE == "auto" else STR_DTYPE_TO_TORCH_DTYPE[CACHE_DTYPE]
        # unwritten slots: NaN (0x7F in an fp8 cache), so a read past a sequence shows
        kv_cache = torch.full((num_blocks, BLOCK, D), float("nan") if storage.itemsize > 1 else 0x7F,
                              device=DEVICE).to(storage)
        layer.kv_cache = kv_cache  # bind_kv_cache
        cfg.cache_config.num_gpu_blocks = num_blocks
        slots = [table[i, torch.arange(kv_len, device=DEVICE) // BLOCK].long() * BLOCK
                 + torch.arange(kv_len, device=DEVICE) % BLOCK for i, (_, kv_len, _) in enumerate(SEQS)]
        context = [kv_len - q_len for q_len, kv_len, _ in SEQS]
        if any(context):  # earlier steps stored the context through the layer's writer
            rows = torch.cat([k[:c, 0] for k, c in zip(ks, context)])
            ops.concat_and_cache_mla(rows[:, :rank].contiguous(), rows[:, rank:].contiguous(), kv_cache,
                                     torch.cat([s[:c] for s, c in zip(slots, context)]), CACHE_DTYPE, layer._k_scale)
        tokens = runner_tokens().to(DEVICE)
        new = torch.cat([ks[i][context[i]:, 0] for i in ORDER])  # this step's latent rows [c, k_pe]
        new_slots = torch.cat([slots[i][context[i]:] for i in ORDER])
        seqs = [SEQS[i] for i in ORDER]
        qsl = torch.tensor([0] + [sum(s[0] for s in seqs[:j + 1]) for j in range(len(seqs))], dtype=torch.int32)
        pick = torch.tensor(ORDER, device=DEVICE)
        lens = seq_lens[pick].cpu()
        common = CommonAttentionMetadata(
            query_start_loc=qsl.to(DEVICE), query_start_loc_cpu=qsl, seq_lens=seq_lens[pick], num_reqs=len(seqs),
            num_actual_tokens=q.shape[0], max_query_len=max(max(s[0] for s in SEQS), 1),
            max_seq_len=max(max(s[1] for s in SEQS), 1), block_table_tensor=table[pick], slot_mapping=new_slots,
            causal=True, seq_lens_cpu_upper_bound=lens, _seq_lens_cpu=lens,
            _num_computed_tokens_cpu=torch.tensor([context[i] for i in ORDER], dtype=torch.int32),
            is_prefilling=torch.tensor([s[0] > 1 for s in seqs], device=DEVICE))
        spec = MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=D, dtype=storage,
                                cache_dtype_str=CACHE_DTYPE, kv_quant_mode=get_kv_quant_mode(CACHE_DTYPE))
        metadata = Backend.get_builder_cls()(spec, [LAYER], cfg, DEVICE).build(common_prefix_len=0,
                                                                                common_attn_metadata=common)
        with set_forward_context({{LAYER: metadata}}, cfg, slot_mapping={{LAYER: new_slots}}):
            out = layer(layer_query(q[tokens], uk).contiguous(), new[:, :rank].contiguous(),
                        new[:, None, rank:].contiguous(), output_shape=torch.Size([q.shape[0], H * v_head]))
    latent = gather(out.view(q.shape[0], H, v_head), uv)  # the case's output: the latent's first v_head dims
    result = torch.empty_like(latent)
    result[tokens] = latent
    return result, None
'''
