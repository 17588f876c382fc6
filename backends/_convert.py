"""Translation shared by adapters: per-sequence slicing, dense masks and biases, LSE bases.

Written apart from reference/ on purpose: an adapter states the Case to its library in the
library's terms, and a mistake here must not be hidden by the same mistake in the oracle.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import Tensor

from reference.case import AlibiConvention, AttentionType, Case, CausalAlignment
from reference.inputs import Inputs

LOG2_E = 1.0 / math.log(2.0)


def key_offset(case: Case, i: int) -> int:
    """Position of sequence i's first query among its keys: a decoder's context_len (bottom-right),
    0 for encoders, and for kernel cases key_len - query_len (bottom-right) or 0 (top-left)."""
    s = case.sequences[i]
    if case.attn_type == AttentionType.KERNEL:
        return (s.key_len or 0) - s.query_len if case.causal_alignment == CausalAlignment.BOTTOM_RIGHT else 0
    return s.context_len if case.attn_type == AttentionType.DECODER else 0


def allowed(case: Case, i: int, device) -> Tensor:
    """Bool [H|1, query_len, kv_len]: which keys each query may see, from the Case's fields."""
    s = case.sequences[i]
    qp = torch.arange(s.query_len, device=device)[:, None] + key_offset(case, i)
    kp = torch.arange(case.kv_lens[i], device=device)[None, :]
    rule = position_rule(case, device)
    heads = range(case.num_heads) if case.block_sparse is not None else range(1)  # only block-sparse varies
    return torch.stack([rule(h, qp, kp).expand(qp.shape[0], kp.shape[1]) for h in heads])


