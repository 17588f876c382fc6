"""Multi-head latent attention (DeepSeek's MLA) in its two forms, which must agree.

Per token the cache holds a latent c [R] (kv_lora_rank) and a rope key k_pe [P], shared by every
head: the `mla_latent` layout stores [c, k_pe] as one row. Per head h, with up-projections
W_UK [R, H, Dn] and W_UV [R, H, Dv] and a query split into q_nope [Dn] and q_pe [P]:

  expanded:  k_h = [c W_UK_h, k_pe], v_h = c W_UV_h, o_h = softmax(q_h . k_h * s) v_h
  absorbed:  q'_h = [W_UK_h q_nope_h, q_pe_h] (size R + P), MQA over keys [c, k_pe] and values c,
             o_h = (softmax(q'_h . [c, k_pe] * s) c) W_UV_h

q_nope . (c W_UK) = (W_UK q_nope) . c, so the logits are the same; s = (Dn + P) ** -0.5 in both.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .attention import attend_sequence
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
    heads = q_nope.shape[1]
    k_nope = torch.einsum("tr,rhd->thd", latent, w.w_uk)
    k = torch.cat([k_nope, k_pe[:, None, :].expand(-1, heads, -1)], dim=-1)
    v = torch.einsum("tr,rhd->thd", latent, w.w_uv)
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
