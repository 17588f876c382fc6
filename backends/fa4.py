"""FlashAttention-4 (`flash_attn.cute`, CuTe-DSL kernels) through its varlen entry point.

Two backends, two code paths of one function:
- `fa4-varlen`: packed queries and keys with cu_seqlens_q / cu_seqlens_k (contiguous K/V);
- `fa4-paged`: the paged cache itself, `page_table` = the block table, `seqused_k` = seq_lens, K/V
  the flash_nhd key/value views `(num_blocks, block_size, H_kv, D)` (no copy).
Kernel-level cases (any causal flag, window pair, q > k) go through both, `fa4-paged`'s through the page table.
Windows are flash-attn's (left, right) with None unbounded, and (-1, -1) as no window (`_resolve_causal_local_window`
resets a pair of negative sides); a lone -1 beside a bounded side is a bound in FA4, unlike flash-attn 2/3, so
the -1 spelling is drawn for whole pairs only (`window_size` below). Sinks are `learnable_sink`; soft-cap is
`softcap`. ALiBi needs a CuTe score_mod and chunked local a mask_mod: not declared. FA4 documents
that a page loaded by TMA is read whole, so a partially used last page must hold finite values:
`fa4-paged` declares finite canaries only.

Declared from `flash_attn.cute.flash_attn_varlen_func`'s signature and docstring (flash-attn-4 4.0.0b36:
cu_seqlens_q / cu_seqlens_k, seqused_k, page_table, causal, window_size (left, right), softcap,
learnable_sink, return_lse, head dims up to 256 with head_dim_v allowed to differ); narrowed by fuzzing:
the paged path's head dims (multiples of 16 without TMA pages).
"""
from __future__ import annotations

import os
import time

import torch

from reference.case import AttentionType, DType, KVLayout
from reference.inputs import Inputs

from . import spellings
from ._convert import cu_seqlens, first_call_note, tokens_first_lse
from .base import PTX_TANH_APPROX, Actual, Backend, Capabilities, Feature, LseBase, cuda_library_reason

HEAD_SIZES = (32, 40, 64, 72, 80, 96, 112, 128, 160, 192, 200, 256)
FEATURES = frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SOFT_CAP, Feature.SINKS, Feature.CONTEXT,
                      Feature.HEAD_SIZE_V, Feature.EMPTY_QUERY, Feature.MORE_QUERIES_THAN_KEYS})
_SEEN_VARIANTS: set = set()
# FA4 keeps the kernels it compiled on disk when this is set (flash_attn/cute/cache_utils.py, file-locked):
# a campaign's workers then compile each variant once between them, not once each. A user's setting wins.
CUTE_CACHE_ENV = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"


def share_compiled_kernels() -> None:
    """Turn on FA4's on-disk kernel cache before its module is imported (it reads the variable then)."""
    os.environ.setdefault(CUTE_CACHE_ENV, "1")


def _mask_kind(case) -> tuple[bool, bool, bool]:
    """(causal, left side bounded, right side bounded) as FA4 resolves the arguments this backend passes before it
    picks a kernel (flash_attn/cute/interface.py, _resolve_causal_local_window, 4.0.0b36): two negative sides are no
    window, the causal flag bounds the right side at 0, and a window bounded at 0 on the right only is causal. Each
    triple is a kernel of its own, so a spelling of "unbounded" as numbers is another compile."""
    left, right = resolved_window(case)
    if left is None and right is None:
        return (False, False, False)
    if left is None and right == 0:
        return (True, False, False)
    return (False, left is not None, right is not None)


def window_size(case) -> tuple[int | None, int | None]:
    """FA4's `window_size` for the case. An unbounded side beside a bounded one is None even where the case spells
    "unbounded" as -1: FA4 resets only a pair of negative sides, and keeps a lone -1 as the bound it is (block_info.py,
    mask.py, 4.0.0b36). flash-attn 2/3's causal spelling (-1, 0) is thus a window of no key in FA4: in untold campaigns
    on two H200s, every one of fa4-varlen's 6,509 (cold) and 2,628 (warm) failing rows the ledger did not explain had
    such a lone -1, and 90-93 % of the rows with one failed (NaN/Inf LSE, outputs off by up to 143)
    (benchmarks/results/campaigns/fa4-lone-minus-one-window-2026-11-27.md)."""
    return spellings.window_pair(case, lone_minus_one=False)


