"""FlashAttention-4 as vLLM ships and calls it: `vllm.vllm_flash_attn.flash_attn_varlen_func(fa_version=4)`.

vLLM 0.26 bundles its own FA4 (`vllm/vllm_flash_attn/cute`, JIT-compiled by the CuTe DSL from the fa4
wheel group) and reaches it from FLASH_ATTN on Hopper and Blackwell. `vllm-fa4-paged` calls it over the
paged cache as FLASH_ATTN's forward does: `block_table` + `seqused_k`, causal flag and window,
`softcap`, `s_aux` sinks (FA4's `learnable_sink`, which asserts bfloat16: found on the H100), LSE,
`num_splits`; PrefixLM ranges and R-SWA through the CuTe mask_mods vLLM builds for them
(`_make_mm_prefix_mask_mod`, `_make_rswa_mask_mod` in `v1/attention/backends/flash_attn.py`, whose
module needs vLLM's config packages: `.whl/vdeps`), with the causal flag and window FLASH_ATTN passes
beside them. FLASH_ATTN passes `mask_mod=rswa or mm`: with both, the PrefixLM ranges are dropped (the
Triton kernel applies both), so a case with both is not declared here (found on the H100). The wrapper's
FA4 branch asserts ALiBi off and passes no q/k/v descales (no fp8). A page is loaded whole (TMA):
finite canaries only. The window keeps flash-attn 2/3's -1 per side: the wrapper passes each negative side to
FA4 as None on its own (`vllm_flash_attn/flash_attn_interface.py` of vLLM 0.26.0), so causal's (-1, 0) is no
left bound there, where FA4 called directly reads a lone -1 as one (`backends.fa4.window_size`).
"""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import torch

from reference.case import DType, KVCacheDType
from reference.inputs import Inputs

from .base import Actual, Backend, Feature
from .fa4 import share_compiled_kernels
from .vllm import Fa3Paged, range_tensor

FA4_HEADS = (64, 96, 128, 192, 256)


class VllmFa4Paged(Fa3Paged):
    """vLLM's bundled FA4 through its own wrapper, over the paged cache."""

    fa_version = 4
    compiled_per = ("dtypes", "head_sizes")  # vLLM's FA4 is CuTe DSL too
    compiled_features = (Feature.SINKS, Feature.SOFT_CAP, Feature.WINDOW)

    def __init__(self) -> None:
        super().__init__("vllm-fa4-paged")
        self.description = "vllm_flash_attn.flash_attn_varlen_func(fa_version=4): vLLM's FA4, paged, mask_mods"
        self.module = "vllm.vllm_flash_attn.cute"
        features = (self.caps.features - {Feature.Q_FP8}) | {Feature.PREFIX_LM, Feature.GLOBAL_PREFIX}
        self.caps = replace(self.caps, features=features, head_sizes=FA4_HEADS, kv_cache_dtypes=frozenset(
            {KVCacheDType.AUTO}), finite_canaries_only=True,
            encodings=tuple(e for e in self.caps.encodings if e[0] != "scheduler"))  # an FA3 scheduler only

    def availability(self) -> str | None:
        share_compiled_kernels()  # vLLM's FA4 copy reads the same variable, once, at import (its cache_utils.py)
        reason = super().availability()
        if reason is None and importlib.util.find_spec("cutlass") is None:
            return "vLLM's FA4 JIT-compiles with the CuTe DSL: nvidia-cutlass-dsl (the fa4 wheel group) is not installed"
        return reason

    def not_supported_reasons(self, case) -> list[str]:
        reasons = Backend.not_supported_reasons(self, case)
        if case.sinks is not None and case.dtype != DType.BFLOAT16:
            reasons.append("sinks with dtype != bfloat16: FA4's learnable_sink asserts bfloat16")
        rules = case.bidirectional_ranges is not None or case.global_prefix is not None
        if rules and importlib.util.find_spec("pydantic") is None:
            reasons.append("PrefixLM / R-SWA: vLLM builds their mask_mods in its FLASH_ATTN module, which needs "
                           "vLLM's config packages (pydantic, transformers: .whl/vdeps)")
        if case.bidirectional_ranges is not None and case.global_prefix is not None:
            reasons.append("PrefixLM with R-SWA: FLASH_ATTN passes mask_mod=rswa or mm, dropping the ranges "
                           "(a convention of its own: the Triton kernel applies both)")
        return reasons

    def repro_kernel(self, case) -> str | None:
        from . import vllm_repro

        return vllm_repro.fa3(case, version=4)

    def run(self, inputs: Inputs) -> Actual:
        share_compiled_kernels()
        return super().run(inputs)

    def extra_args(self, case, dev, window) -> dict:
        return _mask_mod(case, dev, window)


def _mask_mod(case, dev, window) -> dict:
    """FLASH_ATTN's mask_mod arguments: R-SWA replaces FA's window; PrefixLM keeps it beside the mask_mod."""
    if case.global_prefix is None and case.bidirectional_ranges is None:
        return {}
    from vllm.v1.attention.backends.flash_attn import _make_mm_prefix_mask_mod, _make_rswa_mask_mod

    if case.global_prefix is not None:
        g = case.global_prefix
        aux = [torch.tensor(g.prefix_lens, dtype=torch.int32, device=dev),
               torch.tensor([g.window], dtype=torch.int32, device=dev)]
        return dict(mask_mod=_make_rswa_mask_mod(), aux_tensors=aux, window_size=None)
    ranges = range_tensor(case, dev)
    left = window[0] if window is not None and window[0] >= 0 else None
    return dict(mask_mod=_make_mm_prefix_mask_mod(ranges.shape[1], sliding_window=0,
                                                  sliding_window_left=None if left is None else left + 1),
                aux_tensors=[ranges])


def vllm_fa4_backends() -> list[Backend]:
    return [VllmFa4Paged()]
