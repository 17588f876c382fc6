"""xformers' fmha operators, one backend per operator, each through its own attention-bias objects.

- `xformers-cutlass` (cutlassF-pt, torch's memory-efficient kernel) and `xformers-fa2` (fa2F-pt,
  torch's flash kernel): packed sequences with the block-diagonal masks, causal from the top left or the
  bottom right, local windows, and fa2's two-sided LocalAttentionFromBottomRightMask per sequence
  (`backends.xformers_masks`: the raw region as the API takes it), contiguous K/V;
- `xformers-triton-splitk` (triton_splitKF): the paged cache itself (flash_nhd key/value views as
  [1, num_blocks * block_size, H_kv, D]) with PagedBlockDiagonal(CausalWithOffset)PaddedKeysMask, causal
  (bottom-right) or not.
GQA uses xformers' 5-D BMGHK form. LSE comes from the partial / requires-grad entry points.

xformers 0.0.35's C++ extension targets torch 2.10; where it does not load, every operator refuses
with "xFormers wasn't build with CUDA support" although these three only call torch or Triton.
`ATTNREF_XFORMERS_FORCE_CUDA_FLAG=1` forces that flag (a version-mismatch workaround, reported in
the backend description); with a matching build it is never needed.

Declared from xformers' fmha documentation (`xformers.ops.memory_efficient_attention` and the
`xformers.ops.fmha.attn_bias` classes named above) and each operator's documented class attributes
(`SUPPORTED_DTYPES`, `SUPPORTED_MAX_K`, `SUPPORTED_ATTN_BIAS_TYPES`, `SUPPORTS_BMGHK` of xformers
0.0.35, written out below); narrowed by fuzzing where an operator refused (recorded at the declaration).
"""
from __future__ import annotations

import math
import os

import torch

from reference.case import AttentionType, CausalAlignment, DType, KVLayout
from reference.inputs import Inputs

from . import spellings, xformers_masks
from ._convert import unpack_varlen_lse
from .base import Actual, Backend, Capabilities, Feature, LseBase, Unsupported, cuda_library_reason

FORCE_ENV = "ATTNREF_XFORMERS_FORCE_CUDA_FLAG"
OPS = {"xformers-cutlass": ("cutlass", "FwOp"), "xformers-fa2": ("flash", "FwOp"),
       "xformers-triton-splitk": ("triton_splitk", "FwOp")}


def _fmha():
    import xformers.ops.fmha as fmha
    import xformers.ops.fmha.common as common

    if not common._built_with_cuda and os.environ.get(FORCE_ENV) == "1":
        common._built_with_cuda = True  # see the module docstring
    return fmha


