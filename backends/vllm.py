"""vLLM's own attention kernels (vllm 0.26.0), called through their public Python functions.

| backend | function | cache |
|---|---|---|
| `vllm-fa3-paged` | `vllm.vllm_flash_attn.flash_attn_varlen_func(fa_version=3)` with `block_table` + `seqused_k`, window, soft-cap, `s_aux` sinks, fp8 with q/k/v descales, `num_splits`, `get_scheduler_metadata` (an encoding), LSE | flash_nhd views, or the K / V halves of vLLM 0.26's packed cache (vllm_nhd / vllm_hnd) |
| `vllm-triton-unified` | `v1/attention/ops/triton_unified_attention.unified_attention`: 2D (prefill) and 3D (split-KV decode) paths, ALiBi (signed and `use_alibi_sqrt`), sinks, soft-cap, windows, fp8 per tensor, per-sequence causality through raw-API cases | flash_nhd views, or the packed cache's halves |
| `vllm-prefix-prefill` | `v1/attention/ops/prefix_prefill.context_attention_fwd`: new tokens contiguous, context from the v0 cache, ALiBi, sinks, window, fp8 | paged_v0 |
| `vllm-triton-decode` | `v1/attention/ops/triton_decode_attention.decode_attention_fwd` (split-KV decode, `logit_cap`, LSE) | flash_nhd views |
| `vllm-merge-cuda`, `-triton` | prefix (cached context, non-causal) and suffix (new tokens, causal) by FA3 with LSE, merged by `merge_attn_states` (vLLM's CUDA op, or its Triton kernel) | flash_nhd views |
| `vllm-fa3-writes-cache` | vLLM's cache writer (`_custom_ops.reshape_and_cache_flash` or `triton_reshape_and_cache_flash`, an encoding) stores the new tokens, then FA3 reads them; the written cache is compared with the oracle's, bit for bit | flash_nhd |

Declarations follow vLLM's code and docstrings (read from the 0.26.0 wheel): each kernel's window is
the (left, right) it implements, unified attention's non-causal window is symmetric, prefix_prefill's
`sliding_window` is vLLM's W (W keys, the query's own included). Importing vllm takes ~10 s and needs
CUDA; without it every backend here is unavailable with the reason.
"""
from __future__ import annotations

import torch

from dataclasses import replace

from reference.case import AlibiConvention, AttentionType, CausalAlignment, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs

from . import spellings
from ._convert import cu_seqlens, tokens_first_lse
from .base import (PTX_TANH_APPROX, Actual, Backend, Capabilities, Feature, LseBase, cuda_library_reason,
                   poisoned_output)

F16 = frozenset({DType.FLOAT16, DType.BFLOAT16})
FA3_HEADS = (64, 96, 128, 192, 256)
TRITON_HEADS = (32, 40, 64, 72, 80, 96, 112, 128, 160, 192, 256)
PAGED_TYPES = frozenset({AttentionType.DECODER, AttentionType.ENCODER_DECODER, AttentionType.KERNEL})
SPLITS = ("0", "1", "3")  # num_splits: 0 = the library's heuristic


def _fp8_dtype(case) -> str:
    return "fp8_e4m3" if case.kv_cache_dtype == KVCacheDType.FP8_E4M3 else "fp8_e5m2"


def _descales(inputs: Inputs, shape: tuple[int, ...]) -> dict:
    """q/k/v descale tensors for an fp8 cache (per tensor, expanded to the shape the API takes)."""
    c = inputs.cache
    dev = inputs.query.device
    one = torch.ones(shape, dtype=torch.float32, device=dev)
    return dict(q_descale=one, k_descale=(one * c.k_scale.to(dev)[0]), v_descale=(one * c.v_scale.to(dev)[0]))


def per_token_head_mode(case):
    """vLLM's KVQuantMode for a per-token-head case (its `get_kv_quant_mode` of the same string)."""
    from vllm.v1.kv_cache_interface import get_kv_quant_mode

    return get_kv_quant_mode(case.kv_cache_dtype.value)


def range_tensor(case, dev) -> torch.Tensor:
    """PrefixLM ranges as vLLM's kernels take them: [num_seqs, max_ranges, 2] int32, (0, 0) padding."""
    ranges = case.bidirectional_ranges
    width = max([len(r) for r in ranges] + [1])
    rows = [list(r) + [(0, 0)] * (width - len(r)) for r in ranges]
    return torch.tensor(rows, dtype=torch.int32, device=dev).reshape(len(ranges), width, 2)


