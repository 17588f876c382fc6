"""The backend protocol: declared capabilities (data), `not_supported_reasons`, and `run`.

A backend declares the region of Case space it accepts as a `Capabilities` value; the fuzzer draws
cases from exactly that region, and `Capabilities.reasons` turns any case outside it into
human-readable reasons (xformers' `not_supported_reasons` is the model). `run` returns `Actual`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import torch
from torch import Tensor

from reference.case import (AlibiConvention, AttentionType, BlockTableKind, Case, CausalAlignment,
                            DType, KVCacheDType, KVLayout, ScaleGranularity)
from reference.inputs import Inputs
from reference.scores import standard_alibi_slopes

from .spellings import sliding_window


class LseBase(Enum):
    E = "e"
    TWO = "2"


class Feature(Enum):
    """Case features a backend may declare (names match `Case.features()`)."""

    GQA = "gqa"
    MQA = "mqa"
    WINDOW = "window"
    ALIBI = "alibi"
    SOFT_CAP = "soft_cap"
    SINKS = "sinks"
    CHUNKED_LOCAL = "chunked_local"
    BLOCK_SPARSE = "block_sparse"
    HEAD_SIZE_V = "head_size_v"
    CONTEXT = "context"  # queries with cached context (decode, chunked prefill, spec-decode)
    EMPTY_QUERY = "empty_query"  # sequences with query_len 0
    Q_FP8 = "q_fp8"
    DYNAMIC_SCALES = "dynamic_scales"
    MORE_QUERIES_THAN_KEYS = "more_queries_than_keys"  # kernel cases: rows before the first key see nothing
    LAYERED_CACHE = "layered_cache"  # the cache tensor is one layer of a [L, ...] tensor (strided memory)
    PAGED_KERNEL = "paged_kernel"  # kernel cases (raw API: any causal flag / window pair / q > k) through a page table
    # vLLM 0.26's unified-attention mask rules (Case.bidirectional_ranges, global_prefix, chunk_lookback, qq_bias)
    PREFIX_LM = "prefix_lm"
    GLOBAL_PREFIX = "global_prefix"
    CHUNK_LOOKBACK = "chunk_lookback"
    QQ_BIAS = "qq_bias"


ALL_FEATURES = frozenset(Feature)
COMMON_HEAD_SIZES = (32, 40, 64, 72, 80, 96, 112, 128, 160, 192, 200, 256)


def _same_slopes(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Equal as float32, the precision slopes reach a kernel in."""
    return torch.equal(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32))


# The largest relative error of PTX's tanh.approx.f32 over the whole float range (PTX ISA, "Floating Point
# Instructions: tanh"): cutlass::fast_tanh, which flash-attention's apply_softcap calls (FA2 and FA3, hopper/utils.h),
# and FlashInfer's math::tanh (include/flashinfer/math.cuh), which its LogitsSoftCap variants call, compile to it.
PTX_TANH_APPROX = 2.0**-11


