"""Up-projections under which a whole MLA layer computes exactly the absorbed case it is judged on.

vLLM's MLA layer takes the non-absorbed query q [tokens, H, qk_nope + rope] and the model's `kv_b_proj`
weights; its decode absorbs the query (q_nope W_UK, reference/mla.py) and up-projects the latent output
(W_UV), its prefill up-projects the latent keys and values. attnref judges the absorbed case (one latent
head, key [c, k_pe], value the latent's first v_head dimensions), so the harness makes W_UK and W_UV
*signed permutations* of the latent's first qk_nope (v_head) dimensions, the other rows 0: per head h,
latent dimension r < size goes to column index[h, r] with sign[h, r]. Then, for a case whose absorbed query
is 0 past the first qk_nope latent dimensions (Values.query_zero_dims),

  absorbed query  W_UK_h q_nope = gather(q_nope) = q'[:qk_nope]   when q_nope = spread(q'[:qk_nope])
  prefill key     c W_UK_h = spread(c[:qk_nope]),  q_nope . spread(c[:qk_nope]) = q' . c
  output          o W_UV_h = spread(o[:v_head]),   gather(output) = o[:v_head]

and every product the layer computes has one non-zero term, so the maps are exact in 16-bit arithmetic
too: the layer's answer, gathered back, is the case's. Heads get different permutations, so a head mix-up
or a transposed W_UK_T shows.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SignedPermutation:
    """Per head, latent dimension r < size -> column index[h, r] (a permutation of range(size)), sign[h, r] = +-1."""

    index: Tensor  # [H, size] int64
    sign: Tensor  # [H, size] float64

    @property
    def size(self) -> int:
        return self.index.shape[1]

    def matrix(self, rank: int) -> Tensor:
        """[rank, H, size] float64: the weight as vLLM's kv_b_proj slices it (W_UK or W_UV); rows >= size are 0."""
        heads = self.index.shape[0]
        w = torch.zeros(rank, heads, self.size, dtype=torch.float64, device="cpu")
        r = torch.arange(self.size, device="cpu")
        for h in range(heads):
            w[r, h, self.index[h]] = self.sign[h]
        return w

    def spread(self, x: Tensor) -> Tensor:
        """[..., H, size] -> [..., H, size]: the latent dimensions x into the weight's columns, exactly."""
        out = torch.empty_like(x)
        out.scatter_(-1, self.index.to(x.device).expand(*x.shape), x * self.sign.to(x.device, x.dtype))
        return out

    def gather(self, y: Tensor) -> Tensor:
        """[..., H, size] -> [..., H, size]: the latent dimensions back out of y = spread(x), exactly."""
        index = self.index.to(y.device).expand(*y.shape)
        return y.gather(-1, index) * self.sign.to(y.device, y.dtype)


def signed_permutation(heads: int, size: int, gen: torch.Generator) -> SignedPermutation:
    index = torch.stack([torch.randperm(size, generator=gen) for _ in range(heads)])
    sign = torch.randint(0, 2, (heads, size), generator=gen).to(torch.float64) * 2 - 1
    return SignedPermutation(index=index, sign=sign)


@dataclass(frozen=True)
class ExactProjections:
    """W_UK (latent -> qk_nope) and W_UV (latent -> v_head) for one case."""

    uk: SignedPermutation
    uv: SignedPermutation

    def kv_b_proj_weight(self, rank: int, dtype: torch.dtype) -> Tensor:
        """kv_b_proj's [H * (qk_nope + v_head), rank] weight, whose transpose vLLM views as [rank, H, qk_nope +
        v_head] and splits into W_UK, W_UV (MLAAttention.process_weights_after_loading)."""
        both = torch.cat([self.uk.matrix(rank), self.uv.matrix(rank)], dim=-1)  # [rank, H, nope + v]
        return both.reshape(rank, -1).T.contiguous().to(dtype)


def exact_projections(heads: int, qk_nope: int, v_head: int, seed: int) -> ExactProjections:
    """The case's projections, drawn from its seed (the same case: the same weights)."""
    gen = torch.Generator().manual_seed(seed ^ 0x4D4C41)
    return ExactProjections(uk=signed_permutation(heads, qk_nope, gen), uv=signed_permutation(heads, v_head, gen))