def mask_rule_args(inputs: Inputs) -> dict:
    """unified_attention's arguments for the case's vLLM mask rules (PrefixLM, R-SWA, chunk lookback, qq_bias)."""
    case, dev = inputs.case, inputs.device
    kw = {}
    if case.bidirectional_ranges is not None:
        kw["mm_prefix_range"] = range_tensor(case, dev)
    if case.global_prefix is not None:
        kw.update(rswa_window=case.global_prefix.window,
                  rswa_prefix_lens=torch.tensor(case.global_prefix.prefix_lens, dtype=torch.int32, device=dev))
    if case.chunk_lookback is not None:
        kw["chunk_lookback"] = case.chunk_lookback
    if inputs.qq_bias is not None:
        kw["qq_bias"] = inputs.qq_bias.to(dev, torch.float32).contiguous()
    return kw


def _aot_schedule(case, q, kw: dict, seqused_k, causal: bool):
    """get_scheduler_metadata for exactly this call (FLASH_ATTN's builder makes the same call ahead of time)."""
    from vllm.vllm_flash_attn import get_scheduler_metadata

    return get_scheduler_metadata(
        batch_size=len(case.sequences), max_seqlen_q=kw["max_seqlen_q"], max_seqlen_k=kw["max_seqlen_k"],
        num_heads_q=case.num_heads, num_heads_kv=case.num_kv_heads, headdim=case.head_size, cache_seqlens=seqused_k,
        qkv_dtype=q.dtype, headdim_v=case.value_size, cu_seqlens_q=kw["cu_seqlens_q"], page_size=case.cache.block_size,
        causal=causal, window_size=tuple(kw.get("window_size") or (-1, -1)), has_softcap=bool(case.soft_cap),
        num_splits=kw["num_splits"])


def flash_window(case) -> list[int]:
    """flash-attn's [left, right]; a causal call's right side is 0. An unbounded side is -1 (also for the
    "none" spelling, whose call leaves window_size out when both sides are unbounded), the keys' edge, or
    a number beyond them (backends.spellings)."""
    return [-1 if x is None else x for x in spellings.window_pair(case, spellings.MINUS_ONE, causal_in_window=True)]


def window_omitted(case, window: list[int]) -> bool:
    """The "none" spelling of an unbounded window: the call leaves window_size out when both sides are unbounded."""
    return window == [-1, -1] and case.encoding(spellings.UNBOUNDED_WINDOW, spellings.MINUS_ONE) == spellings.NONE


class VllmBackend(Backend):
    library = "vllm"

    def availability(self) -> str | None:
        return cuda_library_reason(self.module, "vllm")

    module = "vllm.vllm_flash_attn"


