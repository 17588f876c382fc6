"""FlashInfer's paged wrappers: batch decode (CUDA-core and tensor-core) and batch prefill (fa2, fa3).

The canonical cache is handed over as it is: flashinfer_nhd / flashinfer_hnd as one 5-D tensor,
flash_nhd / flash_hnd as the (key, value) pair, with kv_layout "NHD" / "HND". The block table
becomes FlashInfer's indptr / indices / last_page_len. Windows go in as window_left = W - 1, soft-cap
as logits_soft_cap, sinks as `sinks`, fp8 caches with per-tensor k_scale / v_scale. Its LSE is
base 2 (converted here). Every variant is JIT-compiled on first use: the first call's time is
recorded as `first_call_s` apart from the kernel time of later calls.
"""
from __future__ import annotations

import time

import torch

from reference.case import AttentionType, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs

from ._convert import first_call_note, lse_natural
from .base import Actual, Backend, Capabilities, Feature, LseBase, cuda_library_reason

LAYOUT = {KVLayout.FLASHINFER_NHD: "NHD", KVLayout.FLASHINFER_HND: "HND", KVLayout.FLASH_NHD: "NHD",
          KVLayout.FLASH_HND: "HND"}
FP8 = {KVCacheDType.FP8_E4M3: torch.float8_e4m3fn, KVCacheDType.FP8_E5M2: torch.float8_e5m2}
_WORKSPACE: dict = {}
_SEEN: set = set()


def _workspace(dev) -> torch.Tensor:
    if dev not in _WORKSPACE:
        _WORKSPACE[dev] = torch.zeros(256 * 1024 * 1024, dtype=torch.uint8, device=dev)
    return _WORKSPACE[dev]


def page_metadata(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indptr [B+1], indices [total pages], last_page_len [B]) from the block table."""
    case = inputs.case
    bs = case.cache.block_size
    counts = [-(-n // bs) for n in case.kv_lens]
    dev = inputs.query.device
    indices = [inputs.block_table[i, :c] for i, c in enumerate(counts)]
    indptr = torch.tensor([0] + counts, device=dev).cumsum(0).to(torch.int32)
    last = torch.tensor([n - (c - 1) * bs if c else 0 for n, c in zip(case.kv_lens, counts)], dtype=torch.int32, device=dev)
    return indptr, torch.cat(indices).to(torch.int32), last


def paged_kv(inputs: Inputs):
    pool = inputs.cache.paged
    if pool.layout in (KVLayout.FLASHINFER_NHD, KVLayout.FLASHINFER_HND):
        return pool.tensors[0]
    t = pool.tensors[0]
    return (t[0], t[1])


class FlashInfer(Backend):
    library = "flashinfer"

    def __init__(self, name: str, kind: str, option: str) -> None:
        self.name, self.kind, self.option = name, kind, option
        decode = kind == "decode"
        self.description = (f"flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores={option == 'tc'})" if decode
                            else f"flashinfer.BatchPrefillWithPagedKVCacheWrapper(backend='{option}')")
        self.caps = Capabilities(
            devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}), head_sizes=(64, 128),
            # Found by fuzzing: the CUDA-core decode kernel dispatches these GQA group sizes only
            # ("Unsupported group_size: 7" from plan()).
            head_groups=frozenset({1, 2, 3, 4, 6, 8, 16}) if kind == "decode" and option != "tc" else None,
            attn_types=frozenset({AttentionType.DECODER} if decode else {AttentionType.DECODER, AttentionType.ENCODER_DECODER}),
            features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SOFT_CAP, Feature.SINKS, Feature.CONTEXT}),
            kv_layouts=frozenset(LAYOUT), kv_cache_dtypes=frozenset({KVCacheDType.AUTO, KVCacheDType.FP8_E4M3, KVCacheDType.FP8_E5M2}),
            block_sizes=(1, 8, 16, 32, 64), max_query_len=1 if decode else None, lse_base=LseBase.TWO,
            requires_cache=True, reads_paged_cache=True)

    def availability(self) -> str | None:
        return cuda_library_reason("flashinfer", "flashinfer-python")

    def run(self, inputs: Inputs) -> Actual:
        import flashinfer

        case = inputs.case
        dev = inputs.query.device
        layout = LAYOUT[case.cache.layout]
        indptr, indices, last = page_metadata(inputs)
        kvd = case.kv_cache_dtype
        kv_dtype = FP8.get(kvd, case.dtype.torch)
        window_left = case.sliding_window - 1 if case.sliding_window is not None else -1
        common = dict(window_left=window_left, logits_soft_cap=case.soft_cap, q_data_type=case.dtype.torch,
                      kv_data_type=kv_dtype, sm_scale=case.softmax_scale)
        key = (self.name, case.dtype, kvd, case.head_size, layout, window_left >= 0, case.soft_cap is not None,
               case.sinks is not None, case.num_heads // case.num_kv_heads)
        t0 = time.perf_counter()  # plan() JIT-compiles a new variant: time it with the first run
        if self.kind == "decode":
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(_workspace(dev), layout,
                                                                    use_tensor_cores=self.option == "tc")
            wrapper.plan(indptr, indices, last, case.num_heads, case.num_kv_heads, case.head_size,
                         case.cache.block_size, pos_encoding_mode="NONE", **common)
        else:
            wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(_workspace(dev), layout, backend=self.option)
            wrapper.plan(inputs.query_start_loc, indptr, indices, last, case.num_heads, case.num_kv_heads,
                         case.head_size, case.cache.block_size, head_dim_vo=case.value_size,
                         causal=case.attn_type == AttentionType.DECODER, **common)
        run = dict(return_lse=True)
        if kvd in FP8:
            run.update(k_scale=float(inputs.cache.k_scale[0]), v_scale=float(inputs.cache.v_scale[0]))
        if inputs.sinks is not None:
            run["sinks"] = inputs.sinks.to(dev)
        out, lse = wrapper.run(inputs.query, paged_kv(inputs), **run)
        return Actual(output=out, lse=lse_natural(lse, base_two=True), notes=first_call_note(_SEEN, key, t0))


def flashinfer_backends() -> list[Backend]:
    return [FlashInfer("flashinfer-decode", "decode", "cuda-core"), FlashInfer("flashinfer-decode-tc", "decode", "tc"),
            FlashInfer("flashinfer-prefill-fa2", "prefill", "fa2"), FlashInfer("flashinfer-prefill-fa3", "prefill", "fa3")]
