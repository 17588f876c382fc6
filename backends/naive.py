"""A kernel-shaped PyTorch paged-attention backend, and the planted bugs built on it.

`torch-naive-paged` does what a serving kernel does, in float32 on any device: it stores the new
tokens through slot_mapping into its copy of the cache (quantizing as the cache dtype says), reads
each sequence through its block table, dequantizes, computes two split-K partial states and merges
them by LSE, and writes into a given output buffer. It is a legitimate subject (it shares no code
with reference/) and, with one `Bug` switched on, each planted mutant of the detection benchmark.
"""
from __future__ import annotations

import math
from enum import Enum

import torch
from torch import Tensor

from reference.case import CausalAlignment, AlibiConvention, AttentionType, DType, KVCacheDType, KVLayout, ScaleGranularity
from reference.inputs import Inputs

from . import _int4, spellings
from ._convert import LOG2_E, key_offset, round_half_away
from .base import ALL_FEATURES, Actual, Backend, Capabilities, Feature, LseBase, poisoned_output

FP8 = {KVCacheDType.FP8_E4M3: (torch.float8_e4m3fn, 448.0), KVCacheDType.FP8_E5M2: (torch.float8_e5m2, 57344.0)}
TOKEN_HEAD = {KVCacheDType.INT8_PER_TOKEN_HEAD: (torch.int8, 127.0),
              KVCacheDType.FP8_PER_TOKEN_HEAD: (torch.float8_e4m3fn, 448.0)}


class Bug(Enum):
    """One realistic kernel bug each (the detection benchmark's mutants)."""

    WINDOW_OFF_BY_ONE = "window_off_by_one"  # q - k <= W instead of < W: one key too many
    SOFT_CAP_IGNORED = "soft_cap_ignored"
    ALIBI_SIGN_FLIPPED = "alibi_sign_flipped"
    GQA_MODULO = "gqa_modulo"  # kv head = h % H_kv instead of h // group
    LAST_PARTIAL_BLOCK_DROPPED = "last_partial_block_dropped"
    WRONG_BLOCK_SIZE = "wrong_block_size"  # block table read with twice the block size
    K_DESCALE_DROPPED = "k_descale_dropped"
    KV_SCALES_SWAPPED = "kv_scales_swapped"
    LSE_BASE2 = "lse_base2"  # returns log2 while declaring natural log
    EMPTY_MERGE_NAN = "empty_merge_nan"  # merging two empty splits divides 0 by 0
    CAUSAL_TOP_LEFT = "causal_top_left"  # query j sees keys 0..j, ignoring the context
    SLOT_MINUS_ONE_WRITTEN = "slot_minus_one_written"  # padding token stored at slot -1 (the last slot)
    LONE_MINUS_ONE_BOUND = "lone_minus_one_bound"  # a -1 window side beside a bounded one is a bound (FA4's reading)


NAIVE_CAPS = Capabilities(
    devices=frozenset({"cpu", "cuda"}), dtypes=frozenset(DType), head_sizes=(8, 16, 32, 64, 80, 128),
    attn_types=frozenset({AttentionType.DECODER, AttentionType.ENCODER_DECODER, AttentionType.KERNEL}),
    causal_alignments=frozenset(CausalAlignment),
    features=ALL_FEATURES - {Feature.BLOCK_SPARSE}, kv_layouts=frozenset(KVLayout),
    kv_cache_dtypes=frozenset(KVCacheDType), scale_granularities=frozenset(ScaleGranularity),
    block_sizes=(1, 2, 3, 4, 8, 16, 32), lse_base=LseBase.E, writes_output_buffer=True,
    reads_paged_cache=True, writes_cache=True, requires_cache=True,
    # It takes every spelling its flash-attn-shaped arguments could: the CPU twin of the GPU adapters'.
    encodings=(spellings.window_encodings(), spellings.CAUSAL_ENCODINGS, spellings.SCALE_ENCODINGS,
               spellings.PAGE_TABLE_ENCODINGS))


def _div(x: Tensor, divisor: float) -> Tensor:
    """x / divisor correctly rounded on every device: CUDA divides by a Python scalar through its
    reciprocal (1 ulp off), and a scale 1 ulp off flips the stored code of values that sit on a
    rounding tie, which low-precision inputs often do (found on an H100: ~1 in 3 per-token-head cases)."""
    return x / torch.full_like(x, divisor)


def _soft_cap(s: Tensor, cap: float) -> Tensor:
    """cap * tanh(s / cap) (a seam: tests/fuzz/test_soft_cap_tanh.py caps with an approximate tanh)."""
    return cap * torch.tanh(s / cap)