class Fa3Paged(VllmBackend):
    """FA3 through vLLM's flash_attn_varlen_func over the paged cache."""

    fa_version = 3

    def __init__(self, name: str = "vllm-fa3-paged") -> None:
        self.name = name
        self.description = "vllm_flash_attn.flash_attn_varlen_func (FA3): block_table + seqused_k, LSE"
        self.caps = Capabilities(
            devices=frozenset({"cuda"}), dtypes=F16, head_sizes=FA3_HEADS, attn_types=PAGED_TYPES,
            features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SOFT_CAP, Feature.SINKS,
                                Feature.CONTEXT, Feature.MORE_QUERIES_THAN_KEYS, Feature.PAGED_KERNEL}),
            # vLLM 0.26 hands its kernels the K and V halves of its packed cache (strided views): vllm_nhd / _hnd
            kv_layouts=frozenset({KVLayout.FLASH_NHD, KVLayout.VLLM_NHD, KVLayout.VLLM_HND}), block_sizes=(16, 32, 64, 256),
            kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3}), lse_base=LseBase.E,
            requires_cache=True, reads_paged_cache=True, writes_output_buffer=True,
            soft_cap_tanh_error=PTX_TANH_APPROX,  # apply_softcap: cutlass::fast_tanh (hopper/utils.h)
            # scheduler: FA3 plans its own split (jit) or takes get_scheduler_metadata's plan, as FLASH_ATTN's
            # metadata builder computes it ahead of time (aot)
            # window_size: list[int], -1 unbounded (flash_attn_interface.py); any side >= the keys bounds nothing
            encodings=(("num_splits", SPLITS), spellings.window_encodings(("minus_one", "none", "edge", "beyond")),
                       ("scheduler", ("jit", "aot"))))
        # Found on the H100: FA3 takes an fp8 cache only with an fp8 query ("query and key must have the
        # same dtype"): fp8 cases carry one (Q_FP8), quantized with its q_scale as vLLM does.
        # and its fp8 path writes a bf16 output only: fp8 is declared with bfloat16 models
        self.caps = replace(self.caps, features=self.caps.features | {Feature.Q_FP8}, fp8_query_only=True,
                            fp8_model_dtypes=frozenset({DType.BFLOAT16}))

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        if case.sinks is not None and case.dtype != DType.BFLOAT16:
            reasons.append("sinks with dtype != bfloat16: FA3's s_aux takes bf16 sinks")
        return reasons

    def extra_args(self, case, dev, window) -> dict:
        """Arguments a subclass adds to (or overrides in) the call."""
        return {}

    def call(self, inputs: Inputs, q, k, v, *, causal: bool, seqused_k=None, cu_k=None, max_k: int,
             block_table=None, window=None, sinks=None, out=None, extra: dict | None = None):
        from vllm.vllm_flash_attn import flash_attn_varlen_func

        case = inputs.case
        dev = q.device
        kw = dict(max_seqlen_q=max(case.max_query_len, 1), cu_seqlens_q=cu_seqlens(case.query_lens, dev),
                  max_seqlen_k=max(max_k, 1), softmax_scale=case.softmax_scale, causal=causal,
                  softcap=case.soft_cap or 0.0, return_softmax_lse=True, fa_version=self.fa_version,
                  num_splits=int(case.encoding("num_splits", "0")))
        if window is not None and not window_omitted(case, window):
            kw["window_size"] = window
        if seqused_k is not None:
            kw.update(seqused_k=seqused_k, block_table=block_table)
        else:
            kw["cu_seqlens_k"] = cu_k
        if sinks is not None:
            kw["s_aux"] = sinks.to(dev, torch.bfloat16)
        if out is not None:
            kw["out"] = out
        if k.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            kw.update(_descales(inputs, (len(case.sequences), case.num_kv_heads)))
            kw["q_descale"] = kw["q_descale"] * inputs.q_scale.to(dev)[0]
            q = inputs.query_fp8.to(dev)
        if seqused_k is not None and case.encoding("scheduler", "jit") == "aot" and self.fa_version == 3:
            kw["scheduler_metadata"] = _aot_schedule(case, q, kw, seqused_k, causal)
        kw.update(self.extra_args(case, dev, window))
        kw.update(extra or {})
        result = flash_attn_varlen_func(q, k, v, **kw)
        return result if isinstance(result, tuple) else (result, None)

    repro_quantized = True

    def repro_kernel(self, case) -> str | None:
        from . import vllm_repro

        return vllm_repro.fa3(case)

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        pool = inputs.cache.paged
        buffer = poisoned_output(inputs)
        out, lse = self.call(inputs, inputs.query, pool.key_view(), pool.value_view(), causal=case.is_causal,
                             seqused_k=inputs.seq_lens.to(inputs.device), max_k=case.max_kv_len,
                             block_table=inputs.block_table, window=flash_window(case), sinks=inputs.sinks,
                             out=buffer[: case.num_tokens])
        lse, notes = tokens_first_lse(lse, case.num_tokens, case.num_heads, documented="HT")
        return Actual(output=buffer[: case.num_tokens], lse=lse, output_buffer=buffer, buffer_rows=case.num_tokens,
                      notes=notes)