@dataclass(frozen=True)
class Capabilities:
    """The region of Case space a backend accepts. Empty kv_layouts: contiguous K/V only."""

    devices: frozenset[str] = frozenset({"cpu"})
    dtypes: frozenset[DType] = frozenset({DType.FLOAT16, DType.BFLOAT16})
    head_sizes: tuple[int, ...] = COMMON_HEAD_SIZES
    attn_types: frozenset[AttentionType] = frozenset({AttentionType.DECODER})
    features: frozenset[Feature] = frozenset()
    alibi_conventions: frozenset[AlibiConvention] = frozenset({AlibiConvention.SIGNED, AlibiConvention.SYMMETRIC})
    alibi_standard_slopes: bool = False  # the kernel computes its own slopes from the head count (no slopes argument)
    alibi_in_model_dtype: bool = False  # the bias goes in as a tensor of the case's dtype (Alibi.in_model_dtype)
    alibi_attn_types: frozenset[AttentionType] | None = None  # where ALiBi is declared (None: every declared type)
    kv_layouts: frozenset[KVLayout] = frozenset()
    kv_cache_dtypes: frozenset[KVCacheDType] = frozenset({KVCacheDType.AUTO})
    scale_granularities: frozenset[ScaleGranularity] = frozenset({ScaleGranularity.PER_TENSOR})
    block_sizes: tuple[int, ...] = (16,)
    block_tables: frozenset[BlockTableKind] = frozenset(BlockTableKind)
    max_query_len: int | None = None  # 1 for decode-only kernels
    max_kv_len: int | None = None
    max_head_group: int | None = None  # largest num_heads // num_kv_heads
    head_groups: frozenset[int] | None = None  # the num_heads // num_kv_heads a kernel dispatches (None: any)
    max_kv_heads: int | None = None  # 1 for MLA kernels: one latent head shared by every query head
    head_size_pairs: tuple[tuple[int, int], ...] | None = None  # (head_size, value_size) when the two are tied (MLA)
    causal_alignments: frozenset[CausalAlignment] = frozenset({CausalAlignment.BOTTOM_RIGHT})  # kernel cases
    causal_modes: frozenset[bool] = frozenset({False, True})  # kernel cases: causal flags the API takes
    lse_base: LseBase | None = LseBase.E  # None: the kernel returns no LSE
    writes_output_buffer: bool = False  # writes into a given (poisoned) output tensor
    reads_paged_cache: bool = False  # False: the adapter gathers the cache into contiguous K/V
    writes_cache: bool = False  # the kernel itself stores new tokens through slot_mapping
    requires_cache: bool = False  # decoder/cross cases must come with a paged cache
    empty_row_lse: float = -math.inf  # LSE the kernel returns for a row with no visible key
    uniform_query_len: bool = False  # every sequence of a batch must have the same query_len
    min_query_len: int = 0  # shortest non-empty query a sequence may have
    min_kv_len: int = 0  # fewest keys a sequence may have
    causal_equal_lengths: bool = False  # kernel cases: a causal call needs query_len == key_len
    window_right: bool = True  # kernel cases: the API bounds a window's right side (FlashInfer: window_left only)
    fp8_query_only: bool = False  # an fp8 cache is read only with an fp8 query (Q_FP8): drawn with one always
    fp8_model_dtypes: frozenset[DType] | None = None  # the model dtypes an fp8 cache is read with (None: any)
    dynamic_scales_first_forward: bool = False  # dynamic scales come from the step that stored every key: no context
    # (most queries, one length): an fp8 cache is read only by batches the backend's decode path takes whole (queries
    # of at most that many tokens, all of one length when True); fp8 cases are drawn so (vLLM's MLA layer)
    fp8_decode_batches: tuple[int, bool] | None = None
    # n: the backend quantizes the query of an fp8 cache's prefills to fp8 itself and keeps its decodes' (queries of at
    # most n tokens) 16-bit; the Case's fp8 query is the whole query's, so fp8 cases come all decode without one and
    # all prefill with one (vLLM's FLASHINFER on sm90: get_q_data_type)
    fp8_query_prefills: int | None = None
    # s: with an fp8 query over an fp8 per-tensor cache the kernel runs P.V in fp8, its unnormalized probabilities
    # times s rounded to the cache's fp8 dtype (reference.softmax.ProbabilityRounding): the tolerance rule's baseline
    # holds them so (fuzz.tolerance.probability_rounding). None: P stays 16- or 32-bit
    fp8_probabilities: float | None = None
    # e: the soft-cap's tanh carries a relative error up to e (PTX_TANH_APPROX: kernels that cap with tanh.approx.f32);
    # the tolerance rule adds what that moves the LSE and output by (fuzz.tolerance.soft_cap_shift). 0: an accurate tanh
    soft_cap_tanh_error: float = 0.0
    sinks_dtypes: frozenset[DType] | None = None  # the model dtypes sinks are taken with (None: any); drawn so
    # (encoding, value) pairs taken only without a sliding window (vLLM's sliding_window, a spelled one included);
    # drawn so: with a window the encoding takes another of its values
    windowless_encodings: tuple[tuple[str, str], ...] = ()
    finite_canaries_only: bool = False  # loads whole pages, masks unused slots by a zero probability
    # ((head_size, value_size), (start, end)): cases of that size pair come with the query's dimensions [start, end)
    # 0 (Values.query_zero_dims; an MLA layer's absorbed query spans qk_nope of its latent dimensions)
    query_zero_dims: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = ()
    # ((head_size, value_size), n): dynamic-scale cases of that size pair read the amax of each row's first n
    # dimensions (Quant.dynamic_amax_dims: vLLM's MLA layer scales by the latent's amax)
    dynamic_amax_dims: tuple[tuple[tuple[int, int], int], ...] = ()
    # Spellings the call accepts for one semantic, e.g. ("unbounded_window", ("none", "minus_one", "huge")):
    # the fuzzer draws each, so every spelling is tested, not only the adapter's favourite (first: default).
    encodings: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def reasons(self, case: Case, device: str = "cpu") -> list[str]:
        """Why `case` lies outside this declaration; empty when it is inside."""
        out: list[str] = []
        if device not in self.devices:
            out.append(f"device={device} (declared: {sorted(self.devices)})")
        if case.dtype not in self.dtypes:
            out.append(f"dtype={case.dtype.value} (declared: {sorted(d.value for d in self.dtypes)})")
        if case.head_size not in self.head_sizes:
            out.append(f"head_size={case.head_size} (declared: {list(self.head_sizes)})")
        if case.attn_type not in self.attn_types:
            out.append(f"attn_type={case.attn_type.value} (declared: {sorted(t.value for t in self.attn_types)})")
        for name in sorted(case.features()):
            feature = _feature_of(name)
            if feature is not None and feature not in self.features:
                out.append(f"feature {name} not declared")
        if case.attn_type == AttentionType.KERNEL:
            if case.causal not in self.causal_modes:
                out.append(f"causal={case.causal} (declared: {sorted(self.causal_modes)})")
            if case.causal and case.causal_alignment not in self.causal_alignments:
                out.append(f"causal_alignment={case.causal_alignment.value} (declared: "
                           f"{sorted(a.value for a in self.causal_alignments)})")
        if case.sinks is not None and self.sinks_dtypes is not None and case.dtype not in self.sinks_dtypes:
            out.append(f"sinks with dtype={case.dtype.value} (sinks declared with: "
                       f"{sorted(d.value for d in self.sinks_dtypes)})")
        for name, value in self.windowless_encodings:
            if case.encoding(name, None) == value and sliding_window(case) is not None:
                out.append(f"encoding {name}={value} with a sliding window (declared windowless)")
        if case.alibi is not None and self.alibi_attn_types is not None and case.attn_type not in self.alibi_attn_types:
            out.append(f"ALiBi with attn_type={case.attn_type.value} (declared with: "
                       f"{sorted(t.value for t in self.alibi_attn_types)})")
        if case.alibi is not None and case.alibi.convention not in self.alibi_conventions:
            out.append(f"alibi.convention={case.alibi.convention.value} (declared: "
                       f"{sorted(c.value for c in self.alibi_conventions)})")
        if (self.alibi_standard_slopes and case.alibi is not None
                and not _same_slopes(case.alibi.slopes, standard_alibi_slopes(case.num_heads))):
            out.append("alibi.slopes: this kernel computes the standard slopes of its head count itself "
                       "(reference.scores.standard_alibi_slopes) and takes no others")
        if self.head_size_pairs is not None and (case.head_size, case.value_size) not in self.head_size_pairs:
            out.append(f"(head_size, value_size)=({case.head_size}, {case.value_size}) (declared: "
                       f"{list(self.head_size_pairs)})")
        zero = dict(self.query_zero_dims).get((case.head_size, case.value_size))
        if case.values.query_zero_dims != zero:
            out.append(f"values.query_zero_dims={case.values.query_zero_dims} (declared for this size pair: {zero})")
        if self.max_kv_heads is not None and case.num_kv_heads > self.max_kv_heads:
            out.append(f"num_kv_heads={case.num_kv_heads} > {self.max_kv_heads}")
        group = case.num_heads // case.num_kv_heads
        if self.max_head_group is not None and group > self.max_head_group:
            out.append(f"num_heads/num_kv_heads={group} > {self.max_head_group}")
        if self.head_groups is not None and group not in self.head_groups:
            out.append(f"num_heads/num_kv_heads={group} (declared: {sorted(self.head_groups)})")
        if self.max_query_len is not None and case.max_query_len > self.max_query_len:
            out.append(f"max_query_len={case.max_query_len} > {self.max_query_len}")
        short_q = [n for n in case.query_lens if 0 < n < self.min_query_len]
        if short_q:
            out.append(f"query_len={short_q[0]} < {self.min_query_len} (declared minimum per sequence)")
        if any(n < self.min_kv_len for n in case.kv_lens):
            out.append(f"kv_len={min(case.kv_lens)} < {self.min_kv_len} (declared minimum per sequence)")
        if (self.causal_equal_lengths and case.attn_type == AttentionType.KERNEL and case.causal
                and any(s.query_len != s.key_len for s in case.sequences)):
            out.append("causal with query_len != key_len: this kernel takes causal only for equal lengths")
        if (not self.window_right and case.attn_type == AttentionType.KERNEL and case.window is not None
                and case.window[1] is not None and not case.causal):
            out.append(f"window right side {case.window[1]}: this kernel takes a left window only (window_left)")
        if self.uniform_query_len and len(set(case.query_lens)) > 1:
            out.append(f"query_lens={case.query_lens}: this kernel needs one query_len for the whole batch")
        if self.max_kv_len is not None and case.max_kv_len > self.max_kv_len:
            out.append(f"max_kv_len={case.max_kv_len} > {self.max_kv_len}")
        declared = dict(self.encodings)
        for name, spelling in case.encodings:
            if spelling not in declared.get(name, ()):
                out.append(f"encoding {name}={spelling} (declared: {list(declared.get(name, ()))})")
        out += self._cache_reasons(case)
        return out

    def _cache_reasons(self, case: Case) -> list[str]:
        out: list[str] = []
        c = case.cache
        if c is None:
            if self.requires_cache and case.uses_cache:
                out.append("cache=None: this kernel reads a paged cache")
            return out
        if not self.kv_layouts:
            return ["cache: this kernel takes contiguous K/V (no paged cache declared)"]
        if c.layout not in self.kv_layouts:
            out.append(f"cache.layout={c.layout.value} (declared: {sorted(x.value for x in self.kv_layouts)})")
        if c.block_size not in self.block_sizes:
            out.append(f"cache.block_size={c.block_size} (declared: {list(self.block_sizes)})")
        if c.table not in self.block_tables:
            out.append(f"cache.table={c.table.value} not declared")
        if self.finite_canaries_only and not c.finite_canaries:
            out.append("cache.finite_canaries=False: this kernel loads whole pages and masks unused slots by a "
                       "zero probability, so NaN canaries (0 * NaN) would poison rows; declared finite_canaries_only")
        q = c.quant
        if q.kv_cache_dtype not in self.kv_cache_dtypes:
            out.append(f"kv_cache_dtype={q.kv_cache_dtype.value} (declared: "
                       f"{sorted(x.value for x in self.kv_cache_dtypes)})")
        if q.kv_cache_dtype.is_fp8 and self.fp8_query_only and q.q_fp8_scale is None:
            out.append(f"kv_cache_dtype={q.kv_cache_dtype.value} without an fp8 query (q_fp8_scale): declared fp8_query_only")
        if q.kv_cache_dtype.is_fp8 and self.fp8_query_prefills is not None:
            out += _split_query_reasons(case, self.fp8_query_prefills)
        if q.kv_cache_dtype.is_fp8 and self.fp8_model_dtypes is not None and case.dtype not in self.fp8_model_dtypes:
            out.append(f"kv_cache_dtype={q.kv_cache_dtype.value} with dtype={case.dtype.value} (fp8 declared with: "
                       f"{sorted(d.value for d in self.fp8_model_dtypes)})")
        if q.granularity not in self.scale_granularities:
            out.append(f"scale granularity={q.granularity.value} not declared")
        if q.dynamic_scales and Feature.DYNAMIC_SCALES not in self.features:
            out.append("dynamic_scales not declared")
        amax_dims = dict(self.dynamic_amax_dims).get((case.head_size, case.value_size)) if q.dynamic_scales else None
        if q.dynamic_amax_dims != amax_dims:
            out.append(f"cache.quant.dynamic_amax_dims={q.dynamic_amax_dims} (declared for this case: {amax_dims})")
        if q.dynamic_scales and self.dynamic_scales_first_forward and any(s.context_len for s in case.sequences):
            out.append("dynamic_scales with cached context: calc_kv_scales sets the scales in the first forward, the "
                       "one that stored the context (declared dynamic_scales_first_forward)")
        return out


