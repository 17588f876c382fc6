"""FlashInfer's paged wrappers: batch decode (CUDA-core and tensor-core) and batch prefill (fa2, fa3).

The canonical cache is handed over as it is: flashinfer_nhd / flashinfer_hnd as one 5-D tensor,
flash_nhd / flash_hnd as the (key, value) pair, with kv_layout "NHD" / "HND". The block table
becomes FlashInfer's indptr / indices / last_page_len. Windows go in as window_left = W - 1, soft-cap
as logits_soft_cap, sinks as `sinks`, fp8 caches with per-tensor k_scale / v_scale. Its LSE is
base 2 (converted here). Every variant is JIT-compiled on first use: the first call's time is
recorded as `first_call_s` apart from the kernel time of later calls.

Declared from FlashInfer's documentation (docs.flashinfer.ai, `flashinfer.decode` / `flashinfer.prefill`
API pages and the wrappers' `plan` docstrings of flashinfer-python 0.7.2): kv layouts "NHD" / "HND",
page sizes, `window_left`, `logits_soft_cap`, fp8 k/v with `k_scale` / `v_scale`, `sinks`,
`pos_encoding_mode` "NONE" / "ROPE_LLAMA" / "ALIBI" (ALIBI: the wrapper computes the slopes itself,
`flashinfer.utils.get_alibi_slopes(num_qo_heads)`, so only those are declared; RoPE is applied before
attention in vLLM and is not an attention semantic here), head_dim 64 / 128 / 256 (the constraint its
attention trace templates state). Narrowed by fuzzing: the CUDA-core decode kernel's GQA group sizes.
"""
from __future__ import annotations

import time

import torch

from reference.case import AlibiConvention, AttentionType, BlockTableKind, CausalAlignment, DType, KVCacheDType, KVLayout
from reference.inputs import Inputs

from . import spellings
from ._convert import alibi_context_term, first_call_note, lse_natural
from .base import (ENCODING_PIN, PTX_TANH_APPROX, Actual, Backend, Capabilities, Feature, LseBase,
                   cuda_library_reason, poisoned_output)

LAYOUT = {KVLayout.FLASHINFER_NHD: "NHD", KVLayout.FLASHINFER_HND: "HND", KVLayout.FLASH_NHD: "NHD",
          KVLayout.FLASH_HND: "HND"}
FP8 = {KVCacheDType.FP8_E4M3: torch.float8_e4m3fn, KVCacheDType.FP8_E5M2: torch.float8_e5m2}
_WORKSPACE: dict = {}
SEEN_VARIANTS: set = set()


def workspace(dev) -> torch.Tensor:
    if dev not in _WORKSPACE:
        _WORKSPACE[dev] = torch.zeros(256 * 1024 * 1024, dtype=torch.uint8, device=dev)
    return _WORKSPACE[dev]


