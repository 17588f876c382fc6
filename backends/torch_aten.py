"""The varlen kernels under torch.ops.aten (CUDA): flash, memory-efficient and cuDNN, and the public
`torch.nn.attention.varlen` entry point.

Sequences are packed with cumulative offsets (cu_seqlens). The flash op's window arguments are
declared only where the installed op's schema has them, read when the backend is built: a torch
without them gets a narrower declaration, never a TypeError mid-campaign. (torch >= 2.12 adds
block_table / seqused_k for paged KV; the lent GPU has torch 2.11, so no adapter is written for it.)

Declared from the ops' own schemas (`torch.ops.aten._flash_attention_forward.default._schema` and its
efficient / cuDNN siblings: argument names, window sides, LSE outputs) and the docstring of
`torch.nn.attention.varlen.varlen_attn` (cu_seq_q / cu_seq_k, max_q / max_k, `is_causal`,
`return_aux=AuxRequest(lse=True)`); narrowed by fuzzing where a kernel refuses (cuDNN: keys required,
torch 2.11's flash build: no ALiBi although the schema has `alibi_slopes`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import replace

import torch

from reference.case import AttentionType, CausalAlignment, DType
from reference.inputs import Inputs

from . import spellings
from ._convert import per_sequence, tokens_first_lse, torch_before, unpack_varlen_lse, varlen_offsets
from .base import Actual, Backend, Capabilities, Feature, LseBase

HEAD_SIZES = (32, 64, 96, 128, 256)
VARLEN_CAPS = Capabilities(
    devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
    head_sizes=HEAD_SIZES, attn_types=frozenset(AttentionType),
    features=frozenset({Feature.GQA, Feature.MQA, Feature.CONTEXT, Feature.MORE_QUERIES_THAN_KEYS}), lse_base=LseBase.E)


def _schema_args(op_name: str) -> set[str]:
    """Argument names of torch.ops.aten.<op_name>.default ({} when the op is missing)."""
    op = getattr(torch.ops.aten, op_name, None)
    return {a.name for a in op.default._schema.arguments} if op is not None else set()


def _aten_op_reason(op_name: str) -> str | None:
    """Why torch.ops.aten.<op_name> cannot run here (no GPU, op missing in this torch), or None."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not _schema_args(op_name):
        return f"torch {torch.__version__} has no aten.{op_name}"
    return None


def _window_args(case) -> dict:
    """flash-attn's (left, right) window, an unbounded side spelled as the case says (-1 by default; the
    schema's `SymInt? window_size_left=None` also takes None, and any number past the keys bounds nothing);
    a causal flag makes the kernel bound the right side at 0 itself."""
    left, right = spellings.window_pair(case, default=spellings.MINUS_ONE)
    return dict(window_size_left=left, window_size_right=right)


# Spellings the flash op's schema takes: `float? scale=None`, the window sides (None, -1 or past the keys),
# and causality as is_causal or as the window (left, 0) (flash-attn 2's own rule: causal is right = 0).
FLASH_ENCODINGS = (spellings.window_encodings((spellings.MINUS_ONE, spellings.NONE, spellings.EDGE, spellings.BEYOND)),
                   spellings.CAUSAL_ENCODINGS, spellings.SCALE_ENCODINGS)