def resolved_window(case) -> tuple[int | None, int | None]:
    """The window FA4 computes with for the arguments this backend passes (interface.py, `_resolve_causal_local_window`,
    4.0.0b36): a pair of negative sides is no window, the causal flag bounds the right side at 0, and any other int side
    is a bound as it stands."""
    left, right = window_size(case)
    if left is not None and right is not None and left < 0 and right < 0:
        left = right = None
    if spellings.causal_flag(case):
        right = 0
    return left, right


def _variant(case) -> tuple:
    """What FA4 compiles a kernel for (first calls of a variant include the JIT compile). The soft-cap's value, not
    only its presence: the cap is a constant of the score_mod closure (`create_softcap_scoremod`), and the compile key
    holds `hash_callable(score_mod)`, which hashes the captured values. Without it, 455 of the 590 calls past a built
    variant that took over 0.5 s (about 6 s each, outside the compile slots) were soft-capped, in an untold 10-minute
    campaign on an H200 (campaigns/jit-untold-side-by-side-h200-2026-11-26.md)."""
    return (case.dtype, case.head_size, case.value_size, case.attn_type, _mask_kind(case),
            case.soft_cap, case.sinks is not None, case.num_heads // case.num_kv_heads,
            case.cache.block_size if case.cache is not None else None)