def _split_query_reasons(case: Case, decode_len: int) -> list[str]:
    """Why an fp8 case does not fit a backend that quantizes its prefills' queries only (fp8_query_prefills)."""
    lens = [s.query_len for s in case.sequences if s.query_len] or [0]
    if case.cache.quant.q_fp8_scale is None and max(lens) > decode_len:
        return [f"an fp8 cache with a query of more than {decode_len} tokens and no fp8 query (q_fp8_scale): the "
                "backend quantizes a prefill's query to fp8"]
    if case.cache.quant.q_fp8_scale is not None and min(lens) <= decode_len:
        return [f"an fp8 query (q_fp8_scale) with a query of at most {decode_len} tokens: the backend keeps a "
                "decode's query 16-bit"]
    return []


def _feature_of(name: str) -> Feature | None:
    try:
        return Feature(name)
    except ValueError:
        return None  # 'paged' and 'kv_*' are checked through the cache fields


@dataclass
class Actual:
    """What a backend returned, already converted to the canonical conventions.

    output [num_tokens, num_heads, head_size_v]; lse natural-log [num_tokens, num_heads] or None;
    output_buffer: the whole (padded, poisoned) buffer the kernel wrote into, when it takes one.
    """

    output: Tensor
    lse: Tensor | None = None
    output_buffer: Tensor | None = None
    buffer_rows: int = 0  # rows of output_buffer that belong to real tokens (the rest must stay poisoned)
    written_cache: object | None = None  # a KVCache the kernel wrote the new tokens into: compared bit for bit
    query_fp8: Tensor | None = None  # the fp8 query the library quantized itself and attended with (vLLM's layer)
    notes: dict = field(default_factory=dict)