class TritonUnified(VllmBackend):
    """unified_attention, vLLM's Triton kernel for every batch shape (2D and 3D split-KV paths)."""

    compiled_per = ("dtypes", "head_sizes", "kv_cache_dtypes")  # Triton: dtypes and head sizes are constexprs
    compiled_features = (Feature.ALIBI, Feature.SINKS, Feature.SOFT_CAP, Feature.WINDOW)  # and USE_* flags
    # kernel_unified_attention's constexprs also hold num_query_heads, num_queries_per_kv, BLOCK_SIZE, the
    # SLIDING_WINDOW value, IS_3D (the path encoding) and the cache's last stride (its layout) (vllm 0.26.0,
    # v1/attention/ops/triton_unified_attention.py): a build per shape. Pinned heads, block size and window left 28-34 %
    # of rows slow past a first call (44 % before) on an H200 (campaigns/jit-untold-side-by-side-h200-2026-11-27.md)
    jit_shape_per = ("heads", "block_sizes", "windows", "encodings", "kv_layouts")

    name = "vllm-triton-unified"
    module = "vllm.v1.attention.ops.triton_unified_attention"
    description = "v1/attention/ops/triton_unified_attention.unified_attention over the paged K / V views"
    # Found on the H100: with float32 inputs the Triton kernels multiply in TF32 (Triton's default on
    # Hopper; vLLM asks for IEEE only on Turing): errors ~1e-3, 1000x a float32 pass. Not declared.
    caps = Capabilities(
        devices=frozenset({"cuda"}), dtypes=F16, head_sizes=TRITON_HEADS, attn_types=PAGED_TYPES,
        features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SOFT_CAP, Feature.SINKS, Feature.ALIBI,
                            Feature.CONTEXT, Feature.MORE_QUERIES_THAN_KEYS, Feature.PAGED_KERNEL, Feature.PREFIX_LM,
                            Feature.GLOBAL_PREFIX, Feature.CHUNK_LOOKBACK, Feature.QQ_BIAS}),
        # The kernel's bias is slope * (k - context_len): signed ALiBi up to a constant per row.
        alibi_conventions=frozenset({AlibiConvention.SIGNED, AlibiConvention.SQRT}),
        kv_layouts=frozenset({KVLayout.FLASH_NHD, KVLayout.VLLM_NHD, KVLayout.VLLM_HND}), block_sizes=(16, 32, 64, 128),
        # int8 / fp8 / int4 per token-head: vLLM 0.26's KVQuantMode with k_scale_cache / v_scale_cache
        # [num_blocks, block_size, H_kv] (its docstring); int4 goes to int4_per_token_head.unified_attention_int4.
        kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3, KVCacheDType.INT8_PER_TOKEN_HEAD,
                                   KVCacheDType.FP8_PER_TOKEN_HEAD, KVCacheDType.INT4_PER_TOKEN_HEAD}), lse_base=None,
        requires_cache=True, reads_paged_cache=True, writes_output_buffer=True,
        causal_alignments=frozenset({CausalAlignment.BOTTOM_RIGHT}),
        # window_size: (left, right) ints, the left side read (SLIDING_WINDOW = 1 + left), -1 unbounded; a left side
        # that reaches past every key bounds nothing but runs the windowed branch
        encodings=(("path", ("2d", "3d")), spellings.window_encodings((spellings.MINUS_ONE, spellings.EDGE,
                                                                        spellings.BEYOND))))

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        left, right = case.window_bounds
        if case.is_causal and right not in (None, 0):
            reasons.append(f"window right={right}: a causal call bounds only the left side")
        if not case.is_causal and (left, right) != (None, None) and left != right:
            reasons.append(f"window {(left, right)}: a non-causal window is symmetric (|q - k| < W)")
        if case.kv_cache_dtype == KVCacheDType.INT4_PER_TOKEN_HEAD and not case.is_causal:
            reasons.append("int4_per_token_head: unified_attention asserts 'INT4_PER_TOKEN_HEAD only supports causal "
                           "attention'")
        if not case.is_causal and case.alibi is not None and case.alibi.convention == AlibiConvention.SQRT:
            reasons.append("sqrt ALiBi without causality: the kernel measures from context_len + query, which "
                           "differs from a non-causal case's query positions by more than a constant")
        return reasons

    def run(self, inputs: Inputs) -> Actual:
        from vllm.v1.attention.ops.triton_unified_attention import unified_attention

        case = inputs.case
        dev = inputs.device
        pool = inputs.cache.paged
        buffer = poisoned_output(inputs)
        q, k, v = inputs.query, pool.key_view(), pool.value_view()
        from vllm.v1.kv_cache_interface import KVQuantMode

        kw = {}
        if case.kv_cache_dtype.is_fp8:  # per-tensor scales: the kernel loads one element
            kw.update({name: t.reshape(-1)[:1] for name, t in _descales(inputs, (1,)).items()})
            kw.update(q_descale=None, kv_quant_mode=KVQuantMode.FP8_PER_TENSOR)
        elif case.kv_cache_dtype.is_per_token_head:
            cache = inputs.cache
            kw.update(q_descale=None, k_descale=None, v_descale=None, k_scale_cache=cache.k_token_scales.to(dev),
                      v_scale_cache=cache.v_token_scales.to(dev), kv_quant_mode=per_token_head_mode(case))
        else:
            kw.update(q_descale=None, k_descale=None, v_descale=None)
        if case.encoding("path", "2d") == "3d":  # split-KV buffers: taken when every sequence decodes one token
            segments = 16
            n, h, d = q.shape[0], case.num_heads, triton_padded(case.head_size)
            kw.update(seq_threshold_3D=len(case.sequences) + 1, num_par_softmax_segments=segments,
                      softmax_segm_output=torch.empty(n, h, segments, d, dtype=torch.float32, device=dev),
                      softmax_segm_max=torch.empty(n, h, segments, dtype=torch.float32, device=dev),
                      softmax_segm_expsum=torch.empty(n, h, segments, dtype=torch.float32, device=dev))
        unified_attention(q=q, k=k, v=v, out=buffer[: case.num_tokens], cu_seqlens_q=cu_seqlens(case.query_lens, dev),
                          max_seqlen_q=max(case.max_query_len, 1), seqused_k=inputs.seq_lens.to(dev),
                          max_seqlen_k=max(case.max_kv_len, 1), softmax_scale=case.softmax_scale,
                          causal=case.is_causal, window_size=(spellings.unbounded_left(case), -1),
                          block_table=inputs.block_table, softcap=case.soft_cap or 0.0,
                          alibi_slopes=None if inputs.alibi_slopes is None else inputs.alibi_slopes.to(dev),
                          use_alibi_sqrt=case.alibi is not None and case.alibi.convention == AlibiConvention.SQRT,
                          sinks=None if inputs.sinks is None else inputs.sinks.to(dev), **kw, **mask_rule_args(inputs))
        return Actual(output=buffer[: case.num_tokens], output_buffer=buffer, buffer_rows=case.num_tokens)


    repro_quantized = True

    def repro_kernel(self, case) -> str | None:
        from . import vllm_repro

        return vllm_repro.unified(case)


