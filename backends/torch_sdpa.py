"""PyTorch's scaled_dot_product_attention, each kernel forced, and the raw CPU flash kernel.

SDPA takes dense [B, H, L, D] tensors: the adapters call it once per sequence on the contiguous
keys (no paged cache: these kernels never exercise paging). Masks and ALiBi go in as `attn_mask`.
SDPA's own `is_causal` is top-left aligned, so decoder masks are always passed explicitly.

Declared from PyTorch's documentation: `torch.nn.functional.scaled_dot_product_attention` (bool or additive
float `attn_mask`, top-left `is_causal`, `scale`, `enable_gqa`), `torch.nn.attention.sdpa_kernel` /
`SDPBackend` (MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION) and
`torch.nn.attention.bias.causal_lower_right` / `causal_upper_left`; each fused kernel's own constraints
(dtypes, head sizes, masks) as `torch.backends.cuda.can_use_*_attention(params, debug=True)` states them.
Narrowed by fuzzing, with the reason at each declaration: cuDNN refuses a single key.
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from reference.case import AttentionType, CausalAlignment, DType
from reference.inputs import Inputs

from . import spellings
from ._convert import alibi_additive, allowed, per_sequence
from .base import Actual, Backend, Capabilities, Feature, LseBase, Unsupported

ALL_TYPES = frozenset(AttentionType)
# F.scaled_dot_product_attention(..., attn_mask=None, ..., scale=None, enable_gqa=False): grouped heads as K/V
# repeated per group or `enable_gqa=True`; a mask as bool (True: attend) or as an additive float mask (-inf: hidden;
# with ALiBi it is always additive)
GQA, MASK = "gqa", "mask"
GQA_ENCODINGS = (GQA, ("repeat", "enable_gqa"))
MASK_ENCODINGS = (MASK, ("bool", "additive"))
MASK_FEATURES = frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.ALIBI, Feature.CHUNKED_LOCAL,
                           Feature.CONTEXT, Feature.MORE_QUERIES_THAN_KEYS})
BOTH_ALIGNMENTS = frozenset(CausalAlignment)


def _mask(inputs: Inputs, i: int, q: torch.Tensor, additive: bool = False) -> torch.Tensor:
    """attn_mask for sequence i: bool, or float (-inf where hidden) with ALiBi or when `additive`."""
    case = inputs.case
    ok = allowed(case, i, q.device)
    if inputs.alibi_slopes is None and not additive:
        return ok[None]
    if inputs.alibi_slopes is None:
        return torch.zeros(ok.shape, dtype=q.dtype, device=q.device).masked_fill(~ok, float("-inf"))[None]
    bias = alibi_additive(case, i, inputs.alibi_slopes.to(q.device))
    return bias.masked_fill(~ok, float("-inf")).to(q.dtype)[None]


class SdpaBackend(Backend):
    """F.scaled_dot_product_attention with one kernel forced through sdpa_kernel()."""

    library = "torch"

    def __init__(self, name: str, kernel: str, device: str, caps: Capabilities, description: str,
                 bias: str | None = None) -> None:
        self.name, self.kernel, self._device, self.caps, self.description = name, kernel, device, caps, description
        self.bias = bias

    def device(self) -> str:
        return self._device

    def availability(self) -> str | None:
        if self._device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device"
        return None

    def run(self, inputs: Inputs) -> Actual:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        case = inputs.case
        takes_mask = self.kernel not in ("FLASH_ATTENTION", "CUDNN_ATTENTION") and self.bias is None

        def one(i, q, k, v):
            group = case.num_heads // case.num_kv_heads
            kw = spellings.scale_kwargs(case, "scale")
            if case.encoding(GQA, "repeat") == "enable_gqa":
                kw["enable_gqa"] = True  # SDPA broadcasts each kv head over its group itself
            else:
                k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
            if takes_mask:
                kw["attn_mask"] = _mask(inputs, i, q, additive=case.encoding(MASK, "bool") == "additive")
            elif self.bias is not None:  # torch.nn.attention.bias: causal_lower_right / causal_upper_left
                from torch.nn.attention import bias as sdpa_bias

                kw["attn_mask"] = getattr(sdpa_bias, self.bias)(q.shape[1], k.shape[1])
            else:  # is_causal is top-left: declared only where it coincides with the case's alignment
                kw["is_causal"] = case.is_causal
            try:
                with sdpa_kernel(getattr(SDPBackend, self.kernel)):
                    out = F.scaled_dot_product_attention(q[None], k[None], v[None], **kw)[0]
            except RuntimeError as e:  # the forced kernel refused: a declaration bug, not a crash
                if "No available kernel" in str(e):
                    raise Unsupported(f"SDPA {self.kernel} refused: {e}") from e
                raise
            return out, None

        out, _ = per_sequence(inputs, one)
        return Actual(output=out)

    def repro_kernel(self, case) -> str | None:
        if self.bias is not None or self.kernel in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
            mask = f"dict(is_causal={case.is_causal})" if self.bias is None else \
                f"dict(attn_mask=torch.nn.attention.bias.{self.bias}(q_len, kv_len))"
        else:
            mask = "dict(attn_mask=sdpa_mask(i))"
        gqa = case.encoding(GQA, "repeat") == "enable_gqa"
        additive = case.encoding(MASK, "bool") == "additive"
        return f'''
def sdpa_mask(i):
    """SDPA's attn_mask: the visibility as {"an additive float mask" if additive else "bool"}, or as an additive float
    mask carrying ALiBi."""
    bias = alibi_bias(i)
    if bias is None and {not additive}:
        return visible(i)[None]
    bias = torch.zeros(visible(i)[None].shape) if bias is None else bias
    return bias.masked_fill(~visible(i)[None], float("-inf")).to(DTYPE).to(DEVICE)


def kernel(q, ks, vs):
    import torch.nn.attention.bias  # noqa: F401
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    outs, start = [], 0
    for i, (q_len, kv_len, _) in enumerate(SEQS):
        qi = q[start:start + q_len].transpose(0, 1)  # [H, q_len, D]
        start += q_len
        k, v = ks[i].transpose(0, 1), vs[i].transpose(0, 1)
        if {not gqa}:  # each kv head repeated over its group (else SDPA's enable_gqa broadcasts it)
            k, v = k.repeat_interleave(GROUP, 0), v.repeat_interleave(GROUP, 0)
        kw = {mask} | {{"enable_gqa": True}} if {gqa} else {mask}
        # a plain tensor mask moves to the device; the bias objects (tensor subclasses) are built for any device
        kw = {{key: (val.to(DEVICE) if type(val) is torch.Tensor else val) for key, val in kw.items()}}
        with sdpa_kernel(SDPBackend.{self.kernel}):
            out = F.scaled_dot_product_attention(qi[None], k[None], v[None], scale=SCALE, **kw)[0]
        outs.append(out.transpose(0, 1))
    return torch.cat(outs), None
'''


class CpuFlashBackend(Backend):
    """The raw CPU flash kernel `aten._scaled_dot_product_flash_attention_for_cpu` (returns LSE)."""

    name = "torch-sdpa-cpu-flash"
    library = "torch"
    description = "aten._scaled_dot_product_flash_attention_for_cpu, per sequence, masks as attn_mask"
    caps = Capabilities(devices=frozenset({"cpu"}), dtypes=frozenset(DType), attn_types=ALL_TYPES,
                        features=MASK_FEATURES, lse_base=LseBase.E, causal_alignments=BOTH_ALIGNMENTS,
                        # Found by fuzzing (kernel cases, q > k): a row its mask leaves empty gets output 0
                        # but LSE 0, not -inf; declared, and unsafe for LSE merging (README findings).
                        empty_row_lse=0.0, encodings=(spellings.SCALE_ENCODINGS,),  # `float? scale=None`
                        alibi_in_model_dtype=True)  # its attn_mask is of the query's dtype, as SDPA's

    def run(self, inputs: Inputs) -> Actual:
        case = inputs.case
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu

        def one(i, q, k, v):
            group = case.num_heads // case.num_kv_heads
            k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
            out, lse = op(q[None], k[None], v[None], 0.0, False, attn_mask=_mask(inputs, i, q, additive=True),
                          **spellings.scale_kwargs(case, "scale"))
            return out[0], lse[0]

        out, lse = per_sequence(inputs, one)
        return Actual(output=out, lse=lse.float())

    def repro_kernel(self, case) -> str | None:
        return '''
def kernel(q, ks, vs):
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    outs, lses, start = [], [], 0
    for i, (q_len, kv_len, _) in enumerate(SEQS):
        qi = q[start:start + q_len].transpose(0, 1)
        start += q_len
        k = ks[i].repeat_interleave(GROUP, 1).transpose(0, 1)
        v = vs[i].repeat_interleave(GROUP, 1).transpose(0, 1)
        bias = alibi_bias(i)
        mask = torch.zeros(visible(i).shape, dtype=torch.float64)[None] if bias is None else bias
        mask = mask.masked_fill(~visible(i)[None], float("-inf")).to(DTYPE)
        out, lse = op(qi[None], k[None], v[None], 0.0, False, attn_mask=mask[None], scale=SCALE)
        outs.append(out[0].transpose(0, 1))
        lses.append(lse[0].transpose(0, 1))
    return torch.cat(outs), torch.cat(lses)
'''


def sdpa_backends() -> list[Backend]:
    """torch-sdpa-* for CPU (math) and CUDA (flash, efficient, cudnn, math)."""
    # ALiBi goes in as an additive attn_mask, which SDPA takes in the query's dtype: the bias is rounded there (a
    # bfloat16 bias of -511 by up to 1 logit: torch-sdpa-math 12.1 off the exact bias's output over 1,023 keys)
    base = Capabilities(dtypes=frozenset(DType), attn_types=ALL_TYPES, features=MASK_FEATURES | {Feature.HEAD_SIZE_V},
                        lse_base=None, causal_alignments=BOTH_ALIGNMENTS, alibi_in_model_dtype=True,
                        encodings=(spellings.SCALE_ENCODINGS, GQA_ENCODINGS, MASK_ENCODINGS))
    # No attn_mask: a decoder with cached context would need bottom-right causality, which the
    # is_causal flag (top-left) cannot express, so CONTEXT is not declared.
    no_mask = replace(base, dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}),
                      features=frozenset({Feature.GQA, Feature.MQA}), head_sizes=(32, 64, 96, 128, 256),
                      causal_alignments=frozenset({CausalAlignment.TOP_LEFT}),
                      encodings=(spellings.SCALE_ENCODINGS, GQA_ENCODINGS))
    cuda = frozenset({"cuda"})
    # Found by fuzzing on the H200 (torch 2.11): the flash and efficient kernels refuse a sequence with
    # no keys, cuDNN one with a single query ("No available kernel").
    no_mask, masked = replace(no_mask, min_kv_len=1), replace(base, devices=cuda, features=MASK_FEATURES, min_kv_len=1)
    return [
        SdpaBackend("torch-sdpa-math", "MATH", "cpu", base, "SDPA math kernel on CPU, dense attn_mask per sequence"),
        SdpaBackend("torch-sdpa-math-cuda", "MATH", "cuda", replace(base, devices=cuda), "SDPA math kernel on CUDA"),
        SdpaBackend("torch-sdpa-efficient", "EFFICIENT_ATTENTION", "cuda",
                    masked, "SDPA memory-efficient kernel, attn_mask"),
        # Found by the kernel-level campaign: flash refuses is_causal when query and key lengths differ.
        SdpaBackend("torch-sdpa-flash", "FLASH_ATTENTION", "cuda", replace(no_mask, devices=cuda, causal_equal_lengths=True),
                    "SDPA flash kernel: no attn_mask, so causal only where top-left == bottom-right"),
        # Found by fuzzing (H200, H100): SDPA's cuDNN path refuses a sequence with one query or one key
        # ("No available kernel"); the aten op underneath takes both (aten-cudnn).
        SdpaBackend("torch-sdpa-cudnn", "CUDNN_ATTENTION", "cuda", replace(no_mask, devices=cuda, min_query_len=2,
                                                                         min_kv_len=2),
                    "SDPA cuDNN kernel: no attn_mask, so causal only where top-left == bottom-right"),
        CpuFlashBackend(),
        *(SdpaBackend(f"torch-sdpa-{tag}{suffix}", "MATH" if dev == "cpu" else "EFFICIENT_ATTENTION", dev,
                      replace(base, devices=frozenset({dev}), attn_types=frozenset({AttentionType.KERNEL}),
                              causal_modes=frozenset({True}), causal_alignments=frozenset({alignment}),
                              features=frozenset({Feature.GQA, Feature.MQA, Feature.HEAD_SIZE_V,
                                                  Feature.MORE_QUERIES_THAN_KEYS}),
                              dtypes=frozenset(DType) if dev == "cpu" else frozenset({DType.FLOAT16, DType.BFLOAT16}),
                              min_kv_len=0 if dev == "cpu" else 1,  # CUDA: "No available kernel" without keys
                              encodings=(spellings.SCALE_ENCODINGS, GQA_ENCODINGS)),
                      f"SDPA with the torch.nn.attention.bias.{fn} attn_mask object", bias=fn)
          for tag, fn, alignment in (("causal-lower-right", "causal_lower_right", CausalAlignment.BOTTOM_RIGHT),
                                     ("causal-upper-left", "causal_upper_left", CausalAlignment.TOP_LEFT))
          for dev, suffix in (("cpu", ""), ("cuda", "-cuda"))),
    ]
