"""The parts a Case is made of: its sequences, positional and sparsity rules, paged cache, quantization and value
distribution, each a frozen dataclass whose defaults mean "feature off"."""
from __future__ import annotations

from dataclasses import dataclass, field

from .kinds import AlibiConvention, AttentionType, BlockTableKind, KVCacheDType, KVLayout, ScaleGranularity, \
    ValueDistribution, ValueSource


@dataclass(frozen=True)
class SequenceSpec:
    """One sequence of the batch: `context_len` keys already cached, `query_len` new tokens.

    For encoder_decoder the keys are the `encoder_len` encoder tokens in the cross cache.
    """

    query_len: int
    context_len: int = 0
    encoder_len: int = 0
    key_len: int | None = None  # attn_type=kernel only: keys of this sequence (any relation to query_len)


@dataclass(frozen=True)
class Alibi:
    slopes: tuple[float, ...]  # one per query head
    convention: AlibiConvention = AlibiConvention.SIGNED
    # the bias reaches the kernel held in the case's dtype, rounded there: an additive attn_mask of the query's dtype
    # (torch SDPA; Capabilities.alibi_in_model_dtype). A bfloat16 bias of -511 is off by up to 1 logit.
    in_model_dtype: bool = False


@dataclass(frozen=True)
class BlockSparse:
    """vLLM's block-sparse pattern (BlocksparseParams); see reference/block_sparse.py.

    The case's heads are tensor-parallel rank `tp_rank`'s share of `tp_size * num_heads` heads
    (vLLM's active_head_range); the vertical-stride offset of a head depends on its global index.
    """

    block_size: int = 16
    local_blocks: int = 2
    vert_stride: int = 4
    homo_head: bool = False  # every head the same vertical blocks
    homo_head_group: bool = False  # the query heads of one kv head share vertical blocks
    head_sliding_step: int | None = None  # None: derived as vLLM does (block_sparse.sliding_step)
    tp_rank: int = 0
    tp_size: int = 1


@dataclass(frozen=True)
class GlobalPrefix:
    """vLLM's R-SWA: each sequence's first `prefix_lens[i]` tokens (its prompt) stay visible to every
    later query; other keys only within the last `window` positions (the query's own included)."""

    window: int
    prefix_lens: tuple[int, ...]  # one per sequence


@dataclass(frozen=True)
class Quant:
    """KV-cache quantization. Scales are the dequantization multipliers (stored = value / scale)."""

    kv_cache_dtype: KVCacheDType = KVCacheDType.AUTO
    granularity: ScaleGranularity = ScaleGranularity.PER_TENSOR
    k_scales: tuple[float, ...] = (1.0,)  # one value, or one per kv head (PER_KV_HEAD)
    v_scales: tuple[float, ...] = (1.0,)
    # compute the k / v scales as amax / range, as calc_kv_scales does (over every key and value: the first forward
    # stores them all), and the query's with q_fp8_scale set (1.0 there then: the value is computed, not given)
    dynamic_scales: bool = False
    # mla_latent with dynamic_scales: the scale's amax reads the first n dimensions of each row only (vLLM's
    # MLAAttention.calc_kv_scales takes amax(kv_c_normed), the latent, not the rope key); None: the whole row
    dynamic_amax_dims: int | None = None
    q_fp8_scale: float | None = None  # quantize the query to fp8 e4m3 with this scale


@dataclass(frozen=True)
class CacheSpec:
    """The paged KV cache a decoder / cross-attention case reads through its block tables."""

    layout: KVLayout = KVLayout.FLASH_NHD
    block_size: int = 16
    table: BlockTableKind = BlockTableKind.CONTIGUOUS
    prefix_blocks: int = 0  # SHARED_PREFIX: blocks shared by every sequence
    spare_blocks: int = 0  # never-referenced blocks in the pool (canaries)
    padding_slots: int = 0  # trailing slot_mapping entries of -1 (CUDA-graph padding)
    quant: Quant = field(default_factory=Quant)
    # A leading layers dimension (vLLM's include_num_layers_dimension): 0 = none; L >= 1 = one tensor
    # holds L layers in vLLM's stride order and the case reads layer `layer` (the others are canaries).
    layers: int = 0
    layer: int = 0
    # Unused slots hold NaN (a read past a sequence poisons its row) or, with finite_canaries, a loud
    # finite value (for kernels that load whole pages and zero the unused slots' probabilities).
    finite_canaries: bool = False


@dataclass(frozen=True)
class Values:
    distribution: ValueDistribution = ValueDistribution.NORMAL
    logit_scale: float = 1.0  # multiplies q: logits grow ~linearly with it
    # outliers only: each sequence's last key is one of the 8x tokens (drawn since 2026-11-23; False, the default,
    # keeps the tensors of cases saved before)
    outliers_at_edge: bool = False
    # each sequence's last value times this (drawn since 2026-11-24; 1.0 keeps saved cases' tensors): the key a
    # one-key mask shift of a decode row moves, made to show without changing where the softmax puts its weight
    edge_value_gain: float = 1.0
    # (start, end): the query's dimensions [start, end) are 0 in every head. An MLA layer absorbs its query as
    # q_nope W_UK, which spans qk_nope of the kv_lora_rank latent dimensions: the rest of the absorbed query is 0
    # (backends/mla_projections.py). None (the default) draws every dimension.
    query_zero_dims: tuple[int, int] | None = None
    # where the normal draws come from (drawn as TABLE since 2026-12-01; GENERATOR, the default, keeps saved cases' tensors)
    source: ValueSource = ValueSource.GENERATOR


def kv_len(attn_type: AttentionType, seq: SequenceSpec) -> int:
    """Number of keys sequence `seq` attends over."""
    if attn_type == AttentionType.DECODER:
        return seq.context_len + seq.query_len
    if attn_type == AttentionType.ENCODER_DECODER:
        return seq.encoder_len
    if attn_type == AttentionType.KERNEL:
        return seq.key_len or 0
    return seq.query_len
