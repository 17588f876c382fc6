"""Multi-head latent attention (DeepSeek's MLA) in its two forms, which must agree.

Per token the cache holds a latent c [R] (kv_lora_rank) and a rope key k_pe [P], shared by every
head: the `mla_latent` layout stores [c, k_pe] as one row. Per head h, with up-projections
W_UK [R, H, Dn] and W_UV [R, H, Dv] and a query split into q_nope [Dn] and q_pe [P]:

  expanded:  k_h = [c W_UK_h, k_pe], v_h = c W_UV_h, o_h = softmax(q_h . k_h * s) v_h
  absorbed:  q'_h = [W_UK_h q_nope_h, q_pe_h] (size R + P), MQA over keys [c, k_pe] and values c,
             o_h = (softmax(q'_h . [c, k_pe] * s) c) W_UV_h

q_nope . (c W_UK) = (W_UK q_nope) . c, so the logits are the same; s = (Dn + P) ** -0.5 in both.

vLLM (0.26, `model_executor/layers/attention/mla_attention.py`) runs the absorbed form for decodes over
its latent cache and the expanded form for prefills, where the cached context is up-projected chunk by
chunk (every new token sees all of it), the new tokens attend causally among themselves, and the states
are merged by their LSE (`mla_prefill_chunked`). Its cache writer (`concat_and_cache_mla`) stores each
token's [c, k_pe] as one row, fp8 caches divided by one per-tensor scale (`latent_cache_rows`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .attention import attend_sequence
from .case import KVCacheDType
from .merge import merge_attn_states
from .quant import dequantize, quantize_fp8
from .visibility import causal_visible


@dataclass(frozen=True)
class MLAWeights:
    w_uk: Tensor  # [R, H, Dn]
    w_uv: Tensor  # [R, H, Dv]

    @property
    def kv_lora_rank(self) -> int:
        return self.w_uk.shape[0]


def _causal(num_q: int, num_k: int) -> Tensor:
    q_pos = torch.arange(num_k - num_q, num_k)  # bottom-right: the last query sees every key
    return causal_visible(q_pos[:, None], torch.arange(num_k)[None, :])[None]


def mla_expanded(q_nope: Tensor, q_pe: Tensor, latent: Tensor, k_pe: Tensor, w: MLAWeights,
                 scale: float) -> tuple[Tensor, Tensor]:
    """Prefill form: up-project keys and values per head, then ordinary causal multi-head attention.

    q_nope [q, H, Dn], q_pe [q, H, P], latent [kv, R], k_pe [kv, P]. Returns ([q, H, Dv], lse [q, H]).
    """
    k, v = _up_project(latent, k_pe, w)
    q = torch.cat([q_nope, q_pe], dim=-1)
    return attend_sequence(q, k, v, _causal(q.shape[0], k.shape[0]), scale=scale)


def absorb_query(q_nope: Tensor, q_pe: Tensor, w: MLAWeights) -> Tensor:
    """[q, H, R + P]: the nope part projected into the latent space, the rope part kept."""
    return torch.cat([torch.einsum("qhd,rhd->qhr", q_nope, w.w_uk), q_pe], dim=-1)


def mla_absorbed(q_nope: Tensor, q_pe: Tensor, latent_rows: Tensor, w: MLAWeights,
                 scale: float) -> tuple[Tensor, Tensor]:
    """Decode form: MQA in the latent space over cache rows [kv, R + P], then up-project the output."""
    r = w.kv_lora_rank
    q = absorb_query(q_nope, q_pe, w)
    key = latent_rows[:, None, :]  # one kv head
    value = latent_rows[:, None, :r]  # the value is the latent itself
    out_latent, lse = attend_sequence(q, key, value, _causal(q.shape[0], key.shape[0]), scale=scale)
    return torch.einsum("qhr,rhd->qhd", out_latent, w.w_uv), lse


def _up_project(latent: Tensor, k_pe: Tensor, w: MLAWeights) -> tuple[Tensor, Tensor]:
    """Per-head keys [kv, H, Dn + P] and values [kv, H, Dv] from latent rows and the shared rope key."""
    heads = w.w_uk.shape[1]
    k_nope = torch.einsum("tr,rhd->thd", latent, w.w_uk)
    k = torch.cat([k_nope, k_pe[:, None, :].expand(-1, heads, -1)], dim=-1)
    return k, torch.einsum("tr,rhd->thd", latent, w.w_uv)


def mla_prefill_chunked(q_nope: Tensor, q_pe: Tensor, latent: Tensor, k_pe: Tensor, w: MLAWeights, scale: float,
                        chunk: int) -> tuple[Tensor, Tensor]:
    """vLLM's MLA prefill: the context (the keys before the new tokens) up-projected `chunk` keys at a time,
    each chunk seen whole by every new token; the new tokens causal among themselves; merged by LSE.

    Shapes as `mla_expanded`; the new tokens are the last q of the kv keys. Returns ([q, H, Dv], lse [q, H]).
    """
    num_q, num_k = q_nope.shape[0], latent.shape[0]
    context = num_k - num_q
    q = torch.cat([q_nope, q_pe], dim=-1)
    k_new, v_new = _up_project(latent[context:], k_pe[context:], w)
    out, lse = attend_sequence(q, k_new, v_new, _causal(num_q, num_q), scale=scale)
    for start in range(0, context, chunk):
        end = min(context, start + chunk)
        k, v = _up_project(latent[start:end], k_pe[start:end], w)
        every = torch.ones(1, num_q, end - start, dtype=torch.bool)
        part = attend_sequence(q, k, v, every, scale=scale, q_pos=torch.arange(num_q) + context,
                               k_pos=torch.arange(start, end))
        out, lse = merge_attn_states(part[0], part[1], out, lse)
    return out, lse


def latent_cache_rows(kv_c: Tensor, k_pe: Tensor, fmt: KVCacheDType, scale: float) -> Tensor:
    """What vLLM's concat_and_cache_mla stores per token: [c, k_pe] as one row of R + P elements;
    an fp8 cache stores (row / scale) in fp8, saturated (one per-tensor scale for both parts)."""
    row = torch.cat([kv_c, k_pe], dim=-1)
    return quantize_fp8(row, scale, fmt) if fmt.is_fp8 else row


def latent_rows_value(stored: Tensor, fmt: KVCacheDType, scale: float) -> Tensor:
    """The float64 rows a kernel attends over: fp8 codes times the scale, 16-bit rows as they are."""
    return dequantize(stored, scale) if fmt.is_fp8 else stored.to(torch.float64)
