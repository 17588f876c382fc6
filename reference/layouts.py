"""Paged KV-cache layouts: allocate, write through slot_mapping, gather through a block table.

Every layout exposes a *canonical view* of its key and value storage, `[num_blocks, block_size,
H_kv, ...]`, that aliases the cache's memory; writes and gathers go through that view, so layouts
differ only in data (shape and permutation), never in indexing code.

| layout          | physical shape                                  | key view from it        |
|-----------------|-------------------------------------------------|-------------------------|
| flash_nhd       | [2, num_blocks, block_size, H_kv, D]            | cache[0]                |
| flash_hnd       | [2, num_blocks, H_kv, block_size, D]            | cache[0].permute(0,2,1,3) |
| flashinfer_nhd  | [num_blocks, 2, block_size, H_kv, D]            | cache[:, 0]             |
| flashinfer_hnd  | [num_blocks, 2, H_kv, block_size, D]            | cache[:, 0].permute(0,2,1,3) |
| paged_v0        | key [nb, H_kv, D/x, bs, x], value [nb, H_kv, D, bs], x = 16 bytes / element |
| mla_latent      | [num_blocks, block_size, kv_lora_rank + rope_dim] | cache[:, :, None, :]  (value: its first D_v) |
| vllm_nhd        | logical [num_blocks, H_kv, block_size, 2·D] (vLLM 0.26's `get_kv_cache_shape`), memory [nb, bs, H_kv, 2·D] | cache.transpose(1, 2)[..., :D] (value: [..., D:]) |
| vllm_hnd        | the same logical shape, memory [nb, H_kv, bs, 2·D] (contiguous)   | as vllm_nhd |

With a leading layers dimension (vLLM's `get_kv_cache_stride_order(include_num_layers_dimension=True)`)
one tensor holds L layers. Its logical shape puts layers first, its memory puts blocks first:

| layout     | logical shape                  | memory order (stride order)           |
|------------|--------------------------------|---------------------------------------|
| flash_nhd  | [L, 2, nb, bs, H_kv, D]        | [nb, L, 2, bs, H_kv, D]  (2, 0, 1, 3, 4, 5) |
| flash_hnd  | [L, 2, nb, H_kv, bs, D]        | [nb, H_kv, L, 2, bs, D]  (2, 3, 0, 1, 4, 5) |

A layer's tensor is `logical[layer]`: the same shape as the unlayered layout, with strided memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .case import KVLayout


@dataclass(frozen=True)
class PagedCache:
    """The physical cache tensors of one layer (key and value may share one tensor)."""

    layout: KVLayout
    tensors: tuple[Tensor, ...]  # one tensor, or (key, value) for paged_v0: what a kernel is handed
    head_size: int
    head_size_v: int
    storage: Tensor | None = None  # layered caches: the whole [L, ...] logical tensor (aliases tensors)
    layer: int = 0

    @property
    def num_blocks(self) -> int:
        return self.key_view().shape[0]

    @property
    def block_size(self) -> int:
        return self.key_view().shape[1]

    def key_view(self) -> Tensor:
        """Canonical [num_blocks, block_size, H_kv, D] view of the keys (aliases the cache)."""
        return _views(self)[0]

    def value_view(self) -> Tensor:
        """Canonical [num_blocks, block_size, H_kv, D_v] view of the values (aliases the cache)."""
        return _views(self)[1]

    def clone(self) -> "PagedCache":
        return self.with_storage(lambda t: t.clone())

    def with_storage(self, fn) -> "PagedCache":
        """A cache whose tensors are fn(tensor), keeping a layered cache's aliasing and memory order."""
        if self.storage is None:
            return PagedCache(self.layout, tuple(fn(t) for t in self.tensors), self.head_size, self.head_size_v)
        physical = fn(self.storage.permute(*_LAYERED_ORDER[self.layout]))  # copy in memory order
        storage = physical.permute(*inverse_permutation(_LAYERED_ORDER[self.layout]))
        return PagedCache(self.layout, (storage[self.layer],), self.head_size, self.head_size_v, storage, self.layer)


# Memory order of a layered cache, as a permutation of its logical [L, 2, nb, ...] dims.
_LAYERED_ORDER = {KVLayout.FLASH_NHD: (2, 0, 1, 3, 4, 5), KVLayout.FLASH_HND: (2, 3, 0, 1, 4, 5)}


