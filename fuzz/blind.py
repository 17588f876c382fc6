"""The blind-case probe: would this case's tolerance notice a mask that is off by one key?"""
from __future__ import annotations

import torch
from torch import Tensor


def shift_by_one_key(mask: Tensor, num_keys: Tensor | None = None) -> Tensor:
    """Each row sees one key more (the first hidden key after its last visible one) or, where none
    is left, one key fewer (its last visible key, if it has two or more). [..., q, k] -> same.

    `num_keys` (broadcastable to mask.shape[:-1]): the row's real keys when the mask is padded past them
    (the packed oracle's [B, H|1, Q, K]); a key at or past it is never added."""
    if mask.numel() == 0:
        return mask
    k = mask.shape[-1]
    idx = torch.arange(k, device=mask.device)
    last = torch.where(mask, idx, torch.full_like(idx, -1)).amax(-1)  # [..., q]
    nxt = last + 1
    out = mask.clone()
    can_add = nxt < (k if num_keys is None else num_keys)
    out.scatter_(-1, nxt.clamp(max=k - 1)[..., None], (can_add[..., None] | out.gather(-1, nxt.clamp(max=k - 1)[..., None])))
    can_drop = ~can_add & (mask.sum(-1) >= 2)
    drop_at = last.clamp(min=0)[..., None]
    out.scatter_(-1, drop_at, out.gather(-1, drop_at) & ~can_drop[..., None])
    return out
