"""FlexAttention: the whole batch in one call, sequences separated by a document mask.

Queries [1, H, num_tokens, D] and keys [1, H_kv, total_keys, D] are packed; `mask_mod` admits a key
only from the query's own sequence and under the Case's causal / window / chunk rules; ALiBi and
soft-cap are a `score_mod`. Captured metadata are tensors, so the compiled variant does not recompile
per case. `flex` runs eagerly; `flex-compiled` goes through torch.compile (inductor).

Declared from the documentation of `torch.nn.attention.flex_attention` (`score_mod`, `mask_mod` /
`create_block_mask`, `enable_gqa`, `return_lse`, `kernel_options` incl. `BACKEND`) and
`torch.nn.attention.experimental._paged_attention.PagedAttention` for the paged variants: any mask or
score rule a function can express is declared; the FLASH backend's compile limits were found by fuzzing.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import torch

from reference.case import AlibiConvention, AttentionType, CausalAlignment, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs

from . import spellings
from ._convert import key_offset, position_rule
from .base import Actual, Backend, Capabilities, Feature, LseBase

FEATURES = frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.ALIBI, Feature.SOFT_CAP,
                      Feature.CHUNKED_LOCAL, Feature.BLOCK_SPARSE, Feature.CONTEXT, Feature.MORE_QUERIES_THAN_KEYS})
_COMPILED = {}


def _packed_metadata(inputs: Inputs, device) -> dict[str, torch.Tensor]:
    """Per packed query and key: sequence id and logical position."""
    case = inputs.case
    q_seq, q_pos, k_seq, k_pos = [], [], [], []
    for i, s in enumerate(case.sequences):
        q_seq.append(torch.full((s.query_len,), i))
        q_pos.append(torch.arange(s.query_len) + key_offset(case, i))
        k_seq.append(torch.full((case.kv_lens[i],), i))
        k_pos.append(torch.arange(case.kv_lens[i]))
    return {name: torch.cat(parts).to(device) for name, parts in
            (("q_seq", q_seq), ("q_pos", q_pos), ("k_seq", k_seq), ("k_pos", k_pos))}


class FlexBackend(Backend):
    library = "torch"

    def __init__(self, name: str, compiled: bool, device: str, kernel: str | None = None) -> None:
        self.name, self.compiled, self._device, self.kernel = name, compiled, device, kernel
        self.compiled_per = ("dtypes", "head_sizes") if compiled else ()  # inductor compiles per dtype and shape
        self.compiled_features = (Feature.ALIBI, Feature.SOFT_CAP, Feature.WINDOW) if compiled else ()  # and mods
        self.description = ("flex_attention " + ("through torch.compile" if compiled else "eager") +
                            ", one packed call, document mask_mod, ALiBi/soft-cap score_mod" +
                            (f", kernel_options BACKEND={kernel!r}" if kernel else ""))
        # Found by the convention probes: inductor's CPU flex_attention lowering refuses return_lse
        # ("torch.compile on CPU only supports inference and `return_lse` is not supported yet").
        self.returns_lse = not (compiled and device == "cpu")
        self.caps = Capabilities(devices=frozenset({device}), dtypes=frozenset(DType),
                                 head_sizes=(16, 32, 64, 128) if compiled else (16, 24, 32, 40, 64, 72, 80, 96, 128),
                                 attn_types=frozenset(AttentionType), features=FEATURES,
                                 lse_base=LseBase.E if self.returns_lse else None,
                                 causal_alignments=frozenset(CausalAlignment),
                                 encodings=(spellings.SCALE_ENCODINGS,))  # flex_attention(..., scale=None)

    def device(self) -> str:
        return self._device

    def availability(self) -> str | None:
        if self._device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device"
        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError as e:
            return f"torch.nn.attention.flex_attention missing: {e}"
        if self.kernel is not None:
            return _kernel_backend_reason(self.kernel)
        return None

    def _function(self):
        from torch.nn.attention.flex_attention import flex_attention

        if not self.compiled:
            return flex_attention
        if "fn" not in _COMPILED:
            _COMPILED["fn"] = torch.compile(flex_attention, dynamic=True)
        return _COMPILED["fn"]

    def _options(self) -> dict:
        return {"kernel_options": {"BACKEND": self.kernel}} if self.kernel else {}

    def run(self, inputs: Inputs) -> Actual:
        from torch.nn.attention.flex_attention import create_block_mask

        case = inputs.case
        dev = inputs.query.device
        meta = _packed_metadata(inputs, dev)
        q_seq, q_pos, k_seq, k_pos = meta["q_seq"], meta["q_pos"], meta["k_seq"], meta["k_pos"]
        rule = position_rule(case, dev, tensor_scalars=self.kernel == "FLASH")

        def mask_mod(b, h, qi, ki):
            return (q_seq[qi] == k_seq[ki]) & rule(h, q_pos[qi], k_pos[ki])

        score_fn = _score_fn(inputs, dev, tensor_scalars=self.kernel == "FLASH")

        def score_mod(score, b, h, qi, ki):
            return score_fn(score, h, q_pos[qi], k_pos[ki])

        cap, slopes = case.soft_cap, inputs.alibi_slopes

        n_q, n_k = q_seq.numel(), k_seq.numel()
        q = inputs.query.transpose(0, 1)[None]
        k = torch.cat(inputs.keys).transpose(0, 1)[None]
        v = torch.cat(inputs.values).transpose(0, 1)[None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            block_mask = create_block_mask(mask_mod, None, None, n_q, n_k, device=dev)
            result = self._function()(q, k, v, score_mod=score_mod if (cap or slopes is not None) else None,
                                      block_mask=block_mask, **spellings.scale_kwargs(case, "scale"),
                                      enable_gqa=case.num_heads != case.num_kv_heads, return_lse=self.returns_lse,
                                      **self._options())
        if not self.returns_lse:
            return Actual(output=result[0].transpose(0, 1))
        out, lse = result
        return Actual(output=out[0].transpose(0, 1), lse=lse[0].transpose(0, 1).float())

    def repro_kernel(self, case) -> str | None:
        if case.alibi is not None or type(self) is not FlexBackend and self.kernel is None:
            return None  # ALiBi's score_mod and the paged pool are not written out
        flash = self.kernel == "FLASH"
        fn = "torch.compile(flex_attention, dynamic=True)" if self.compiled else "flex_attention"
        options = f", kernel_options={{'BACKEND': {self.kernel!r}}}" if self.kernel else ""
        scale = ", scale=SCALE" if spellings.scale_kwargs(case, "scale") else ""
        lse = "out, lse = result\n    return out[0].transpose(0, 1), lse[0].transpose(0, 1).float()" if self.returns_lse \
            else "return result[0].transpose(0, 1), None"
        return f'''
def kernel(q, ks, vs):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # one packed call: a document mask over the sequences, positions as the case aligns them
    q_seq = torch.cat([torch.full((s[0],), i) for i, s in enumerate(SEQS)]).to(DEVICE)
    k_seq = torch.cat([torch.full((s[1],), i) for i, s in enumerate(SEQS)]).to(DEVICE)
    q_pos = torch.cat([torch.arange(s[0]) + s[2] for s in SEQS]).to(DEVICE)
    k_pos = torch.cat([torch.arange(s[1]) for s in SEQS]).to(DEVICE)
    const = (lambda x: torch.tensor(x, device=DEVICE)) if {flash} else (lambda x: x)  # FLASH inlines no Python scalar
    left, right = [None if w is None else const(w) for w in WINDOW]
    chunk, cap = (None if CHUNK is None else const(CHUNK)), (None if SOFT_CAP is None else const(SOFT_CAP))

    def mask_mod(b, h, qi, ki):
        qp, kp = q_pos[qi], k_pos[ki]
        ok = q_seq[qi] == k_seq[ki]
        if CAUSAL:
            ok = ok & (kp <= qp)
        if left is not None:
            ok = ok & (qp - kp <= left)
        if right is not None:
            ok = ok & (kp - qp <= right)
        if chunk is not None:
            ok = ok & (qp // chunk == kp // chunk)
        return ok

    def score_mod(score, b, h, qi, ki):
        return cap * torch.tanh(score / cap)

    block_mask = create_block_mask(mask_mod, None, None, q_seq.numel(), k_seq.numel(), device=DEVICE)
    k, v = torch.cat(ks), torch.cat(vs)
    result = {fn}(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                  score_mod=score_mod if cap is not None else None, block_mask=block_mask, enable_gqa=H != H_KV,
                  return_lse={self.returns_lse}{scale}{options})
    {lse}
'''


def _score_fn(inputs: Inputs, dev, tensor_scalars: bool = False):
    """score(score, h, q_pos, k_pos): soft-cap then ALiBi in the Case's convention.

    tensor_scalars: capture the soft-cap as a device tensor (the FLASH kernel backend cannot inline
    a captured Python float, which dynamic compilation turns into a symbol)."""
    case = inputs.case
    slopes = None if inputs.alibi_slopes is None else inputs.alibi_slopes.to(dev)
    cap = case.soft_cap
    if cap is not None and tensor_scalars:
        cap = torch.tensor(cap, dtype=torch.float32, device=dev)
    symmetric_alibi = case.alibi is not None and case.alibi.convention == AlibiConvention.SYMMETRIC

    def score_fn(score, h, qp, kp):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            d = (kp - qp).to(score.dtype)
            score = score + slopes[h] * (-d.abs() if symmetric_alibi else d)
        return score

    return score_fn


class FlexPagedBackend(FlexBackend):
    """flex_attention reading the paged pool through torch's PagedAttention page table.

    The pool is re-laid out once into flex's [1, H_kv, num_blocks * block_size, D] (block order
    kept, canaries included); the page table and physical-to-logical map come from the Case's block
    table, and the logical mask / score mods are converted to physical key indices by the helper.
    """

    def __init__(self, name: str, compiled: bool, device: str) -> None:
        super().__init__(name, compiled, device)
        self.description = ("flex_attention over the paged pool via torch's PagedAttention page table"
                            + (" (torch.compile)" if compiled else " (eager)"))
        self.caps = Capabilities(
            devices=frozenset({device}), dtypes=frozenset(DType), head_sizes=(16, 32, 64, 128),
            # the raw region: mask_mod is any function of (b, h, q, k), so kernel cases over the page table
            # (causal on or off, either alignment, more queries than keys) are what the API takes
            attn_types=frozenset({AttentionType.DECODER, AttentionType.ENCODER_DECODER, AttentionType.KERNEL}),
            causal_alignments=frozenset(CausalAlignment),
            features=FEATURES | {Feature.BLOCK_SPARSE, Feature.LAYERED_CACHE, Feature.PAGED_KERNEL}, lse_base=LseBase.E,
            kv_layouts=frozenset(KVLayout) - {KVLayout.PAGED_V0},
            # Found by fuzzing: inductor needs the page (KV block) size to be a multiple of its BLOCK_N.
            block_sizes=(128,) if compiled else (16, 32, 64, 128),
            kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.BFLOAT16, KVCacheDType.FLOAT16}),
            requires_cache=True, reads_paged_cache=True, finite_canaries_only=True,
            encodings=(spellings.SCALE_ENCODINGS,))

    def availability(self) -> str | None:
        reason = super().availability()
        if reason is None:
            try:
                from torch.nn.attention.experimental._paged_attention import PagedAttention  # noqa: F401
            except ImportError as e:
                return f"torch's PagedAttention helper missing: {e}"
        return reason

    def run(self, inputs: Inputs) -> Actual:
        from torch.nn.attention.experimental._paged_attention import PagedAttention
        from torch.nn.attention.flex_attention import create_block_mask

        case = inputs.case
        dev = inputs.query.device
        pool = inputs.cache.paged
        nb, bs, batch = pool.num_blocks, pool.block_size, len(case.sequences)
        k_pool = pool.key_view().permute(2, 0, 1, 3).reshape(1, case.num_kv_heads, nb * bs, case.head_size)
        v_pool = pool.value_view().permute(2, 0, 1, 3).reshape(1, case.num_kv_heads, nb * bs, case.value_size)
        paged = PagedAttention(nb, bs, batch, device=dev)
        for b, n in enumerate(case.kv_lens):
            pages = inputs.block_table[b, : -(-n // bs)].to(torch.int64)
            paged.page_table[b, : pages.numel()] = pages
            paged.physical_to_logical[b, pages] = torch.arange(pages.numel(), device=dev)
        max_q = max(case.max_query_len, 1)
        q = torch.zeros(batch, case.num_heads, max_q, case.head_size, dtype=inputs.query.dtype, device=dev)
        for b in range(batch):
            a, e = case.query_starts[b], case.query_starts[b + 1]
            q[b, :, : e - a] = inputs.query[a:e].transpose(0, 1)
        q_len = torch.tensor(case.query_lens, device=dev)
        kv_len = inputs.seq_lens.to(device=dev, dtype=torch.int64)
        offset = torch.tensor([key_offset(case, b) for b in range(batch)], device=dev)
        rule, score_fn = position_rule(case, dev), _score_fn(inputs, dev)

        def mask_mod(b, h, qi, ki):
            return (qi < q_len[b]) & (ki < kv_len[b]) & rule(h, qi + offset[b], ki)

        def score_mod(score, b, h, qi, ki):
            return score_fn(score, h, qi + offset[b], ki)

        logical_len = -(-max(case.max_kv_len, 1) // bs) * bs
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logical = create_block_mask(mask_mod, batch, None, max_q, logical_len, device=dev, BLOCK_SIZE=(128, bs))
            physical = paged.convert_logical_block_mask(logical, kv_len=kv_len)
            use_score = case.soft_cap is not None or inputs.alibi_slopes is not None
            out, lse = self._function()(q, k_pool, v_pool,
                                        score_mod=paged.get_score_mod(score_mod, kv_len) if use_score else None,
                                        block_mask=physical, **spellings.scale_kwargs(case, "scale"),
                                        enable_gqa=case.num_heads != case.num_kv_heads, return_lse=True)
        rows = [out[b, :, :n].transpose(0, 1) for b, n in enumerate(case.query_lens)]
        lses = [lse[b, :, :n].transpose(0, 1) for b, n in enumerate(case.query_lens)]
        return Actual(output=torch.cat(rows), lse=torch.cat(lses).float())


def _kernel_backend_reason(kernel: str) -> str | None:
    """Why flex_attention's kernel_options BACKEND=kernel cannot run here, or None."""
    import importlib.util
    import typing

    from torch.nn.attention import flex_attention as fa

    known = typing.get_args(getattr(fa, "_Backend", None)) or ()
    if kernel not in known:
        return f"torch {torch.__version__}'s flex_attention has no kernel BACKEND {kernel!r} (has: {list(known)})"
    if kernel == "FLASH" and importlib.util.find_spec("flash_attn") is None:
        return "BACKEND='FLASH' needs flash-attn-4 (flash_attn.cute), which is not installed"
    if kernel == "FLASH" and importlib.util.find_spec("flash_attn.cute") is None:
        return "BACKEND='FLASH' needs flash_attn.cute (flash-attn-4); the installed flash_attn has none"
    return None


