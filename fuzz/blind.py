"""The blind-case probe: would this case's tolerance notice a mask that is off by one key?"""
from __future__ import annotations

import torch
from torch import Tensor


def shift_by_one_key(mask: Tensor, num_keys: Tensor | None = None) -> Tensor:
    """Each row sees one key more (the first hidden key after its last visible one) or, where none
    is left, one key fewer (its last visible key, if it has two or more). [..., q, k] -> same.

    `num_keys` (broadcastable to mask.shape[:-1]): the row's real keys when the mask is padded past them
    (the packed oracle's [B, H|1, Q, K]); a key at or past it is never added.

    Written as comparisons with each row's last visible key, not as a gather and a scatter at it: 18 torch operations
    against 26, on every case the blind check runs on (tests/fuzz/test_tolerance_and_blind.py holds it to the rule
    read row by row)."""
    if mask.numel() == 0:
        return mask
    k = mask.shape[-1]
    idx = torch.arange(k, device=mask.device)
    last = torch.where(mask, idx, -1).amax(-1, keepdim=True)  # [..., q, 1]: -1 where the row sees nothing
    nxt = last + 1
    add = nxt < (k if num_keys is None else num_keys[..., None])
    drop = ~add & (mask.sum(-1, keepdim=True) >= 2)
    return (mask | ((idx == nxt) & add)) & ~((idx == last) & drop)