class AtenVarlen(Backend):
    """aten._flash_attention_forward / _efficient_attention_forward over packed sequences."""

    library = "torch"

    def __init__(self, name: str, op_name: str) -> None:
        self.name, self.op_name = name, op_name
        self.flash = "flash" in op_name
        self.args = _schema_args(op_name)
        self.description = f"torch.ops.aten.{op_name} over packed sequences (cu_seqlens), LSE returned"
        features = set(VARLEN_CAPS.features)
        if self.flash and "window_size_left" in self.args:
            features.add(Feature.WINDOW)
        # Not ALiBi, although the schema has alibi_slopes: torch's flash build refuses it ("This flash
        # attention build does not support alibi", H100, torch 2.11).
        # Found by fuzzing on the H200: rows with no key get LSE +inf (flash) or 0 (efficient), not -inf.
        # Declared (each kernel's own convention); both are unsafe inputs to an LSE merge that expects -inf.
        windowed = self.flash and "window_size_left" in self.args
        encodings = FLASH_ENCODINGS if windowed else (spellings.SCALE_ENCODINGS,)  # efficient: `float? scale=None`
        self.caps = replace(VARLEN_CAPS, features=frozenset(features), empty_row_lse=math.inf if self.flash else 0.0,
                            encodings=encodings)

    def _op(self):
        return getattr(torch.ops.aten, self.op_name)

    def availability(self) -> str | None:
        return _aten_op_reason(self.op_name)

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        q = inputs.query
        k, v = torch.cat(inputs.keys), torch.cat(inputs.values)
        cu_q, cu_k = varlen_offsets(inputs)
        causal = case.is_causal  # both kernels align causal masks bottom-right
        scale = spellings.scale_kwargs(case, "scale")
        if self.flash:
            extra = _window_args(case) if "window_size_left" in self.args else {}
            causal = spellings.causal_flag(case)  # = is_causal unless the case spells causality as a window
            out, lse = self._op()(q, k, v, cu_q, cu_k, case.max_query_len, case.max_kv_len, 0.0, causal, False,
                                  **scale, **extra)[:2]
            # Packed varlen flash returns LSE [H, total_q].
            return Actual(output=out, lse=lse.float().transpose(0, 1)[: case.num_tokens])
        group = case.num_heads // case.num_kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        # custom_mask_type 2: causal aligned bottom-right; 0: none.
        out, lse = self._op()(q[None], k[None], v[None], None, cu_q, cu_k, case.max_query_len, case.max_kv_len,
                              0.0, 2 if causal else 0, True, **scale)[:2]
        return Actual(output=out[0], lse=unpack_varlen_lse(lse, case.query_lens), notes={"lse_shape": list(lse.shape)})

    def repro_kernel(self, case) -> str | None:
        if case.alibi is not None or case.attn_chunk_size is not None:
            return None
        head = f'''
def kernel(q, ks, vs):
    op = torch.ops.aten.{self.op_name}
    cu_q, cu_k = cu_seqlens(0), cu_seqlens(1)
    k, v = torch.cat(ks), torch.cat(vs)
    max_q, max_k = max(x[0] for x in SEQS), max(x[1] for x in SEQS)
'''
        if self.flash:
            window = _window_args(case) if "window_size_left" in self.args else {}
            causal = spellings.causal_flag(case)
            return head + f'''    # packed varlen flash: causal aligned bottom-right; window (left, right) as the case spells it
    out, lse = op(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, {causal}, False, scale=SCALE, **{window!r})[:2]
    return out, lse.float().transpose(0, 1)[:q.shape[0]]  # LSE comes as [H, total_q]
'''
        return head + '''    k, v = k.repeat_interleave(GROUP, 1), v.repeat_interleave(GROUP, 1)
    # custom_mask_type 2: causal aligned bottom-right; 0: none. LSE is [B, H, max_q], padded per sequence
    out, lse = op(q[None], k[None], v[None], None, cu_q, cu_k, max_q, max_k, 0.0, 2 if CAUSAL else 0, True,
                  scale=SCALE)[:2]
    lses = [lse[j, :, :SEQS[j][0]].transpose(0, 1) for j in range(len(SEQS))]
    return out[0], torch.cat(lses).float()
'''


CUDNN_CAPS = Capabilities(
    devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
    head_sizes=(32, 64, 96, 128, 192, 256),
    attn_types=frozenset({AttentionType.DECODER, AttentionType.ENCODER, AttentionType.ENCODER_ONLY,
                          AttentionType.ENCODER_DECODER, AttentionType.KERNEL}),
    # cuDNN's causal mask is aligned top-left: a decoder's cached context would need bottom-right.
    features=frozenset({Feature.GQA, Feature.MQA, Feature.MORE_QUERIES_THAN_KEYS}),
    causal_alignments=frozenset({CausalAlignment.TOP_LEFT}), lse_base=LseBase.E,
    # both ops' schemas end in `*, float? scale=None`: the default scale passed or left out
    encodings=(spellings.SCALE_ENCODINGS,))