class FlexFlashBackend(FlexBackend):
    """flex_attention compiled with kernel_options={"BACKEND": "FLASH"}: inductor renders the mask and
    score mods into FlashAttention-4's CuTe-DSL kernel instead of its Triton template."""

    def __init__(self) -> None:
        super().__init__("flex-flash-cuda", True, "cuda", kernel="FLASH")
        self.caps = replace(self.caps, dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
                            head_sizes=(64, 96, 128, 256))


class FlexDecodeBackend(FlexBackend):
    """flex_attention compiled with kernel_options={"BACKEND": "TRITON_DECODE"}: inductor's
    flex_decoding template (split over keys), which AUTO picks only for short query blocks. Declared
    for decode-shaped batches; the packed call puts every query of the batch in one block."""

    def __init__(self) -> None:
        super().__init__("flex-decode-cuda", True, "cuda", kernel="TRITON_DECODE")
        self.caps = replace(self.caps, attn_types=frozenset({AttentionType.DECODER, AttentionType.ENCODER_DECODER}),
                            max_query_len=1)


def flex_backends() -> list[Backend]:
    return [FlexBackend("flex", False, "cpu"), FlexBackend("flex-compiled", True, "cpu"),
            FlexBackend("flex-cuda", False, "cuda"), FlexBackend("flex-compiled-cuda", True, "cuda"),
            FlexPagedBackend("flex-paged", False, "cpu"), FlexPagedBackend("flex-paged-cuda", False, "cuda"),
            FlexPagedBackend("flex-paged-compiled-cuda", True, "cuda"), FlexFlashBackend(), FlexDecodeBackend()]