class FA4(Backend):
    library = "flash_attn.cute"
    compiled_per = ("dtypes", "head_sizes")  # CuTe DSL: a compile per dtype, head dim and mask flags
    compiled_features = (Feature.HEAD_SIZE_V, Feature.SINKS, Feature.SOFT_CAP, Feature.WINDOW)
    # a variant another worker compiled loads from FA4's disk cache inside this process (2-5 s on an H100). Once such
    # loads of waiting cases were held to the compile slots beside the builds, fa4-paged fell from 10.1 to 3.9 rows/s
    # in an untold 10-minute campaign (campaigns/jit-untold-h100-2026-11-26.md; the other change of that tree, tours by
    # share, is not yet measured apart)
    loads_in_process = True
    # the fields of _variant beyond the compile key that a focused shard can pin (fuzz.shapes): the GQA ratio (of the
    # head counts), the page size, the soft-cap's value, the attention type; the mask kind follows the drawn window
    jit_shape_per = ("heads", "block_sizes", "soft_caps", "attn_types")

    def __init__(self, name: str, paged: bool) -> None:
        self.name, self.paged = name, paged
        self.description = ("FlashAttention-4 flash_attn_varlen_func, " +
                            ("paged: page_table + seqused_k over the flash_nhd cache" if paged
                             else "packed cu_seqlens over contiguous K/V"))
        # flash_attn_varlen_func(..., softmax_scale=None, causal=False, window_size=(None, None), ...): a side is
        # None or an int (a number past the keys; -1 for both sides at once: window_size above); causal=True is the
        # window (left, 0); page_table may be wider than the longest sequence's pages.
        encodings = (spellings.window_encodings(), spellings.CAUSAL_ENCODINGS, spellings.SCALE_ENCODINGS)
        common = dict(devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
                      head_sizes=HEAD_SIZES, features=FEATURES, lse_base=LseBase.E,
                      # create_softcap_scoremod (flash_attn/cute/utils.py): cute.math.tanh(..., fastmath=True), the
                      # SFU's tanh.approx.f32
                      soft_cap_tanh_error=PTX_TANH_APPROX,
                      encodings=encodings + ((spellings.PAGE_TABLE_ENCODINGS,) if paged else ()))
        if paged:
            # Found by fuzzing: the paged path asserts "Paged KV does not support irregular head dim" for
            # head dims that are not multiples of 16 (40, 72) when pages are not loaded by TMA.
            common["head_sizes"] = tuple(h for h in HEAD_SIZES if h % 16 == 0)
            # The raw API takes a page table with any causal flag, window pair or q > k (paged_kernel cases).
            common["features"] = FEATURES | {Feature.PAGED_KERNEL}
            self.caps = Capabilities(**common, attn_types=frozenset({AttentionType.DECODER, AttentionType.ENCODER_DECODER,
                                                                     AttentionType.KERNEL}),
                                     kv_layouts=frozenset({KVLayout.FLASH_NHD}), block_sizes=(16, 32, 64, 128, 256),
                                     requires_cache=True, reads_paged_cache=True, finite_canaries_only=True)
        else:
            self.caps = Capabilities(**common, attn_types=frozenset(AttentionType))

    def jit_variant(self, case) -> tuple:
        """The CuTe DSL compiles per attention type, mask kind (_mask_kind), GQA ratio and page size too: on an H100
        such first calls within a built compile key were 997 of 1,416 first calls, 2-5 s each
        (campaigns/jit-untold-h100-2026-11-26.md)."""
        return tuple(str(v) for v in _variant(case))

    def availability(self) -> str | None:
        share_compiled_kernels()  # before the import below: FA4 reads the variable once, at import
        return cuda_library_reason("flash_attn.cute", "flash-attn-4 (flash_attn.cute)")

    def run(self, inputs: Inputs) -> Actual:
        share_compiled_kernels()
        from flash_attn.cute import flash_attn_varlen_func

        case = inputs.case
        dev = inputs.query.device
        kwargs = dict(cu_seqlens_q=cu_seqlens(case.query_lens, dev), max_seqlen_q=max(case.max_query_len, 1),
                      causal=spellings.causal_flag(case), window_size=window_size(case),
                      softcap=case.soft_cap or 0.0, return_lse=True, **spellings.scale_kwargs(case))
        if inputs.sinks is not None:
            kwargs["learnable_sink"] = inputs.sinks.to(dev)
        if self.paged:
            pool = inputs.cache.paged
            k, v = pool.key_view(), pool.value_view()
            kwargs.update(page_table=spellings.page_table(case, inputs.block_table), seqused_k=inputs.seq_lens.to(dev))
        else:
            k, v = torch.cat(inputs.keys), torch.cat(inputs.values)
            kwargs.update(cu_seqlens_k=cu_seqlens(case.kv_lens, dev), max_seqlen_k=max(case.max_kv_len, 1))
        t0 = time.perf_counter()
        out, lse = flash_attn_varlen_func(inputs.query, k, v, **kwargs)
        notes = dict(first_call_note(_SEEN_VARIANTS, _variant(case), t0), lse_shape=list(lse.shape))
        lse, layout = tokens_first_lse(lse, case.num_tokens, case.num_heads, documented="HT")  # varlen: [H, total_q]
        return Actual(output=out, lse=lse, notes=notes | layout)

    def repro_kernel(self, case) -> str | None:
        scale = ", softmax_scale=SCALE" if spellings.scale_kwargs(case) else ""
        text = f'''
def kernel(q, ks, vs):
    from flash_attn.cute import flash_attn_varlen_func

    kw = dict(cu_seqlens_q=cu_seqlens(0), max_seqlen_q=max(max(s[0] for s in SEQS), 1), causal={spellings.causal_flag(case)},
              window_size={window_size(case)!r}, softcap=SOFT_CAP or 0.0, return_lse=True{scale})
    if SINKS is not None:
        kw["learnable_sink"] = SINKS.to(DEVICE)
'''
        if self.paged:
            wide = case.encoding(spellings.PAGE_TABLE, "exact") == "wide"
            text += f'''    # FA4 loads whole pages (TMA): the slots past a sequence hold a finite filler, as FA4 documents
    k, v, table, _, seq_lens = paged_cache(ks, vs, {case.cache.block_size}, fill=30.0)
    if {wide}:  # the table spelled wide: trailing null-block entries
        table = torch.cat([table, torch.zeros(len(SEQS), {spellings.WIDE_TABLE_EXTRA}, dtype=table.dtype, device=DEVICE)], 1)
    kw.update(page_table=table, seqused_k=seq_lens)
'''
        else:
            text += '''    k, v = torch.cat(ks), torch.cat(vs)
    kw.update(cu_seqlens_k=cu_seqlens(1), max_seqlen_k=max(max(s[1] for s in SEQS), 1))
'''
        return text + '''    out, lse = flash_attn_varlen_func(q, k, v, **kw)
    return out, lse.float().transpose(0, 1)  # varlen LSE comes as [H, total_q]
'''


def fa4_backends() -> list[Backend]:
    return [FA4("fa4-varlen", paged=False), FA4("fa4-paged", paged=True)]