class NaivePaged(Backend):
    library = "torch"

    def __init__(self, bug: Bug | None = None) -> None:
        self.bug = bug
        self.name = "torch-naive-paged" if bug is None else f"mutant-{bug.value.replace('_', '-')}"
        self.caps = NAIVE_CAPS
        self.description = ("kernel-shaped paged attention in float32 (write, gather, split-K, merge)"
                            + ("" if bug is None else f"; planted bug: {bug.value}"))

    def device(self) -> str:
        return "cuda" if torch.cuda.is_available() else "cpu"

    # -- the kernel ------------------------------------------------------------------------------
    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        cache = inputs.cache_before_write.clone()
        self._store(cache, inputs.key, inputs.value, inputs.slot_mapping)
        buffer = poisoned_output(inputs)
        lses = torch.empty(case.num_tokens, case.num_heads, dtype=torch.float32, device=inputs.device)
        table = spellings.page_table(case, inputs.block_table)
        for i, s in enumerate(case.sequences):
            a, b = case.query_starts[i], case.query_starts[i + 1]
            k, v = self._load(cache, table[i], case.kv_lens[i])
            out, lse = self._attend(inputs, i, inputs.query[a:b].float() if inputs.query_fp8 is None
                                    else inputs.query_fp8[a:b].float() * inputs.q_scale, k, v)
            buffer[a:b] = out.to(buffer.dtype)
            lses[a:b] = lse
        if self.bug == Bug.LSE_BASE2:
            lses = lses * LOG2_E
        return Actual(output=buffer[: case.num_tokens], lse=lses, output_buffer=buffer, buffer_rows=case.num_tokens,
                      written_cache=cache)

    def _store(self, cache, key: Tensor, value: Tensor, slot_mapping: Tensor) -> None:
        """Quantize and store every token at its slot (-1 skipped), as a cache-write kernel does."""
        slots = slot_mapping.to(torch.int64)
        real = slots >= 0
        self._store_at(cache, key[real], value[real], slots[real])
        if self.bug == Bug.SLOT_MINUS_ONE_WRITTEN:
            # the padding after the real tokens, -1 wrapped to the pool's last slot as an unchecked kernel would: where
            # that slot is a real token's, the padding lands on every device (in one scatter a GPU leaves unspecified
            # which write to a slot lands, and on an H200 the planted write showed nowhere: tests/fuzz/test_judge.py)
            pool = cache.paged.key_view().shape[0] * cache.paged.key_view().shape[1]
            self._store_at(cache, key[~real], value[~real], slots[~real] % pool)

    def _store_at(self, cache, key: Tensor, value: Tensor, slots: Tensor) -> None:
        """Quantize and store each token at its slot (every slot in the pool)."""
        kview, vview = cache.paged.key_view(), cache.paged.value_view()
        bs = kview.shape[1]
        kvd = cache.kv_cache_dtype
        blk, off = slots // bs, slots % bs
        k, v = key.float(), value.float()
        if kvd in FP8:
            fp8, top = FP8[kvd]
            k = (k / cache.k_scale.reshape(1, -1, 1)).clamp(-top, top).to(fp8)
            v = (v / cache.v_scale.reshape(1, -1, 1)).clamp(-top, top).to(fp8)
        elif kvd in (KVCacheDType.INT8_KV, KVCacheDType.INT8_K_FP16_V):
            amax = k.abs().amax(-1)  # [tokens, H_kv]
            ks = torch.where(amax > 0, _div(amax, 127.0), torch.ones_like(amax))
            cache.k_scale_cache[blk, :, off] = ks
            k = torch.round(k / ks[..., None]).clamp(-128, 127).to(torch.int8)
            if kvd == KVCacheDType.INT8_KV:
                v = torch.round(v / cache.v_channel_scale).clamp(-128, 127).to(torch.int8)
        elif kvd == KVCacheDType.INT4_PER_TOKEN_HEAD:
            (k, ks), (v, vs) = _int4.store(key), _int4.store(value)
            cache.k_token_scales[blk, off], cache.v_token_scales[blk, off] = ks, vs
        elif kvd in TOKEN_HEAD:
            fmt, top = TOKEN_HEAD[kvd]
            ks, vs = _div(k.abs().amax(-1), top).clamp(min=1e-6), _div(v.abs().amax(-1), top).clamp(min=1e-6)
            cache.k_token_scales[blk, off], cache.v_token_scales[blk, off] = ks, vs
            k, v = k / ks[..., None], v / vs[..., None]
            if fmt == torch.int8:  # half away from zero, as vLLM's writer rounds before its truncating store
                k, v = round_half_away(k), round_half_away(v)
            k, v = k.clamp(-top - (fmt == torch.int8), top).to(fmt), v.clamp(-top - (fmt == torch.int8), top).to(fmt)
        kview[blk, off] = k.reshape(k.shape[0], *kview.shape[2:]).to(kview.dtype)
        vview[blk, off] = v.to(vview.dtype)

    def _load(self, cache, table_row: Tensor, n: int) -> tuple[Tensor, Tensor]:
        kview, vview = cache.paged.key_view(), cache.paged.value_view()
        bs = kview.shape[1]
        if self.bug == Bug.LAST_PARTIAL_BLOCK_DROPPED:
            n = (n // bs) * bs
        step = bs * 2 if self.bug == Bug.WRONG_BLOCK_SIZE else bs
        pos = torch.arange(n, device=table_row.device)
        slot = (table_row.long()[(pos // step).clamp(max=table_row.numel() - 1)] * bs + pos % step)
        slot = slot % (kview.shape[0] * bs)
        flat_k = kview.reshape(-1, *kview.shape[2:]) if kview.is_contiguous() else kview.flatten(0, 1)
        k = flat_k[slot].reshape(n, kview.shape[2], cache.paged.head_size)
        v = vview.flatten(0, 1)[slot]
        kvd = cache.kv_cache_dtype
        if kvd == KVCacheDType.INT4_PER_TOKEN_HEAD:
            ks, vs = cache.k_token_scales.flatten(0, 1)[slot], cache.v_token_scales.flatten(0, 1)[slot]
            return _int4.load(k, ks, descale=self.bug != Bug.K_DESCALE_DROPPED), _int4.load(v, vs)
        k, v = k.float(), v.float()
        k_scale, v_scale = cache.k_scale.reshape(1, -1, 1), cache.v_scale.reshape(1, -1, 1)
        if self.bug == Bug.KV_SCALES_SWAPPED:
            k_scale, v_scale = v_scale, k_scale
        if kvd in FP8:
            k = k if self.bug == Bug.K_DESCALE_DROPPED else k * k_scale
            v = v * v_scale
        elif kvd in (KVCacheDType.INT8_KV, KVCacheDType.INT8_K_FP16_V):
            ks = cache.k_scale_cache.permute(0, 2, 1).flatten(0, 1)[slot]
            k = k if self.bug == Bug.K_DESCALE_DROPPED else k * ks[..., None]
            if kvd == KVCacheDType.INT8_KV:
                v = v * cache.v_channel_scale
        elif kvd in TOKEN_HEAD:
            k = k if self.bug == Bug.K_DESCALE_DROPPED else k * cache.k_token_scales.flatten(0, 1)[slot][..., None]
            v = v * cache.v_token_scales.flatten(0, 1)[slot][..., None]
        return k, v

    def _attend(self, inputs: Inputs, i: int, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        case = inputs.case
        n_q, n_k = q.shape[0], k.shape[0]
        group = case.num_heads // case.num_kv_heads
        heads = torch.arange(case.num_heads, device=q.device)
        kv_head = heads % case.num_kv_heads if self.bug == Bug.GQA_MODULO else heads // group
        k, v = k[:, kv_head], v[:, kv_head]
        offset = 0 if self.bug == Bug.CAUSAL_TOP_LEFT else key_offset(case, i)
        qp = torch.arange(n_q, device=q.device)[:, None] + offset
        kp = torch.arange(n_k, device=q.device)[None, :]
        scale = spellings.scale_kwargs(case).get("softmax_scale", q.shape[-1] ** -0.5)  # the API's default
        s = torch.einsum("qhd,khd->hqk", q, k) * scale
        if case.soft_cap is not None and self.bug != Bug.SOFT_CAP_IGNORED:
            s = _soft_cap(s, case.soft_cap)
        if inputs.alibi_slopes is not None:
            d = (kp - qp).float()
            if case.alibi.convention == AlibiConvention.SYMMETRIC:
                d = -d.abs()
            sign = -1.0 if self.bug == Bug.ALIBI_SIGN_FLIPPED else 1.0
            s = s + sign * inputs.alibi_slopes.float().to(q.device)[:, None, None] * d
        ok = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
        if spellings.causal_flag(case):
            ok &= kp <= qp
        # flash-attn's window arguments: None or a negative side is unbounded, any number >= 0 bounds it
        # (vLLM's sliding_window W is (W-1, 0): W keys, the query's own included)
        pair = spellings.window_pair(case)
        left, right = (None if x is None or x < 0 else x for x in pair)
        if self.bug == Bug.LONE_MINUS_ONE_BOUND and not all(x is not None and x < 0 for x in pair):
            left, right = pair  # only a pair of negative sides is no window; a lone -1 bounds (kp >= qp + 1)
        if case.chunk_lookback is not None:  # the window only sizes the chunks (causality may still travel in it)
            left, right = None, 0 if spellings.causal_as_window(case) else None
        if left is not None:
            ok &= (qp - kp <= left + 1) if self.bug == Bug.WINDOW_OFF_BY_ONE else (qp - kp <= left)
        if right is not None:
            ok &= kp - qp <= right
        if case.attn_chunk_size is not None:
            ok &= (qp // case.attn_chunk_size) == (kp // case.attn_chunk_size)
        ok = self._vllm_rules(case, i, qp, kp, ok)
        if inputs.qq_bias is not None:  # between new tokens only: key context_len + j is new token j
            ctx = n_k - n_q
            s[:, :, ctx:] += inputs.qq_bias[:n_q, :n_q].float().to(q.device)[None]
        s = s.masked_fill(~ok, -math.inf)
        cut = n_k // 2  # split-K: two partial states merged by LSE, as flash-decoding does
        o1, l1 = _partial(s[..., :cut], v[:cut])
        o2, l2 = _partial(s[..., cut:], v[cut:])
        out, lse = self._merge(o1, l1, o2, l2)
        if inputs.sinks is not None:
            sink = inputs.sinks.float().to(q.device)[None, :]
            total = torch.logaddexp(lse, sink)
            out = out * torch.exp(lse - total).nan_to_num(0.0)[..., None]
            lse = total
        return out, lse

    @staticmethod
    def _vllm_rules(case, i: int, qp: Tensor, kp: Tensor, ok: Tensor) -> Tensor:
        """Chunk lookback, R-SWA and PrefixLM ranges, in unified attention's order: (causal AND rules) OR ranges."""
        if case.chunk_lookback is not None:
            size = case.sliding_window // (case.chunk_lookback + 1)
            ok = ok & (qp // size - kp // size <= case.chunk_lookback)
        if case.global_prefix is not None:
            ok = ok & ((kp < case.global_prefix.prefix_lens[i]) | (qp - kp < case.global_prefix.window))
        ranges = case.bidirectional_ranges[i] if case.bidirectional_ranges is not None else ()
        for start, end in ranges:
            ok = ok | ((qp >= start) & (qp <= end) & (kp >= start) & (kp <= end))
        return ok

    def _merge(self, o1, l1, o2, l2):
        m = torch.maximum(l1, l2)
        if self.bug != Bug.EMPTY_MERGE_NAN:
            m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
        total = w1 + w2
        denominator = total if self.bug == Bug.EMPTY_MERGE_NAN else torch.where(total > 0, total, torch.ones_like(total))
        out = (o1 * w1[..., None] + o2 * w2[..., None]) / denominator[..., None]
        return out, m + torch.log(total)

    def repro_kernel(self, case) -> str | None:
        """The kernel's semantics in float32 with its planted bug (the paged plumbing is not written out)."""
        from ._repro import attention_function

        if self.bug not in _REPRO_EDITS:
            return None
        return attention_function("kernel", "torch.float32", **_REPRO_EDITS[self.bug])


def _partial(s: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """(output [q, H, D], lse [q, H]) of one split; an empty split has output 0 and LSE -inf."""
    if s.shape[-1] == 0:
        return (torch.zeros(s.shape[1], s.shape[0], v.shape[-1], device=s.device),
                torch.full((s.shape[1], s.shape[0]), -math.inf, device=s.device))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    total = p.sum(-1)
    out = torch.einsum("hqk,khd->qhd", p, v) / torch.where(total > 0, total, torch.ones_like(total)).T[..., None]
    return out, (m[..., 0] + torch.log(total)).T


# The planted bugs a plain-torch repro can write out (the others live in the paged cache's plumbing).
_REPRO_EDITS = {None: {}, Bug.WINDOW_OFF_BY_ONE: dict(window_extra=1), Bug.SOFT_CAP_IGNORED: dict(soft_cap=False),
                Bug.ALIBI_SIGN_FLIPPED: dict(alibi_sign=-1.0), Bug.GQA_MODULO: dict(kv_head="h % H_KV"),
                Bug.LSE_BASE2: dict(lse_divisor="0.6931471805599453"),
                Bug.CAUSAL_TOP_LEFT: dict(offset_shift="-SEQS[i][2]")}


def mutants() -> list[Backend]:
    return [NaivePaged(bug) for bug in Bug]