def triton_padded(n: int) -> int:
    return 1 << (n - 1).bit_length()


class PrefixPrefill(VllmBackend):
    """context_attention_fwd: new tokens from contiguous k/v, the context from vLLM's v0 paged cache."""

    compiled_per = ("dtypes", "head_sizes", "kv_cache_dtypes")  # Triton
    compiled_features = (Feature.ALIBI, Feature.SINKS, Feature.WINDOW)

    name = "vllm-prefix-prefill"
    module = "vllm.v1.attention.ops.prefix_prefill"
    description = "v1/attention/ops/prefix_prefill.context_attention_fwd (context in the paged_v0 cache)"
    caps = Capabilities(
        devices=frozenset({"cuda"}), dtypes=F16, head_sizes=(64, 80, 96, 112, 128, 256),
        attn_types=frozenset({AttentionType.DECODER}),
        features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SINKS, Feature.ALIBI, Feature.CONTEXT}),
        alibi_conventions=frozenset({AlibiConvention.SIGNED}), kv_layouts=frozenset({KVLayout.PAGED_V0}),
        # fp8 not declared: the kernel attends the new tokens from the unquantized k / v it is handed, the
        # oracle from the cache they were written to (a per-kernel convention the Case does not name yet).
        block_sizes=(16, 32), kv_cache_dtypes=frozenset({KVCacheDType.AUTO}),
        lse_base=None, requires_cache=True, reads_paged_cache=True, writes_output_buffer=True,
        # sliding_window: vLLM's W; "None or <= 0" is no window (context_attention_fwd), a W past every key too
        encodings=(spellings.window_encodings(),))

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        if case.alibi is not None and case.sinks is not None:
            reasons.append("alibi with sinks: context_attention_fwd asserts 'Sinks arg is not supported with alibi'")
        return reasons

    def repro_kernel(self, case) -> str | None:
        from . import vllm_repro

        return vllm_repro.prefix_prefill(case, chunked=False)

    def run(self, inputs: Inputs) -> Actual:
        from vllm.v1.attention.ops.prefix_prefill import context_attention_fwd

        case = inputs.case
        dev = inputs.device
        key_cache, value_cache = inputs.cache.paged.tensors
        if case.kv_cache_dtype.is_fp8:  # the kernel takes uint8 storage and views it as kv_cache_dtype says
            key_cache, value_cache = key_cache.view(torch.uint8), value_cache.view(torch.uint8)
        new = case.num_tokens  # the new tokens (trailing padding rows of key/value are not theirs)
        buffer = poisoned_output(inputs)
        kvd = case.kv_cache_dtype.value if case.kv_cache_dtype.is_fp8 else "auto"
        context_attention_fwd(inputs.query, inputs.key[:new], inputs.value[:new], buffer[:new], kvd, key_cache,
                              value_cache, inputs.block_table, inputs.query_start_loc.to(dev), inputs.seq_lens.to(dev),
                              max(case.max_kv_len, 1), max(case.max_query_len, 1),
                              inputs.cache.k_scale.to(dev), inputs.cache.v_scale.to(dev),
                              alibi_slopes=None if inputs.alibi_slopes is None else inputs.alibi_slopes.to(dev),
                              sliding_window=spellings.sliding_window(case), sm_scale=case.softmax_scale,
                              sinks=None if inputs.sinks is None else inputs.sinks.to(dev))
        return Actual(output=buffer[:new], output_buffer=buffer, buffer_rows=new)