def position_rule(case: Case, device, tensor_scalars: bool = False) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """rule(head, q_pos, k_pos) -> bool, elementwise on broadcastable positions: the Case's causal /
    window / chunk / block-sparse rules in logical positions. SDPA masks (`allowed`) and flex
    mask_mods are both built from it.

    tensor_scalars: the rule's integers become 0-dim device tensors (flex's FLASH kernel backend
    cannot inline a captured Python int, which dynamic compilation turns into a symbol)."""
    def const(x):
        return torch.tensor(x, device=device) if (tensor_scalars and x is not None) else x

    causal = case.is_causal
    window = const(case.sliding_window)
    symmetric_window = case.attn_type == AttentionType.ENCODER_ONLY
    pair = tuple(const(x) for x in case.window) if case.attn_type == AttentionType.KERNEL and case.window else None
    chunk = const(case.attn_chunk_size)
    sparse = case.block_sparse
    if sparse is not None:
        from reference.block_sparse import head_offset  # vLLM's derived per-head offsets (data, not a mask)
        offsets = torch.tensor([head_offset(sparse, h, case.num_heads, case.num_kv_heads)
                                for h in range(case.num_heads)], device=device)
        block, local, stride = const(sparse.block_size), const(sparse.local_blocks), const(sparse.vert_stride)

    def rule(h, qp, kp):
        ok = torch.ones_like(qp, dtype=torch.bool) if not causal else kp <= qp
        if window is not None:
            ok = ok & (qp - kp < window)
            ok = ok & ((kp - qp < window) if symmetric_window else (kp <= qp))
        if pair is not None:
            if pair[0] is not None:
                ok = ok & (qp - kp <= pair[0])
            if pair[1] is not None:
                ok = ok & (kp - qp <= pair[1])
        if chunk is not None:
            ok = ok & (qp // chunk == kp // chunk)
        if sparse is not None:
            qb, kb = qp // block, kp // block
            ok = ok & (((qb - kb) < local) | ((kb + offsets[h]) % stride == 0))
        return ok

    return rule


def alibi_additive(case: Case, i: int, slopes: Tensor) -> Tensor:
    """Float [H, query_len, kv_len] ALiBi bias in the Case's convention."""
    s = case.sequences[i]
    qp = torch.arange(s.query_len, device=slopes.device)[:, None] + key_offset(case, i)
    kp = torch.arange(case.kv_lens[i], device=slopes.device)[None, :]
    d = (kp - qp).float()
    if case.alibi.convention == AlibiConvention.SYMMETRIC:
        d = -d.abs()
    return slopes.float()[:, None, None] * d[None]


def per_sequence(inputs: Inputs, run_one: Callable[[int, Tensor, Tensor, Tensor], tuple[Tensor, Tensor | None]]
                 ) -> tuple[Tensor, Tensor | None]:
    """Call run_one(i, q [H, q, D], k [H_kv, kv, D], v) per sequence; concatenate [tokens, H, ...]."""
    outs, lses = [], []
    starts = inputs.case.query_starts
    for i in range(len(inputs.case.sequences)):
        a, b = starts[i], starts[i + 1]
        q = inputs.query[a:b].transpose(0, 1)
        k = inputs.keys[i].transpose(0, 1)
        v = inputs.values[i].transpose(0, 1)
        out, lse = run_one(i, q, k, v)
        outs.append(out.transpose(0, 1))
        lses.append(None if lse is None else lse.transpose(0, 1))
    lse = None if any(x is None for x in lses) else torch.cat(lses)
    return torch.cat(outs), lse


def alibi_context_term(case, slopes: Tensor) -> Tensor:
    """[tokens, H] float32: slope * (the number of keys before the query's sequence's new tokens), by which an
    ALiBi bias of slope * (k - i), i the query's index among its sequence's new tokens (FlashInfer's), differs
    from slope * (k - q): a per-row constant, so it moves the LSE only. For a decode (i = 0) it is slope * q."""
    offsets = torch.cat([torch.full((s.query_len,), float(case.query_offset(s))) for s in case.sequences]
                        or [torch.zeros(0)])
    return offsets[:, None] * slopes.float().cpu()[None, :]


def round_half_away(x: Tensor) -> Tensor:
    """Nearest integer, ties away from zero, as vLLM's Triton writers round (+-0.5, then truncate)."""
    return torch.where(x >= 0, x + 0.5, x - 0.5).trunc()


def lse_natural(lse: Tensor, base_two: bool) -> Tensor:
    """Convert a kernel's LSE to natural log (FlashInfer returns log2)."""
    return lse.float() / LOG2_E if base_two else lse.float()


def unpack_varlen_lse(lse: torch.Tensor, query_lens: list[int]) -> torch.Tensor:
    """[tokens, H] from a varlen LSE that is either per sequence [B, H, >= max_q] (rows padded) or
    packed [1, H, >= total_q]; with one sequence the two coincide."""
    lse = lse.float()
    batch = len(query_lens)
    if batch > 1 and lse.shape[0] == batch:
        return torch.cat([lse[i, :, :n].transpose(0, 1) for i, n in enumerate(query_lens)])
    return lse[0, :, : sum(query_lens)].transpose(0, 1)


def tokens_first_lse(lse: Tensor, num_tokens: int, num_heads: int, documented: str) -> tuple[Tensor, dict]:
    """A packed varlen LSE as [tokens, heads], from the layout the API documents ("TH": [tokens, heads],
    "HT": [heads, tokens]; a trailing dim of 1 is dropped). The shape decides only where it is not
    square; a shape that contradicts the documentation is followed and reported in the notes.
    (Guessing from the shape alone transposes a [T, H] LSE whenever T == H.)"""
    lse = lse.float()
    if lse.dim() == 3 and lse.shape[-1] == 1:
        lse = lse[..., 0]
    th, ht = (num_tokens, num_heads), (num_heads, num_tokens)
    shape = tuple(lse.shape[:2])
    layout = documented if shape == (th if documented == "TH" else ht) else ("HT" if shape == ht else "TH")
    notes = {} if layout == documented else {"lse_layout": f"{layout}, documented {documented}: {list(lse.shape)}"}
    return (lse if layout == "TH" else lse.transpose(0, 1)), notes


def first_call_note(seen: set, variant: tuple, started: float) -> dict:
    """{'first_call_s': ...} the first time `variant` runs (its time includes a JIT compile), else {}."""
    if variant in seen:
        return {}
    torch.cuda.synchronize()
    seen.add(variant)
    return {"first_call_s": time.perf_counter() - started}


def torch_before(major: int, minor: int) -> bool:
    """Whether the installed torch is older than major.minor (behaviour that changed between releases)."""
    return tuple(int(x) for x in torch.__version__.split(".")[:2]) < (major, minor)


def cu_seqlens(lengths: list[int], device) -> Tensor:
    return torch.nn.functional.pad(torch.tensor(lengths, device=device).cumsum(0), (1, 0)).to(torch.int32)


def varlen_offsets(inputs: Inputs) -> tuple[Tensor, Tensor]:
    """cu_seqlens of the queries and of the keys, int32, where the inputs are: Inputs.query_start_loc, and the key
    offsets summed from Inputs.seq_lens there. Built from the Case on the host instead, each was a copy to the GPU and
    a synchronisation of a GPU that a campaign's workers share (benchmarks/sync_count.py)."""
    return inputs.query_start_loc, torch.nn.functional.pad(inputs.seq_lens.cumsum(0), (1, 0)).to(torch.int32)
