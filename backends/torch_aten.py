"""The packed varlen kernels under torch.ops.aten (CUDA): flash and memory-efficient.

Sequences are packed with cumulative offsets (cu_seqlens); optional arguments (window sizes,
seqused_k, ALiBi) are passed only where the installed op's schema has them, read at run time.
Keys come contiguous (the adapter concatenates each sequence's keys: no paging exercised).
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from reference.case import AttentionType, DType
from reference.inputs import Inputs

from ._convert import cu_seqlens, tokens_first_lse, unpack_varlen_lse
from .base import Actual, Backend, Capabilities, Feature, LseBase

VARLEN_CAPS = Capabilities(
    devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
    head_sizes=(32, 64, 96, 128, 256), attn_types=frozenset(AttentionType),
    features=frozenset({Feature.GQA, Feature.MQA, Feature.CONTEXT, Feature.MORE_QUERIES_THAN_KEYS}), lse_base=LseBase.E)


def _schema_args(op) -> set[str]:
    return {a.name for a in op.default._schema.arguments}


class AtenVarlen(Backend):
    library = "torch"

    def __init__(self, name: str, op_name: str) -> None:
        self.name, self.op_name = name, op_name
        self.description = f"torch.ops.aten.{op_name} over packed sequences (cu_seqlens), LSE returned"
        # Found by fuzzing on the H200: rows with no key get LSE +inf (flash) or 0 (efficient), not -inf.
        # Declared (each kernel's own convention); both are unsafe inputs to an LSE merge that expects -inf.
        self.caps = replace(VARLEN_CAPS, empty_row_lse=math.inf if "flash" in op_name else 0.0)

    def _op(self):
        return getattr(torch.ops.aten, self.op_name)

    def availability(self) -> str | None:
        if not torch.cuda.is_available():
            return "no CUDA device"
        if not hasattr(torch.ops.aten, self.op_name):
            return f"torch {torch.__version__} has no aten.{self.op_name}"
        return None

    def not_supported_reasons(self, case) -> list[str]:
        reasons = super().not_supported_reasons(case)
        args = _schema_args(self._op()) if hasattr(torch.ops.aten, self.op_name) else set()
        if case.sliding_window is not None and not ({"window_size_left", "window_size"} & args):
            reasons.append("this torch's op takes no window argument")
        return reasons

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        dev = inputs.query.device
        q = inputs.query
        k, v = torch.cat(inputs.keys), torch.cat(inputs.values)
        cu_q, cu_k = cu_seqlens(case.query_lens, dev), cu_seqlens(case.kv_lens, dev)
        causal = case.is_causal  # both kernels align causal masks bottom-right
        if self.op_name == "_flash_attention_forward":
            out, lse = self._op()(q, k, v, cu_q, cu_k, case.max_query_len, case.max_kv_len, 0.0, causal, False,
                                  scale=case.softmax_scale)[:2]
            # Packed varlen flash returns LSE [H, total_q].
            return Actual(output=out, lse=lse.float().transpose(0, 1)[: case.num_tokens])
        group = case.num_heads // case.num_kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        # custom_mask_type 2: causal aligned bottom-right; 0: none.
        out, lse = self._op()(q[None], k[None], v[None], None, cu_q, cu_k, case.max_query_len, case.max_kv_len,
                              0.0, 2 if causal else 0, True, scale=case.softmax_scale)[:2]
        return Actual(output=out[0], lse=unpack_varlen_lse(lse, case.query_lens), notes={"lse_shape": list(lse.shape)})


def aten_backends() -> list[Backend]:
    return [AtenVarlen("aten-flash-varlen", "_flash_attention_forward"),
            AtenVarlen("aten-efficient-varlen", "_efficient_attention_forward"), TorchVarlen()]


class TorchVarlen(Backend):
    """`torch.nn.attention.varlen.varlen_attn`: the public varlen entry point (flash underneath).

    Causality is a window: (-1, 0) is causal (bottom-right), (W-1, 0) a causal sliding window,
    (-1, -1) full attention; the LSE comes back as [tokens, heads] through AuxRequest(lse=True).
    """

    name = "torch-varlen"
    library = "torch"
    description = "torch.nn.attention.varlen.varlen_attn over packed sequences, window-expressed causality"
    caps = Capabilities(devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
                        head_sizes=(32, 64, 96, 128, 256), attn_types=frozenset(AttentionType),
                        features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.CONTEXT,
                                            Feature.MORE_QUERIES_THAN_KEYS}), lse_base=LseBase.E)

    def availability(self) -> str | None:
        try:
            from torch.nn.attention.varlen import varlen_attn  # noqa: F401
        except ImportError as e:
            return f"torch {torch.__version__} has no torch.nn.attention.varlen: {e}"
        return None if torch.cuda.is_available() else "no CUDA device"

    def run(self, inputs: Inputs) -> Actual:
        from torch.nn.attention.varlen import AuxRequest, varlen_attn

        case = inputs.case
        dev = inputs.query.device
        left, right = case.window_bounds
        if case.is_causal:
            right = 0 if right is None else min(right, 0)
        window = (-1 if left is None else left, -1 if right is None else right)
        out, lse = varlen_attn(inputs.query, torch.cat(inputs.keys), torch.cat(inputs.values),
                               cu_seqlens(case.query_lens, dev), cu_seqlens(case.kv_lens, dev),
                               max(case.max_query_len, 1), max(case.max_kv_len, 1),
                               return_aux=AuxRequest(lse=True), scale=case.softmax_scale, window_size=window,
                               enable_gqa=case.num_heads != case.num_kv_heads)
        return Actual(output=out, lse=tokens_first_lse(lse, case.num_tokens, case.num_heads),
                      notes={"lse_shape": list(lse.shape)})
