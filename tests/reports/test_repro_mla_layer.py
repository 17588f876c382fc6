"""`attnref repro` for vLLM's MLA layers: the script's plain-torch parts (projections, the runner's order, its
reference over fp8 latents with one scale) checked on the CPU; its kernel needs vLLM on a GPU."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backends.registry import get
from backends.vllm_batch import runner_order, token_order
from backends.vllm_mla_layer import MLA_SHAPES
from fuzz.strategies import Limits
from reference.case import KVCacheDType
from reference.inputs import materialize
from reports.repro import write_repro
from tests.reports.test_repro import assert_script_reference_is_the_oracle
from tests.repro_scripts import drawn_cases, load

LAYERS = ["vllm-layer-triton-mla", "vllm-layer-flashmla", "vllm-layer-flash-attn-mla"]
LIMITS = Limits(max_sequences=3, max_context=40, max_query=4)


@pytest.mark.parametrize("name", LAYERS)
def test_an_mla_layer_script_s_reference_is_the_oracle(name):
    """Over each layer's declaration (fp8 latents with the case's scale or calc_kv_scales' one scale, the query the
    layer quantizes itself): the script's float64 reference equals the oracle."""
    drawn = drawn_cases(get(name).caps, LIMITS, 10)
    if name != "vllm-layer-flash-attn-mla":  # calc_kv_scales scales fp8 caches only
        dynamic = drawn_cases(get(name).caps, replace(LIMITS, kv_cache_dtypes=("fp8_e4m3",),
                                                      features_on=("dynamic_scales",)), 12)
        dynamic = [c for c in dynamic if c.cache.quant.dynamic_scales]  # the cases without cached context
        assert dynamic
        drawn += dynamic[:4]
    for case in drawn:
        assert_script_reference_is_the_oracle(case, name)


@pytest.mark.parametrize("name", LAYERS)
def test_the_layer_s_algebra_over_the_script_s_weights_is_the_case(name):
    """What vLLM's MLAAttention does with kv_b_proj (its transpose viewed [rank, H, qk_nope + v_head], split into
    W_UK and W_UV): the absorbed query q_nope W_UK is the case's query, and a latent output o, through W_UV and the
    script's gather, is o's first v_head dims, exactly, in the model's dtype; the batch in the runner's order."""
    backend = get(name)
    for case in drawn_cases(backend.caps, LIMITS, 6):
        ns = load(write_repro(case, name), device="cpu")
        rank, nope, _, v_head = MLA_SHAPES[(case.head_size, case.value_size)]
        assert ns["MLA"][0] == rank and ns["ORDER"] == runner_order(case, backend.threshold)
        assert torch.equal(ns["runner_tokens"](), token_order(case, ns["ORDER"]))
        uk, uv = ns["projections"]()
        dtype = case.dtype.torch
        kv_b = ns["kv_b_proj_weight"](uk, uv).to(dtype).T.reshape(rank, case.num_heads, nope + v_head)
        w_uk, w_uv = kv_b[..., :nope], kv_b[..., nope:]
        q = materialize(case).query  # zero past qk_nope in the latent (Values.query_zero_dims)
        layer_q = ns["layer_query"](q, uk)
        assert layer_q.shape[-1] == nope + case.head_size - rank
        absorbed = torch.einsum("thn,rhn->thr", layer_q[..., :nope].float(), w_uk.float()).to(dtype)
        assert torch.equal(absorbed, q[..., :rank]) and torch.equal(layer_q[..., nope:], q[..., rank:])
        latent_out = torch.randn(q.shape[0], case.num_heads, rank, generator=torch.Generator().manual_seed(1)).to(dtype)
        through_w_uv = torch.einsum("thr,rhv->thv", latent_out.float(), w_uv.float()).to(dtype)
        assert torch.equal(ns["gather"](through_w_uv, uv), latent_out[..., :v_head])


def test_the_script_builds_vllm_s_mla_layer_as_the_case_says():
    backend = get("vllm-layer-flashmla")
    fp8 = [c for c in drawn_cases(backend.caps, LIMITS, 40) if c.kv_cache_dtype == KVCacheDType.FP8_E4M3]
    assert fp8
    for case in fp8[:4]:
        text = write_repro(case, backend.name)
        dynamic = case.cache.quant.dynamic_scales
        assert f"calculate_kv_scales={dynamic}" in text and "MLAAttention(" in text
        assert "from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend as Backend" in text
        assert 'CACHE_DTYPE = "fp8_e4m3"' in text and "ops.concat_and_cache_mla(" in text
        workspace = case.encoding("context_workspace", "vllm")
        assert f"max_num_seqs={len(case.sequences) if workspace == 'small' else 256}" in text