class XformersOp(Backend):
    library = "xformers"

    def __init__(self, name: str) -> None:
        self.name = name
        self.paged = name == "xformers-triton-splitk"
        module, _ = OPS[name]
        self.description = f"xformers.ops.fmha.{module}.FwOp" + (" over the paged cache" if self.paged else " packed")
        features = {Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.CONTEXT, Feature.MORE_QUERIES_THAN_KEYS}
        if name == "xformers-cutlass":
            features.add(Feature.HEAD_SIZE_V)
        if self.paged:  # split-K is a Triton kernel: a compile per dtype and head size
            self.compiled_per = ("dtypes", "head_sizes")
            self.caps = Capabilities(devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
                                     head_sizes=(64, 128, 256),
                                     features=frozenset(features - {Feature.WINDOW} | {Feature.PAGED_KERNEL}),
                                     # the raw region: the paged masks with or without the causal offset
                                     attn_types=frozenset({AttentionType.DECODER, AttentionType.ENCODER_DECODER,
                                                           AttentionType.KERNEL}),
                                     kv_layouts=frozenset({KVLayout.FLASH_NHD}), block_sizes=(64, 128, 256),
                                     # Found by fuzzing: "Variable query len is not supported for causal masks".
                                     max_query_len=16, uniform_query_len=True, requires_cache=True, reads_paged_cache=True,
                                     finite_canaries_only=True, lse_base=LseBase.E,
                                     encodings=(spellings.SCALE_ENCODINGS,))
        else:
            dtypes = {DType.FLOAT16, DType.BFLOAT16} | ({DType.FLOAT32} if name == "xformers-cutlass" else set())
            self.caps = Capabilities(devices=frozenset({"cuda"}), dtypes=frozenset(dtypes),
                                     head_sizes=(32, 64, 96, 128, 256), features=frozenset(features),
                                     attn_types=frozenset({AttentionType.DECODER, AttentionType.ENCODER,
                                                           AttentionType.KERNEL}),
                                     causal_alignments=frozenset(CausalAlignment), lse_base=LseBase.E,
                                     # a row that sees no key, as the torch kernels under the two operators return it
                                     # (measured on the H100: cutlassF-pt 0, fa2F-pt +inf; aten's own declarations)
                                     empty_row_lse=0.0 if name == "xformers-cutlass" else math.inf,
                                     # memory_efficient_attention(..., scale: Optional[float] = None); an
                                     # unbounded side as no mask, or a window W or sides reaching the edge / beyond
                                     encodings=(spellings.SCALE_ENCODINGS, spellings.window_encodings(
                                         (spellings.NONE, spellings.EDGE, spellings.BEYOND))))

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        if not self.paged:
            reasons += xformers_masks.refusals(case, OPS[self.name][0])
        return reasons

    def _op(self):
        module, attr = OPS[self.name]
        fmha = _fmha()
        return getattr(getattr(fmha, module), attr)

    def availability(self) -> str | None:
        reason = cuda_library_reason("xformers", "xformers")
        if reason is not None and not reason.startswith("xformers not importable"):
            return reason
        try:
            import xformers.ops.fmha.common as common

            op = self._op()
        except Exception as e:
            hint = ""
            if "flash_attn_interface" in str(e) or "cannot import name 'ops'" in str(e):
                hint = (" (a `flash_attn` without flash_attn_interface, e.g. flash-attn-4's, is on the path: "
                        "xformers imports any flash_attn as FA2; run xformers without it)")
            return f"xformers not importable: {type(e).__name__}: {e}{hint}"
        if not common._built_with_cuda:
            return (f"xformers' C++ extension did not load (built for another torch); set {FORCE_ENV}=1 to force "
                    "its CUDA flag for operators that only call torch/Triton")
        if not op.is_available():
            return f"operator {op.NAME} is not available in this build"
        return None

    def _bias(self, inputs: Inputs, plan: xformers_masks.MaskPlan | None):
        """The attn_bias object; the masks' own checks (__post_init__) refuse with xformers' words."""
        case = inputs.case
        try:
            if not self.paged:
                return xformers_masks.build(plan, case.query_lens, case.kv_lens, inputs.query.device)
            from xformers.ops.fmha import attn_bias as ab

            cls = ab.PagedBlockDiagonalCausalWithOffsetPaddedKeysMask if case.is_causal else ab.PagedBlockDiagonalPaddedKeysMask
            return cls.from_seqlens(q_seqlen=case.query_lens, kv_seqlen=case.kv_lens, block_tables=inputs.block_table,
                                    page_size=case.cache.block_size, device=inputs.query.device)
        except (ValueError, RuntimeError) as e:
            raise Unsupported(f"xformers attn_bias refused: {e}") from e

    def _call(self, q, k, v, bias, case):
        """One operator call: [1, M, G, H/G, D] in, (out, LSE) back; xformers' refusals are Unsupported."""
        fmha = _fmha()
        op = self._op()
        per = case.num_heads // case.num_kv_heads
        k, v = k.expand(-1, -1, -1, per, -1), v.expand(-1, -1, -1, per, -1)
        entry = fmha.memory_efficient_attention_partial if getattr(op, "SUPPORTS_PARTIAL", False) \
            else fmha.memory_efficient_attention_forward_requires_grad
        try:
            out, lse = entry(q, k, v, attn_bias=bias, op=op, **spellings.scale_kwargs(case, "scale"))
        except ValueError as e:  # _ensure_op_supports_or_raise: "Operator ... does not support inputs"
            if "does not support" in str(e):
                raise Unsupported(f"xformers: {e}") from e
            raise
        if not lse.numel() and q.shape[1]:
            # Seen on the H100 (fa2F-pt): a call without a single key returns a 0-element LSE; the kernel did not run
            raise RuntimeError(f"{op.NAME} returned no LSE (a call without keys)")
        return out, lse

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        g, per = case.num_kv_heads, case.num_heads // case.num_kv_heads
        plan = None if self.paged else xformers_masks.plan(case)
        bias = self._bias(inputs, plan)
        if plan is not None and plan.per_sequence:
            return self._run_per_sequence(inputs, bias)
        q = inputs.query.reshape(1, case.num_tokens, g, per, case.head_size)
        if self.paged:
            pool = inputs.cache.paged
            k = pool.key_view().reshape(1, -1, g, 1, case.head_size)
            v = pool.value_view().reshape(1, -1, g, 1, case.value_size)
        else:
            k = torch.cat(inputs.keys)[None, :, :, None]
            v = torch.cat(inputs.values)[None, :, :, None]
        out, lse = self._call(q, k, v, bias, case)
        out = out.reshape(case.num_tokens, case.num_heads, case.value_size)
        notes = {"lse_shape": list(lse.shape)}
        # [B, G, H/G, M] per sequence (rows padded) or [1, G, H/G, >= total] packed: found by fuzzing.
        lse = unpack_varlen_lse(lse.reshape(lse.shape[0], case.num_heads, -1), case.query_lens)
        return Actual(output=out.to(case.dtype.torch), lse=lse, notes=notes)

    def _run_per_sequence(self, inputs: Inputs, bias) -> Actual:
        """A two-sided window: LocalAttentionFromBottomRightMask is dense ([B, M, ...], no block diagonal), so each
        sequence is its own call; sequences without queries are not launched."""
        case = inputs.case
        g, per = case.num_kv_heads, case.num_heads // case.num_kv_heads
        outs, lses = [], []
        for i, s in enumerate(case.sequences):
            if not s.query_len:
                continue
            a = case.query_starts[i]
            q = inputs.query[a:a + s.query_len].reshape(1, s.query_len, g, per, case.head_size)
            out, lse = self._call(q, inputs.keys[i][None, :, :, None], inputs.values[i][None, :, :, None], bias, case)
            outs.append(out.reshape(s.query_len, case.num_heads, case.value_size))
            lses.append(unpack_varlen_lse(lse.reshape(1, case.num_heads, -1), [s.query_len]))
        return Actual(output=torch.cat(outs).to(case.dtype.torch), lse=torch.cat(lses),
                      notes={"calls": "per sequence (LocalAttentionFromBottomRightMask)"})

    def repro_kernel(self, case) -> str | None:
        module, attr = OPS[self.name]
        scale = ", scale=SCALE" if spellings.scale_kwargs(case, "scale") else ""
        force = (f"    common._built_with_cuda = True  # xformers' C++ extension may target another torch; these "
                 f"operators call only torch or Triton ({FORCE_ENV})\n")
        plan = xformers_masks.plan(case)
        call = f'''    k, v = k.expand(-1, -1, -1, GROUP, -1), v.expand(-1, -1, -1, GROUP, -1)
    if getattr(op, "SUPPORTS_PARTIAL", False):
        out, lse = fmha.memory_efficient_attention_partial(q, k, v, attn_bias=bias, op=op{scale})
    else:
        out, lse = fmha.memory_efficient_attention_forward_requires_grad(q, k, v, attn_bias=bias, op=op{scale})
    if not lse.numel():  # a call without keys: fa2F-pt returns no LSE (attnref reports it so)
        raise RuntimeError(f"{{op.NAME}} returned no LSE (a call without keys)")
'''
        if self.paged:
            cls = "PagedBlockDiagonalCausalWithOffsetPaddedKeysMask" if case.is_causal else "PagedBlockDiagonalPaddedKeysMask"
            body = f'''    q = q.reshape(1, -1, H_KV, GROUP, D)
    k_cache, v_cache, table, _, _ = paged_cache(ks, vs, {case.cache.block_size}, fill=30.0)  # finite filler
    k, v = k_cache.reshape(1, -1, H_KV, 1, D), v_cache.reshape(1, -1, H_KV, 1, D_V)
    bias = ab.{cls}.from_seqlens(q_seqlen=[s[0] for s in SEQS], kv_seqlen=[s[1] for s in SEQS], block_tables=table,
                                 page_size={case.cache.block_size}, device=DEVICE)
{call}'''
        elif plan.per_sequence:  # a dense two-sided window mask: one call per sequence
            indented = "".join("    " + line + "\n" for line in call.splitlines())
            body = f'''    bias = {xformers_masks.source(plan)}
    outs, start, queries = [], 0, q
    for (q_len, _, _), k, v in zip(SEQS, ks, vs):
        if not q_len:
            continue
        q = queries[start:start + q_len].reshape(1, q_len, H_KV, GROUP, D)
        start += q_len
        k, v = k[None, :, :, None], v[None, :, :, None]
{indented}        outs.append(out.reshape(q_len, H, D_V))
    out = torch.cat(outs)
'''
        else:
            body = f'''    q = q.reshape(1, -1, H_KV, GROUP, D)
    k, v = torch.cat(ks)[None, :, :, None], torch.cat(vs)[None, :, :, None]
    bias = {xformers_masks.source(plan)}
{call}'''
        return f'''
def kernel(q, ks, vs):
    """xformers.ops.fmha.{module}.{attr}: query heads grouped [1, tokens, H_KV, GROUP, D], keys expanded per group."""
    import xformers.ops.fmha as fmha
    import xformers.ops.fmha.common as common
    from xformers.ops.fmha import attn_bias as ab

{force}    op = fmha.{module}.{attr}
{body}    return out.reshape(-1, H, D_V).to(DTYPE), None  # the LSE's layout varies by operator: attnref unpacks it
'''


def xformers_backends() -> list[Backend]:
    return [XformersOp(name) for name in OPS]