def _pages(inputs: Inputs, i: int, first: int) -> tuple[torch.Tensor, int]:
    """Sequence i's pages from logical block `first` on, and how many slots its last page uses."""
    bs = inputs.case.cache.block_size
    n = inputs.case.kv_lens[i] - first * bs
    count = -(-n // bs)
    return inputs.block_table[i, first:first + count], (n - (count - 1) * bs if count else 0)


def _csr(page_lists: list[torch.Tensor], last: list[int], dev) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's (indptr [B+1], indices [total pages], last_page_len [B])."""
    indptr = torch.tensor([0] + [p.numel() for p in page_lists], device=dev).cumsum(0).to(torch.int32)
    indices = torch.cat(page_lists).to(torch.int32) if page_lists else torch.zeros(0, dtype=torch.int32, device=dev)
    return indptr, indices, torch.tensor(last, dtype=torch.int32, device=dev)


def page_metadata(inputs: Inputs, first: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indptr, indices, last_page_len) of every sequence's pages from logical block `first` on."""
    pages = [_pages(inputs, i, first) for i in range(len(inputs.case.sequences))]
    return _csr([p for p, _ in pages], [n for _, n in pages], inputs.query.device)


def _window_left(case) -> int:
    """plan()'s window_left: the keys left of the query (a decoder's W is W - 1; kernel cases: the left side
    only), an unbounded side spelled as the case says (-1 by default)."""
    left = case.window_bounds[0]
    return spellings.unbounded(case, spellings.MINUS_ONE) if left is None else left


OUTPUT_ENCODINGS = ("output", ("returned", "out"))  # run(..., out=None, lse=None): returned, or the caller's buffers


def output_buffers(inputs: Inputs) -> dict:
    """run()'s out= / lse= when the case spells the output as the caller's buffers (NaN until written)."""
    case = inputs.case
    if case.encoding("output", "returned") != "out":
        return {}
    return dict(out=poisoned_output(inputs, extra_rows=0),
                lse=torch.full((case.num_tokens, case.num_heads), float("nan"), device=inputs.device))


def output_buffers_source(case) -> str:
    """`output_buffers` as script text: `kw` gets the NaN-filled out= / lse= buffers when the case spells them."""
    if case.encoding("output", "returned") != "out":
        return ""
    return """    # the caller's output and LSE buffers, NaN until written
    kw |= dict(out=torch.full((q.shape[0], H, D_V), float("nan"), dtype=DTYPE, device=DEVICE),
               lse=torch.full((q.shape[0], H), float("nan"), device=DEVICE))
"""


def paged_kv(inputs: Inputs):
    pool = inputs.cache.paged
    if pool.layout in (KVLayout.FLASHINFER_NHD, KVLayout.FLASHINFER_HND):
        return pool.tensors[0]
    t = pool.tensors[0]
    return (t[0], t[1])


# A first call of a module another worker built loads its .so: 97 such loads in two untold 10-minute campaigns on an
# H200 took 0.41 s at most (builds 21-235 s), so they take no compile slot (Backend.loads_in_process). Held to the
# slots, a worker without the module deferred its cases instead (campaigns/jit-untold-side-by-side-h200-2026-11-26.md).
LOADS_IN_PROCESS = True


class FlashInfer(Backend):
    library = "flashinfer"
    compiled_per = ("dtypes", "head_sizes", "kv_cache_dtypes")  # an nvcc JIT module per combination
    compiled_features = (Feature.ALIBI, Feature.SINKS, Feature.SOFT_CAP, Feature.WINDOW)  # posenc, swa, logits cap
    loads_in_process = LOADS_IN_PROCESS
    # Which module a windowless case needs follows its unbounded window's spelling (jit_variant: use_swa): each
    # focused shard draws one spelling, so its cases need one module; the shards together draw every spelling.
    jit_shape_per = (ENCODING_PIN + spellings.UNBOUNDED_WINDOW,)

    def __init__(self, name: str, kind: str, option: str) -> None:
        self.name, self.kind, self.option = name, kind, option
        # the tensor-core decode plans FlashInfer's fa2 prefill modules (get_batch_prefill_module("fa2", ...)), with
        # the fields of jit_variant: one build lock with flashinfer-prefill-fa2
        if option in ("tc", "fa2"):
            self.jit_module_space = "flashinfer-batch-prefill-fa2"
        decode, fa3 = kind == "decode", option == "fa3"
        self.description = (f"flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores={option == 'tc'})" if decode
                            else f"flashinfer.BatchPrefillWithPagedKVCacheWrapper(backend='{option}')")
        self.caps = Capabilities(
            devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}), head_sizes=(64, 128, 256),
            # Found by fuzzing: the CUDA-core decode kernel dispatches these GQA group sizes only
            # ("Unsupported group_size: 7" from plan()).
            head_groups=frozenset({1, 2, 3, 4, 6, 8, 16}) if kind == "decode" and option != "tc" else None,
            # Prefill's plan() takes any query / key lengths, `causal` (aligned bottom-right) and window_left over a
            # page table: the raw-API (kernel) region, paged. Decode has no causal flag and one query per
            # sequence, which sees every key of its window either way: its raw region is the decoder one.
            attn_types=frozenset({AttentionType.DECODER} if decode else
                                 {AttentionType.DECODER, AttentionType.ENCODER_DECODER, AttentionType.KERNEL}),
            window_right=False, causal_alignments=frozenset({CausalAlignment.BOTTOM_RIGHT}),
            soft_cap_tanh_error=PTX_TANH_APPROX,  # LogitsSoftCap caps with math::tanh (fa2 and hopper variants.cuh)
            # fa3: flashinfer/utils.py is_fa3_backend_supported() takes no positional encoding (ALiBi) and an fp8
            # cache only with fp8 queries (FlashInfer PR #2536); measured on an H100
            # (benchmarks/results/campaigns/flashinfer-fa3-cascade-h100-2026-11-24.md): its sm90 module for f16 queries over an
            # e4m3 cache fails to build (nvcc, batch_prefill_ragged_sm90_kernel_mask_0.cu).
            features=frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.SOFT_CAP, Feature.SINKS, Feature.CONTEXT}
                               | (set() if fa3 else {Feature.ALIBI})
                               | (set() if decode else {Feature.PAGED_KERNEL, Feature.MORE_QUERIES_THAN_KEYS})),
            # plan(..., window_left: int = -1, sm_scale: Optional[float] = None): an unbounded window is -1 or any
            # window_left past the keys (a different, windowed, module); the default scale passed or left out
            encodings=(spellings.window_encodings((spellings.MINUS_ONE, spellings.EDGE, spellings.BEYOND)),
                       spellings.SCALE_ENCODINGS, OUTPUT_ENCODINGS),
            # FlashInfer's bias is slope * (k - q) (signed); equal to symmetric under its causal decoder mask.
            alibi_conventions=frozenset({AlibiConvention.SIGNED}), alibi_standard_slopes=True,
            # Decoders only: in cross attention FlashInfer places queries bottom-right, a per-row offset the
            # oracle's top-left cross-attention positions do not have (declared, so never drawn there).
            alibi_attn_types=frozenset({AttentionType.DECODER}),
            kv_layouts=frozenset(LAYOUT), kv_cache_dtypes=frozenset(
                {KVCacheDType.AUTO} if fa3 else {KVCacheDType.AUTO, KVCacheDType.FP8_E4M3, KVCacheDType.FP8_E5M2}),
            block_sizes=(1, 8, 16, 32, 64), max_query_len=1 if decode else None, lse_base=LseBase.TWO,
            requires_cache=True, reads_paged_cache=True)

    def jit_variant(self, case) -> tuple:
        """The fields of FlashInfer's module name (flashinfer/jit/attention/modules.py, get_batch_prefill_uri and
        get_batch_decode_uri: dtypes, head dims, position encoding, use_swa = window_left >= 0, logits cap), the
        sinks' presence added. use_swa follows the spelled window_left: an unbounded window spelled as a number past
        the keys builds the windowed module. On an H100 such builds within a built compile key took 1,424 s of 5,069 s
        of compiles, outside the compile slots, and 13 more outlasted the example timeout
        (campaigns/jit-untold-h100-2026-11-26.md)."""
        return (case.dtype.value, case.kv_cache_dtype.value, case.head_size, case.value_size, case.alibi is not None,
                _window_left(case) >= 0, case.soft_cap is not None, case.sinks is not None)

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
        window_left = _window_left(case)
        common = dict(window_left=window_left, logits_soft_cap=case.soft_cap, q_data_type=case.dtype.torch,
                      kv_data_type=kv_dtype, pos_encoding_mode="ALIBI" if case.alibi is not None else "NONE",
                      **spellings.scale_kwargs(case, "sm_scale"))
        key = (self.name, case.dtype, kvd, case.head_size, layout, window_left >= 0, case.soft_cap is not None,
               case.sinks is not None, case.num_heads // case.num_kv_heads, case.alibi is not None)
        t0 = time.perf_counter()  # plan() JIT-compiles a new variant: time it with the first run
        if self.kind == "decode":
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(dev), layout,
                                                                    use_tensor_cores=self.option == "tc")
            wrapper.plan(indptr, indices, last, case.num_heads, case.num_kv_heads, case.head_size,
                         case.cache.block_size, **common)
        else:
            wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace(dev), layout, backend=self.option)
            wrapper.plan(inputs.query_start_loc, indptr, indices, last, case.num_heads, case.num_kv_heads,
                         case.head_size, case.cache.block_size, head_dim_vo=case.value_size,
                         causal=case.is_causal, **common)
        run = dict(return_lse=True, **output_buffers(inputs))
        if kvd in FP8:
            run.update(k_scale=float(inputs.cache.k_scale[0]), v_scale=float(inputs.cache.v_scale[0]))
        if inputs.sinks is not None:
            run["sinks"] = inputs.sinks.to(dev)
        out, lse = wrapper.run(inputs.query, paged_kv(inputs), **run)
        lse = lse_natural(lse, base_two=True)
        if case.alibi is not None:
            # FlashInfer's bias is slope * (kv_idx - qo_idx), qo_idx counting the sequence's new tokens only
            # (variants.cuh; decode passes qo_idx = 0), not slope * (k - q): a per-row constant the output does
            # not see. Measured on an H100: decode LSE = oracle + slope * q
            # (campaigns/compile-slices-sanitizer-h100-2026-11-23.md), prefill-fa2 LSE = oracle + slope * (context
            # length) on every row (probes/flashinfer-prefill-alibi-lse-h100-2026-11-24.txt,
            # tools/analysis/lse-offset.py on tools/cases/flashinfer-prefill-alibi-context.json). The Case's LSE is
            # the oracle's convention.
            lse = lse - alibi_context_term(case, inputs.alibi_slopes).to(lse.device)
        return Actual(output=out, lse=lse, notes=first_call_note(SEEN_VARIANTS, key, t0))

    repro_quantized = True  # fp8 per tensor: k_scale / v_scale floats

    def repro_kernel(self, case) -> str | None:
        scale = ", sm_scale=SCALE" if spellings.scale_kwargs(case, "sm_scale") else ""
        alibi = ', pos_encoding_mode="ALIBI"' if case.alibi is not None else ""
        if self.kind == "decode":
            make = (f'flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores={self.option == "tc"})',
                    "w.plan(indptr, indices, last, H, H_KV, D, bs, **common)")
        else:
            make = (f'flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="{self.option}")',
                    "w.plan(cu_seqlens(0), indptr, indices, last, H, H_KV, D, bs, head_dim_vo=D_V, causal=CAUSAL, **common)")
        return f'''
def kernel(q, ks, vs, k_scales=None, v_scales=None):
    import flashinfer

    bs = {case.cache.block_size}
    k_cache, v_cache, table, pages, _ = paged_cache(ks, vs, bs)  # NaN in every slot past a sequence
    indptr, indices, last = page_metadata(table, pages, bs)
    workspace = torch.zeros(256 << 20, dtype=torch.uint8, device=DEVICE)
    common = dict(window_left={_window_left(case)}, logits_soft_cap=SOFT_CAP, q_data_type=DTYPE,
                  kv_data_type=k_cache.dtype{scale}{alibi})
    w = {make[0]}
    {make[1]}
    kw = dict(return_lse=True)
{output_buffers_source(case)}    if k_scales is not None:  # fp8 cache: per-tensor dequantization scales
        kw.update(k_scale=float(k_scales[0].reshape(-1)[0]), v_scale=float(v_scales[0].reshape(-1)[0]))
    if SINKS is not None:
        kw["sinks"] = SINKS.to(DEVICE)
    out, lse = w.run(q, (k_cache, v_cache), **kw)
    # FlashInfer's LSE is base 2; with ALiBi its bias is slope x (k - new-token index), not slope x (k - q): its LSE
    # differs from this script's by a per-row constant (FINDINGS.md, flashinfer-alibi-lse), the output does not
    return out, lse.float() * math.log(2)
'''