class AtenCudnn(Backend):
    """cuDNN's fused attention through aten: `_cudnn_attention_forward` with cu_seqlens (packed THD
    varlen), or `_scaled_dot_product_cudnn_attention` per sequence ([1, H, S, D], dense). Both
    return the LSE (compute_log_sumexp=True)."""

    library = "torch"

    def __init__(self, name: str, varlen: bool) -> None:
        self.name, self.varlen = name, varlen
        self.op_name = "_cudnn_attention_forward" if varlen else "_scaled_dot_product_cudnn_attention"
        self.description = f"torch.ops.aten.{self.op_name}" + (
            " over packed sequences (cum_seq_q / cum_seq_k)" if varlen else " per sequence, LSE returned")
        # Seen on the H100: with 0-element K/V the dense op skips the kernel and returns no LSE.
        self.caps = CUDNN_CAPS if varlen else replace(CUDNN_CAPS, min_kv_len=1)

    def availability(self) -> str | None:
        reason = _aten_op_reason(self.op_name)
        if reason is None and not torch.backends.cudnn.is_available():
            return "cuDNN is not available in this torch build"
        return reason

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        op = getattr(torch.ops.aten, self.op_name)
        if self.varlen:
            k, v = torch.cat(inputs.keys), torch.cat(inputs.values)
            out, lse = op(inputs.query, k, v, None, *varlen_offsets(inputs),
                          max(case.max_query_len, 1), max(case.max_kv_len, 1), True, 0.0, case.is_causal, False,
                          **spellings.scale_kwargs(case, "scale"))[:2]
            if lse is None or not lse.numel():
                # Seen on the H100: with no key in the whole batch the op skips the kernel (0-element
                # K/V) and returns no LSE; the output is whatever the allocator held.
                raise RuntimeError(f"aten.{self.op_name} returned no LSE (a batch without keys)")
            lse_th, layout = tokens_first_lse(lse, case.num_tokens, case.num_heads, documented="TH")  # [T, H, 1]
            return Actual(output=out[: case.num_tokens], lse=lse_th, notes={"lse_shape": list(lse.shape)} | layout)
        group = case.num_heads // case.num_kv_heads

        def one(i, q, k, v):
            if not q.shape[1]:  # a sequence without queries is not launched
                return q.new_empty(case.num_heads, 0, case.value_size), q.new_empty(case.num_heads, 0)
            k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
            out, lse = op(q[None], k[None], v[None], None, True, 0.0, case.is_causal, False,
                          **spellings.scale_kwargs(case, "scale"))[:2]
            return out[0], lse.reshape(case.num_heads, q.shape[1])

        out, lse = per_sequence(inputs, one)
        return Actual(output=out, lse=lse.float())

    def repro_kernel(self, case) -> str | None:
        if not self.varlen or case.alibi is not None or case.attn_chunk_size is not None:
            return None
        return f'''
def kernel(q, ks, vs):
    op = torch.ops.aten.{self.op_name}
    k, v = torch.cat(ks), torch.cat(vs)
    max_q, max_k = max(max(s[0] for s in SEQS), 1), max(max(s[1] for s in SEQS), 1)
    # (query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, compute_log_sumexp, dropout, causal, ...)
    out, lse = op(q, k, v, None, cu_seqlens(0), cu_seqlens(1), max_q, max_k, True, 0.0, CAUSAL, False,
                  scale=SCALE)[:2]
    if lse is None or not lse.numel():
        raise RuntimeError("aten.{self.op_name} returned no LSE although compute_log_sumexp=True")
    return out[:q.shape[0]], lse.float().reshape(lse.shape[0], -1)[:q.shape[0]]  # LSE [T, H, 1]
'''


def aten_backends() -> list[Backend]:
    return [AtenVarlen("aten-flash-varlen", "_flash_attention_forward"),
            AtenVarlen("aten-efficient-varlen", "_efficient_attention_forward"),
            AtenCudnn("aten-cudnn-varlen", varlen=True), AtenCudnn("aten-cudnn", varlen=False), TorchVarlen()]


