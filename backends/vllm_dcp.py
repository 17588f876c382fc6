"""FA3's context-parallel arguments (vllm 0.26.0), every rank simulated on one GPU.

| backend | what runs |
|---|---|
| `vllm-fa3-cp` | per rank r of R (encoding `cp_world`): `flash_attn_varlen_func(fa_version=3, cp_world_size=R, cp_rank=r, cp_tot_seqused_k=seq_lens)` over that rank's own paged cache; the ranks' (output, LSE) combined (encoding `combine`) by vLLM's DCP combine (`v1/attention/ops/common.correct_attn_out`, then the sum an all-reduce makes, in the model dtype) or by a float32 LSE merge in torch, which keeps FA3's cp path under test where vLLM's combine cannot run |

This is how vLLM's FlashAttention MLA decode calls FA3 under decode context parallelism: every token of a
sequence (the new ones included) is stored on rank p % R at local index p // R (vLLM supports only
interleave size 1 with these arguments: `supports_dcp_with_varlen`), the kernel masks each local key at
its sequence position (hopper/mask.h: `local * cp_world_size + cp_rank` against `cp_tot_seqused_k`), and
the ranks' states are merged by LSE. The oracle's `reference.dcp.cp_attention` is the same composition
and equals plain attention (property tests), so the combined output is judged against attention.

Declared from FA3's checks in flash_api.cpp: no local (sliding-window) attention with cp_world_size > 1.
Sinks are not declared: each rank would add `s_aux` to its own denominator, and vLLM passes none there.
The rank caches are plain NHD pages built here (the packed layouts are fuzzed by `vllm-fa3-paged`).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from reference.case import KVLayout
from reference.inputs import Inputs

from ._convert import tokens_first_lse
from .base import Actual, Feature
from .vllm import Fa3Paged, SPLITS


def rank_cache(views: tuple[torch.Tensor, ...], block_table: torch.Tensor, seq_lens: list[int], world: int,
               rank: int):
    """Rank `rank`'s own paged cache: positions rank, rank + R, ... of each sequence, from local index 0
    (interleave size 1, the only one vLLM passes FA3's cp arguments with). `views`: the pool's canonical
    [num_blocks, block_size, H, D] key and value views, gathered through one slot computation.

    Returns (one page tensor [n, block_size, H, D] per view, in its dtype; block table [B, max_pages] int32;
    local lengths)."""
    bs = views[0].shape[1]
    dev = views[0].device
    raws = [v.view(torch.uint8) if v.dtype.itemsize == 1 else v for v in views]  # fp8 moved as bytes
    flats = [raw.reshape(-1, *raw.shape[2:]) for raw in raws]  # slot-major
    lengths = [len(range(rank, n, world)) for n in seq_lens]
    pages = [-(-n // bs) for n in lengths]
    table = torch.zeros(len(seq_lens), max(pages + [1]), dtype=torch.int32, device=dev)
    # page 0 holds nothing (the table's padding points there)
    locals_ = [torch.zeros(1 + sum(pages), bs, *raw.shape[2:], dtype=raw.dtype, device=dev) for raw in raws]
    first = 1
    for i, n in enumerate(seq_lens):
        pos = torch.arange(rank, max(n, rank), world, device=dev)
        slots = block_table[i, pos // bs].long() * bs + pos % bs
        table[i, :pages[i]] = torch.arange(first, first + pages[i], dtype=torch.int32)
        for local, flat in zip(locals_, flats):
            local.view(-1, *flat.shape[1:])[first * bs:first * bs + lengths[i]] = flat[slots]
        first += pages[i]
    return [local.view(v.dtype) for local, v in zip(locals_, views)], table, lengths


class Fa3ContextParallel(Fa3Paged):
    """FA3 with cp_world_size / cp_rank / cp_tot_seqused_k over R rank caches, combined as vLLM's DCP does."""

    def __init__(self) -> None:
        super().__init__("vllm-fa3-cp")
        self.module = "vllm.v1.attention.ops.common"
        self.description = ("FA3 per simulated DCP rank (cp_world_size, cp_rank, cp_tot_seqused_k) over the rank's "
                            "own cache, combined by vLLM's correct_attn_out + sum (or a float32 torch merge)")
        self.caps = replace(
            self.caps, features=self.caps.features - {Feature.WINDOW, Feature.SINKS},
            kv_layouts=frozenset({KVLayout.FLASH_NHD}), writes_output_buffer=False,
            encodings=(("cp_world", ("2", "4", "8")), ("combine", ("vllm", "torch")), ("num_splits", SPLITS),
                       ("scheduler", ("jit", "aot"))))

    def repro_kernel(self, case) -> str | None:
        return None  # not FA3's plain call (FA3 inherited for the declaration only): replay with attnref

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        dev = inputs.device
        world = int(case.encoding("cp_world", "2"))
        pool = inputs.cache.paged
        seq_lens = [int(n) for n in inputs.seq_lens]
        total = inputs.seq_lens.to(dev, torch.int32)
        outs, lses = [], []
        for rank in range(world):
            (k, v), table, lengths = rank_cache((pool.key_view(), pool.value_view()), inputs.block_table, seq_lens,
                                                world, rank)
            out, lse = self.call(inputs, inputs.query, k, v, causal=case.is_causal,
                                 seqused_k=torch.tensor(lengths, dtype=torch.int32, device=dev),
                                 max_k=max(lengths + [1]), block_table=table,
                                 extra=dict(cp_world_size=world, cp_rank=rank, cp_tot_seqused_k=total))
            outs.append(out)
            lses.append(lse)  # [H, T]
        gathered = torch.stack([lse.transpose(0, 1) for lse in lses]).contiguous()  # all-gathered: [N, T, H]
        if case.encoding("combine", "vllm") == "torch":
            combined, final_lse = lse_merge(outs, gathered)
        else:  # vLLM's: correct each rank's output by the gathered LSEs, then all-reduce (a sum)
            from vllm.v1.attention.ops.common import CPTritonContext, correct_attn_out

            combined, final_lse = None, None
            for rank, out in enumerate(outs):
                corrected, final_lse = correct_attn_out(out.clone(), gathered, rank, CPTritonContext())
                combined = corrected if combined is None else combined + corrected
        lse, notes = tokens_first_lse(final_lse, case.num_tokens, case.num_heads, documented="TH")
        return Actual(output=combined, lse=lse, notes=notes)


def lse_merge(outs: list[torch.Tensor], lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank states [T, H, D] with LSEs [N, T, H] merged in float32; rows no rank sees: output 0, LSE -inf."""
    top = lses.amax(0)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(lses - top)  # [N, T, H]; a rank without keys for a row weighs 0
    total = weights.sum(0)
    out = sum(w[..., None] * o.float() for w, o in zip(weights, outs)) / total.clamp_min(1e-30)[..., None]
    return out.to(outs[0].dtype), torch.log(total) + top


def vllm_dcp_backends() -> list:
    return [Fa3ContextParallel()]