class Unsupported(Exception):
    """Raised by run() when the library itself refuses a case the declaration admitted."""


# What Backend.jit_shape_per may name (fields of fuzz.limits.Limits): (num_heads, num_kv_heads), the paged cache's
# block size, the sliding window's W, the soft-cap's value, the attention type, the cache layout, the encodings' values
# ("encodings": each declared encoding's; "encodings.NAME": encoding NAME's alone, the others drawn freely)
JIT_SHAPE_FIELDS = ("heads", "block_sizes", "windows", "soft_caps", "attn_types", "kv_layouts", "encodings")
ENCODING_PIN = "encodings."


class Backend:
    """Base class: subclasses set name, library, caps; implement run(); may add quirk reasons."""

    name: str = "?"
    library: str = "?"
    caps: Capabilities = Capabilities()
    description: str = ""
    # Limits focus fields ("dtypes", "head_sizes", "kv_cache_dtypes") each of whose values is a separate JIT
    # compile: with --compile-slices a campaign gives every generation shard one combination of them (a compile
    # slice) and keeps a worker on its slice, so each worker compiles few kernels (campaign.scheduler).
    compiled_per: tuple[str, ...] = ()
    compiled_features: tuple[Feature, ...] = ()  # features whose presence is a separate compile: sliced alike

    # Backends that build the same library modules for equal variants name one space: a variant's build then takes
    # one lock across them, not one per backend (None: the backend's own). FlashInfer's tensor-core decode runs its fa2
    # prefill modules; built alike by both, the second build waited on FlashInfer's own lock while holding a slot.
    jit_module_space: str | None = None

    # A first call of a module some process on the host built only loads it into this worker's process, on the core
    # the worker already holds (no compiler fanning out beyond it): it needs no compile slot, only a build does
    # (campaign.claims). FA4's and FlashInfer's declare it (their modules load in 2-5 s and under 0.5 s: benchmarks/
    # results/campaigns/jit-untold-h100-2026-11-26.md, jit-untold-side-by-side-h200-2026-11-26.md).
    loads_in_process: bool = False

    # Case fields a JIT also builds one kernel per value of, beyond the compile key (of JIT_SHAPE_FIELDS): each focused
    # shard of the backend draws one value of each (fuzz.shapes), so its cases reuse a few builds.
    jit_shape_per: tuple[str, ...] = ()

    def jit_variant(self, case: Case) -> tuple | None:
        """What the library builds one module for when that is finer than the compile key (compiled_per and
        compiled_features, the campaign's coverage unit); None: the compile key. A campaign's first call of a new
        variant in a worker takes a compile slot (campaign.claims)."""
        return None

    def availability(self) -> str | None:
        """None when usable here, else the reason (missing library, no GPU, ...)."""
        return None

    @property
    def documented_caps(self) -> Capabilities:
        """What the library documents; `caps` is what this device takes of it (narrower where the library refuses
        part of it on this hardware, `device_out_reason` says why)."""
        return self.caps

    device_out_reason: str | None = None

    def device(self) -> str:
        return sorted(self.caps.devices)[0] if self.caps.devices != frozenset({"cpu", "cuda"}) else (
            "cuda" if torch.cuda.is_available() else "cpu")

    def not_supported_reasons(self, case: Case) -> list[str]:
        return self.caps.reasons(case, self.device())

    def run(self, inputs: Inputs) -> Actual:
        raise NotImplementedError

    # A template that takes quantized caches: `kernel(q, ks, vs, k_scales, v_scales)` is handed what the cache
    # stores and the dequantization scales (backends/_repro_cache.py); other templates see unquantized cases only.
    repro_quantized = False
    # with repro_quantized: the template's kernel takes the unquantized keys and values (and the scales) and lets
    # the library's own writer store them; the script's reference still reads back its own store()
    repro_writes_cache = False

    def repro_kernel(self, case: Case) -> str | None:
        """Source of `def kernel(q, ks, vs) -> (out, lse | None)` calling the library as `run` does, for a
        self-contained repro script (see backends/_repro.py for the names it may use); None: no template."""
        return None

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


def cuda_library_reason(module: str, package: str) -> str | None:
    """Why a CUDA library's backend cannot run here (not installed, no GPU, import error), or None.

    Checks the package without importing it first, so a CPU machine never pays for (or crashes in)
    a GPU library's import.
    """
    import importlib
    import importlib.util

    if importlib.util.find_spec(module.split(".")[0]) is None:
        return f"{package} is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        importlib.import_module(module)
    except Exception as e:  # JIT DSLs fail in more ways than ImportError
        return f"{module} not importable: {type(e).__name__}: {e}"
    return None


def poisoned_output(inputs: Inputs, extra_rows: int = 3) -> Tensor:
    """An output buffer of num_tokens + extra_rows rows, all NaN: rows a kernel must not touch stay NaN."""
    case = inputs.case
    return torch.full((case.num_tokens + extra_rows, case.num_heads, case.value_size), float("nan"),
                      dtype=case.dtype.torch, device=inputs.device)