class FlashInferCascade(Backend):
    """flashinfer.MultiLevelCascadeAttentionWrapper, two levels: every query of the batch attends the
    shared prefix pages (level 0, one request, non-causal), each sequence its own pages after them
    (level 1, causal); FlashInfer merges the two states with merge_state_in_place. Cases come with a
    `shared_prefix` block table. The wrapper applies window_left and sinks to every level, which is
    wrong for a shared prefix: neither is declared."""

    name = "flashinfer-cascade"
    library = "flashinfer"
    description = "flashinfer.MultiLevelCascadeAttentionWrapper(2 levels): shared prefix + per-sequence suffix, merge_state"
    # its levels are fa2 prefill modules: an nvcc JIT build per combination, as the wrappers above (without these
    # keys its first calls met the plain example timeout: 8 of 8 timed out at 240 s on an H100)
    compiled_per = ("dtypes", "head_sizes", "kv_cache_dtypes")
    compiled_features = (Feature.SOFT_CAP,)
    loads_in_process = LOADS_IN_PROCESS
    caps = Capabilities(
        devices=frozenset({"cuda"}), dtypes=frozenset({DType.FLOAT16, DType.BFLOAT16}), head_sizes=(64, 128),
        attn_types=frozenset({AttentionType.DECODER}),
        features=frozenset({Feature.GQA, Feature.MQA, Feature.SOFT_CAP, Feature.CONTEXT, Feature.EMPTY_QUERY}),
        kv_layouts=frozenset(LAYOUT), block_sizes=(1, 8, 16, 32), block_tables=frozenset({BlockTableKind.SHARED_PREFIX}),
        lse_base=None, requires_cache=True, reads_paged_cache=True, soft_cap_tanh_error=PTX_TANH_APPROX,
        encodings=(spellings.SCALE_ENCODINGS,))  # plan(..., sm_scale: Optional[float] = None)

    def availability(self) -> str | None:
        return cuda_library_reason("flashinfer", "flashinfer-python")

    def run(self, inputs: Inputs) -> Actual:
        import flashinfer

        case = inputs.case
        dev = inputs.query.device
        bs, shared = case.cache.block_size, case.cache.prefix_blocks
        levels = [_csr([inputs.block_table[0, :shared]], [bs], dev), page_metadata(inputs, first=shared)]
        qo = [torch.tensor([0, case.num_tokens], dtype=torch.int32, device=dev), inputs.query_start_loc.to(torch.int32)]
        wrapper = flashinfer.MultiLevelCascadeAttentionWrapper(2, workspace(dev), LAYOUT[case.cache.layout])
        t0 = time.perf_counter()
        wrapper.plan(qo, [x[0] for x in levels], [x[1] for x in levels], [x[2] for x in levels], case.num_heads,
                     case.num_kv_heads, case.head_size, bs, causal=True, **spellings.scale_kwargs(case, "sm_scale"),
                     logits_soft_cap=case.soft_cap, q_data_type=case.dtype.torch, kv_data_type=case.dtype.torch)
        out = wrapper.run(inputs.query, paged_kv(inputs))
        key = (self.name, case.dtype, case.head_size, case.soft_cap is not None, case.num_heads // case.num_kv_heads)
        return Actual(output=out, notes=first_call_note(SEEN_VARIANTS, key, t0))

    def repro_kernel(self, case) -> str | None:
        scale = ", sm_scale=SCALE" if spellings.scale_kwargs(case, "sm_scale") else ""
        return f'''
def kernel(q, ks, vs):
    import flashinfer

    bs, shared = {case.cache.block_size}, {case.cache.prefix_blocks}  # the first `shared` pages hold every sequence's prefix
    k_cache, v_cache, table, pages, _ = paged_cache(ks, vs, bs)  # NaN in every slot past a sequence
    # level 0: every query of the batch as one request over sequence 0's prefix pages (the prefix keys are the same
    # in every sequence); level 1: each sequence's own pages after the prefix, causal
    levels = [page_csr([table[0, :shared]], [bs]), page_metadata(table, pages, bs, first=shared)]
    qo = [torch.tensor([0, q.shape[0]], dtype=torch.int32, device=DEVICE), cu_seqlens(0)]
    workspace = torch.zeros(256 << 20, dtype=torch.uint8, device=DEVICE)
    w = flashinfer.MultiLevelCascadeAttentionWrapper(2, workspace, "NHD")
    w.plan(qo, [x[0] for x in levels], [x[1] for x in levels], [x[2] for x in levels], H, H_KV, D, bs, causal=True,
           logits_soft_cap=SOFT_CAP, q_data_type=DTYPE, kv_data_type=DTYPE{scale})
    return w.run(q, (k_cache, v_cache)), None  # the cascade wrapper returns no LSE
'''


def flashinfer_backends() -> list[Backend]:
    from .flashinfer_mla import flashinfer_mla_backends

    return [FlashInfer("flashinfer-decode", "decode", "cuda-core"), FlashInfer("flashinfer-decode-tc", "decode", "tc"),
            FlashInfer("flashinfer-prefill-fa2", "prefill", "fa2"), FlashInfer("flashinfer-prefill-fa3", "prefill", "fa3"),
            FlashInferCascade(), *flashinfer_mla_backends()]