class TritonDecode(VllmBackend):
    """decode_attention_fwd: one query per sequence, the keys split in `num_kv_splits` partial states."""

    compiled_per = ("dtypes", "head_sizes")  # Triton
    compiled_features = (Feature.SOFT_CAP,)

    name = "vllm-triton-decode"
    module = "vllm.v1.attention.ops.triton_decode_attention"
    description = "v1/attention/ops/triton_decode_attention.decode_attention_fwd (split-KV decode), LSE"
    caps = Capabilities(
        devices=frozenset({"cuda"}), dtypes=F16, head_sizes=(64, 96, 128, 256),
        attn_types=frozenset({AttentionType.DECODER}),
        features=frozenset({Feature.GQA, Feature.MQA, Feature.SOFT_CAP, Feature.CONTEXT}),
        kv_layouts=frozenset({KVLayout.FLASH_NHD}), block_sizes=(1, 16, 32, 64),
        kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3}), lse_base=LseBase.E,
        requires_cache=True, reads_paged_cache=True, max_query_len=1, min_query_len=1, min_kv_len=1,
        encodings=(("num_kv_splits", ("8", "1", "4", "16")),))

    repro_quantized = True

    def repro_kernel(self, case) -> str | None:
        from . import vllm_repro

        return vllm_repro.decode(case)

    def run(self, inputs: Inputs) -> Actual:
        from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd

        case = inputs.case
        dev = inputs.device
        pool = inputs.cache.paged
        b, h = case.num_tokens, case.num_heads
        splits = int(case.encoding("num_kv_splits", "8"))
        out = torch.full((b, h, case.value_size), float("nan"), dtype=case.dtype.torch, device=dev)
        lse = torch.full((b, h), float("nan"), dtype=torch.float32, device=dev)
        logits = torch.empty(b, h, splits, case.value_size + 1, dtype=torch.float32, device=dev)
        scales = {}
        if case.kv_cache_dtype.is_fp8:
            scales = dict(k_scale=inputs.cache.k_scale.to(dev)[0], v_scale=inputs.cache.v_scale.to(dev)[0])
        decode_attention_fwd(inputs.query, pool.key_view(), pool.value_view(), out, lse, inputs.block_table,
                             inputs.seq_lens.to(dev), logits, splits, case.softmax_scale, page_size=pool.block_size,
                             logit_cap=case.soft_cap or 0.0, **scales)
        return Actual(output=out, lse=lse)