def inverse_permutation(perm: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes `perm` (t.permute(perm).permute(inverse_permutation(perm)) is t)."""
    return tuple(sorted(range(len(perm)), key=lambda i: perm[i]))


def v0_split(head_size: int, element_bytes: int) -> int:
    """x of the v0 PagedAttention key layout: 16 bytes worth of elements."""
    return max(1, 16 // element_bytes)


def allocate(layout: KVLayout, num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
             head_size_v: int, key_dtype: torch.dtype, value_dtype: torch.dtype | None = None,
             device: torch.device | str = "cpu", layers: int = 0, layer: int = 0,
             finite: bool = False) -> PagedCache:
    """A cache of `layout` whose every element is a canary: NaN (0x7F bytes for fp8, 127 for int8).

    Key and value of different widths or dtypes cannot share one stacked tensor: they get two.
    layers >= 1 allocates every layer in one tensor (memory in vLLM's stride order) and hands out `layer`.
    """
    value_dtype = value_dtype or key_dtype
    nb, bs, h, d, dv = num_blocks, block_size, num_kv_heads, head_size, head_size_v
    if layers:
        logical = (layers, 2, nb, bs, h, d) if layout == KVLayout.FLASH_NHD else (layers, 2, nb, h, bs, d)
        order = _LAYERED_ORDER[layout]
        physical = canaries(tuple(logical[i] for i in order), key_dtype, device, finite)
        storage = physical.permute(*inverse_permutation(order))
        return PagedCache(layout, (storage[layer],), d, dv, storage, layer)
    if layout == KVLayout.MLA_LATENT:
        return PagedCache(layout, (canaries((nb, bs, d), key_dtype, device, finite),), d, dv)
    if layout == KVLayout.PAGED_V0:
        x = v0_split(d, key_dtype.itemsize)
        key = canaries((nb, h, d // x, bs, x), key_dtype, device, finite)
        value = canaries((nb, h, dv, bs), value_dtype, device, finite)
        return PagedCache(layout, (key, value), d, dv)
    if layout in (KVLayout.VLLM_NHD, KVLayout.VLLM_HND):  # K and V packed in the last dimension
        if layout == KVLayout.VLLM_NHD:
            packed = canaries((nb, bs, h, 2 * d), key_dtype, device, finite).transpose(1, 2)
        else:
            packed = canaries((nb, h, bs, 2 * d), key_dtype, device, finite)
        return PagedCache(layout, (packed,), d, dv)
    if d != dv or key_dtype != value_dtype:
        if layout in (KVLayout.FLASH_NHD, KVLayout.FLASHINFER_NHD):
            shapes = ((nb, bs, h, d), (nb, bs, h, dv))
        else:
            shapes = ((nb, h, bs, d), (nb, h, bs, dv))
        return PagedCache(layout, (canaries(shapes[0], key_dtype, device, finite), canaries(shapes[1], value_dtype, device, finite)), d, dv)
    shape = {
        KVLayout.FLASH_NHD: (2, nb, bs, h, d),
        KVLayout.FLASH_HND: (2, nb, h, bs, d),
        KVLayout.FLASHINFER_NHD: (nb, 2, bs, h, d),
        KVLayout.FLASHINFER_HND: (nb, 2, h, bs, d),
    }[layout]
    return PagedCache(layout, (canaries(shape, key_dtype, device, finite),), d, dv)


FINITE_CANARY = 30.0  # large enough that one unmasked read moves the output far past any tolerance


def canaries(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu",
             finite: bool = False) -> Tensor:
    """A tensor of poison: NaN for floats, the 0x7F byte (a NaN) for fp8, 127 for int8, 0xFF for packed int4.

    finite=True fills FINITE_CANARY instead, for kernels that load whole pages and mask unused slots
    by multiplying with a zero probability (0 * NaN = NaN, which real caches, zero-initialized, avoid).
    """
    if finite:
        if dtype in (torch.int8, torch.uint8):
            return torch.full(shape, 127, dtype=dtype, device=device)
        return torch.full(shape, FINITE_CANARY, dtype=torch.float32, device=device).to(dtype)
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.full(shape, 0x7F, dtype=torch.uint8, device=device).view(dtype)
    if dtype == torch.int8:
        return torch.full(shape, 127, dtype=dtype, device=device)
    if dtype == torch.uint8:  # packed int4 codes have no NaN either: their scales (NaN) carry the poison
        return torch.full(shape, 0xFF, dtype=dtype, device=device)
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def _views(cache: PagedCache) -> tuple[Tensor, Tensor]:
    layout, t = cache.layout, cache.tensors
    if layout == KVLayout.MLA_LATENT:
        latent = t[0][:, :, None, :]  # [nb, bs, 1, kv_lora_rank + rope_dim]
        return latent, latent[..., : cache.head_size_v]
    if layout == KVLayout.PAGED_V0:
        key, value = t
        return key.permute(0, 3, 1, 2, 4), value.permute(0, 3, 1, 2)  # [nb, bs, h, D/x, x], [nb, bs, h, D]
    if layout in (KVLayout.VLLM_NHD, KVLayout.VLLM_HND):
        canonical = t[0].transpose(1, 2)  # [nb, bs, H_kv, 2*D]
        return canonical[..., : cache.head_size], canonical[..., cache.head_size:]
    hnd = layout in (KVLayout.FLASH_HND, KVLayout.FLASHINFER_HND)
    if len(t) == 2:
        k, v = t
        if hnd:
            return k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        return k, v
    if layout in (KVLayout.FLASH_NHD, KVLayout.FLASH_HND):
        k, v = t[0][0], t[0][1]
    else:
        k, v = t[0][:, 0], t[0][:, 1]
    if hnd:
        k, v = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
    return k, v


def write(cache: PagedCache, key: Tensor, value: Tensor, slot_mapping: Tensor) -> None:
    """Store token i's key/value at slot slot_mapping[i] = block * block_size + offset; -1 is skipped.

    key: [num_tokens, H_kv, D] already in the cache dtype. Writes in place through the views.
    """
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].to(torch.int64)
    block, offset = slots // cache.block_size, slots % cache.block_size
    kview, vview = cache.key_view(), cache.value_view()
    k = key[keep].to(kview.dtype)
    kview[block, offset] = k.reshape(k.shape[0], *kview.shape[2:])
    vview[block, offset] = value[keep].to(vview.dtype)


def gather(cache: PagedCache, block_table_row: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """The first `length` keys and values of one sequence, [length, H_kv, D], read via its blocks."""
    bs = cache.block_size
    pos = torch.arange(length, device=block_table_row.device)
    blocks = block_table_row.to(torch.int64)[pos // bs]
    k = cache.key_view()[blocks, pos % bs]
    v = cache.value_view()[blocks, pos % bs]
    return k.reshape(length, k.shape[1], cache.head_size), v