class TorchVarlen(Backend):
    """`torch.nn.attention.varlen.varlen_attn`: the public varlen entry point (flash underneath).

    Causality is a window: (-1, 0) is causal (bottom-right), (W-1, 0) a causal sliding window,
    (-1, -1) full attention; the LSE comes back as [tokens, heads] through AuxRequest(lse=True).
    """

    name = "torch-varlen"
    library = "torch"
    description = "torch.nn.attention.varlen.varlen_attn over packed sequences, window-expressed causality"
    # Found on the H100 (torch 2.11): rows with no key get LSE +inf, as from the flash op underneath.
    caps = Capabilities(devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
                        head_sizes=HEAD_SIZES, attn_types=frozenset(AttentionType),
                        features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.CONTEXT,
                                            Feature.MORE_QUERIES_THAN_KEYS}), lse_base=LseBase.E,
                        empty_row_lse=math.inf,
                        # varlen_attn(..., scale: float | None = None, window_size: tuple[int, int] = (-1, -1)):
                        # an unbounded side is -1 or any number past the keys
                        encodings=(spellings.window_encodings((spellings.MINUS_ONE, spellings.EDGE, spellings.BEYOND)),
                                   spellings.SCALE_ENCODINGS))

    @staticmethod
    def _lse_layout() -> str:
        # torch 2.13's docstring gives the LSE as (T_q, H_q); torch 2.11 returns [H_q, T_q] (seen on the
        # H100: every LSE "mismatch" of the first campaign had T_q == H_q, where the two cannot be told
        # apart by shape, and each equals the transposed oracle LSE exactly).
        return "HT" if torch_before(2, 12) else "TH"

    def availability(self) -> str | None:
        try:
            from torch.nn.attention.varlen import varlen_attn  # noqa: F401
        except ImportError as e:
            return f"torch {torch.__version__} has no torch.nn.attention.varlen: {e}"
        return None if torch.cuda.is_available() else "no CUDA device"

    @staticmethod
    def _gqa_arg(case) -> dict:
        # torch 2.11's varlen_attn has no enable_gqa (seen on the H100); the flash kernel under it
        # takes fewer kv heads natively. Later torch asks for the flag.
        return {"enable_gqa": case.num_heads != case.num_kv_heads} if _varlen_takes_gqa_flag() else {}

    def run(self, inputs: Inputs) -> Actual:
        from torch.nn.attention.varlen import AuxRequest, varlen_attn

        case = inputs.case
        out, lse = varlen_attn(inputs.query, torch.cat(inputs.keys), torch.cat(inputs.values),
                               *varlen_offsets(inputs),
                               max(case.max_query_len, 1), max(case.max_kv_len, 1),
                               return_aux=AuxRequest(lse=True), **spellings.scale_kwargs(case, "scale"),
                               window_size=spellings.window_pair(case, spellings.MINUS_ONE, causal_in_window=True),
                               **self._gqa_arg(case))
        lse_th, layout = tokens_first_lse(lse, case.num_tokens, case.num_heads, documented=self._lse_layout())
        return Actual(output=out, lse=lse_th, notes={"lse_shape": list(lse.shape)} | layout)

    def repro_kernel(self, case) -> str | None:
        window = spellings.window_pair(case, spellings.MINUS_ONE, causal_in_window=True)
        scale = spellings.scale_kwargs(case, "scale")
        return f'''
def kernel(q, ks, vs):
    import inspect

    from torch.nn.attention.varlen import AuxRequest, varlen_attn

    k, v = torch.cat(ks), torch.cat(vs)
    max_q, max_k = max(max(s[0] for s in SEQS), 1), max(max(s[1] for s in SEQS), 1)
    kw = {{"enable_gqa": H != H_KV}} if "enable_gqa" in inspect.signature(varlen_attn).parameters else {{}}
    # causality is the window (-1, 0), aligned bottom-right; an unbounded side as the case spells it
    out, lse = varlen_attn(q, k, v, cu_seqlens(0), cu_seqlens(1), max_q, max_k, return_aux=AuxRequest(lse=True),
                           window_size={window!r}, **{scale!r}, **kw)
    lse = lse.float().reshape(lse.shape[0], -1)
    # torch 2.11 returns the LSE as [H, T]; its docstring, and later releases, [T, H]
    before_2_12 = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 12)
    return out, (lse.transpose(0, 1) if before_2_12 else lse)
'''


@functools.cache
def _varlen_takes_gqa_flag() -> bool:
    """Whether this torch's varlen_attn has an enable_gqa argument (read once, not per example)."""
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    return "enable_gqa" in inspect.signature(varlen_attn).parameters