class MergedStates(Fa3Paged):
    """A chunked prefill as vLLM's FlashAttention backend computes it: FA3 over the cached context
    (every query sees all of it) and FA3 over the new tokens (causal), merged by merge_attn_states."""

    def __init__(self, name: str, kernel: str) -> None:
        super().__init__(name)
        self.kernel = kernel
        self.module = ("vllm._custom_ops" if kernel == "cuda" else "vllm.v1.attention.ops.triton_merge_attn_states")
        self.description = f"FA3 prefix (context) + FA3 suffix (new tokens) merged by vLLM's {kernel} merge_attn_states"
        self.caps = replace(self.caps, attn_types=frozenset({AttentionType.DECODER}),
                            features=frozenset({Feature.GQA, Feature.MQA, Feature.SOFT_CAP, Feature.CONTEXT}),
                            kv_cache_dtypes=frozenset({KVCacheDType.AUTO}),  # the new tokens are not quantized
                            encodings=(("num_splits", SPLITS),), writes_output_buffer=False)

    def repro_kernel(self, case) -> str | None:
        return None  # two FA3 calls and a merge: replay with attnref

    def run(self, inputs: Inputs) -> Actual:
        if self.kernel == "cuda":
            from vllm._custom_ops import merge_attn_states
        else:
            from vllm.v1.attention.ops.triton_merge_attn_states import merge_attn_states
        case = inputs.case
        dev = inputs.device
        pool = inputs.cache.paged
        context = inputs.context_lens.to(dev, torch.int32)
        prefix, prefix_lse = self.call(inputs, inputs.query, pool.key_view(), pool.value_view(), causal=False,
                                       seqused_k=context, max_k=max([s.context_len for s in case.sequences] + [1]),
                                       block_table=inputs.block_table)
        new = case.num_tokens
        suffix, suffix_lse = self.call(inputs, inputs.query, inputs.key[:new], inputs.value[:new], causal=True,
                                       cu_k=cu_seqlens(case.query_lens, dev), max_k=case.max_query_len)
        out = torch.full_like(suffix, float("nan"))
        out_lse = torch.full_like(suffix_lse, float("nan"))
        merge_attn_states(out, prefix, prefix_lse.contiguous(), suffix, suffix_lse.contiguous(), out_lse)
        lse, notes = tokens_first_lse(out_lse, case.num_tokens, case.num_heads, documented="HT")
        return Actual(output=out, lse=lse, notes=notes)


class WritesCache(Fa3Paged):
    """vLLM's cache writer stores the new tokens through slot_mapping (padding slots -1 skipped), FA3 reads."""

    def __init__(self) -> None:
        super().__init__("vllm-fa3-writes-cache")
        self.module = "vllm._custom_ops"
        self.description = "vLLM reshape_and_cache_flash (CUDA op or Triton) then FA3; the written cache compared bit for bit"
        self.caps = replace(self.caps, writes_cache=True, attn_types=frozenset({AttentionType.DECODER}),
                            encodings=(("writer", ("cuda", "triton")),))

    def repro_kernel(self, case) -> str | None:
        # FA3 reading the cache the script writes in plain torch: the writer's bytes are compared by attnref itself
        from . import vllm_repro

        return vllm_repro.fa3(case)

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        dev = inputs.device
        cache = inputs.cache_before_write.clone()
        pool = cache.paged
        kvd = _fp8_dtype(case) if case.kv_cache_dtype.is_fp8 else "auto"
        k_scale, v_scale = cache.k_scale.to(dev).reshape(1), cache.v_scale.to(dev).reshape(1)
        if case.encoding("writer", "cuda") == "cuda":
            from vllm import _custom_ops as ops

            ops.reshape_and_cache_flash(inputs.key, inputs.value, pool.key_view(), pool.value_view(),
                                        inputs.slot_mapping.to(dev), kvd, k_scale, v_scale)
        else:
            from vllm.v1.attention.ops.triton_reshape_and_cache_flash import triton_reshape_and_cache_flash

            triton_reshape_and_cache_flash(inputs.key, inputs.value, pool.key_view(), pool.value_view(),
                                           inputs.slot_mapping.to(dev), kvd, k_scale, v_scale)
        buffer = poisoned_output(inputs)
        out, lse = self.call(inputs, inputs.query, pool.key_view(), pool.value_view(), causal=True,
                             seqused_k=inputs.seq_lens.to(dev), max_k=case.max_kv_len, block_table=inputs.block_table,
                             window=flash_window(case), sinks=inputs.sinks, out=buffer[: case.num_tokens])
        lse, notes = tokens_first_lse(lse, case.num_tokens, case.num_heads, documented="HT")
        return Actual(output=buffer[: case.num_tokens], lse=lse, output_buffer=buffer, buffer_rows=case.num_tokens,
                      written_cache=cache, notes=notes)


def vllm_backends() -> list[Backend]:
    return [Fa3Paged(), TritonUnified(), PrefixPrefill(), TritonDecode(), MergedStates("vllm-merge-cuda", "cuda"),
            MergedStates("vllm-merge-triton", "triton"), WritesCache()]


