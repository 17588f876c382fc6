"""The Case's vocabulary: the enumerations its fields take, and the error a field outside them raises."""
from __future__ import annotations

from enum import Enum

import torch


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class CaseError(ValueError):
    """A Case field holds a value outside what the semantics allow; the message names the field."""


class DType(Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"

    @property
    def torch(self) -> torch.dtype:
        return getattr(torch, self.value)


class AttentionType(Enum):
    """vLLM's attention types (the named presets of the mask semantics)."""

    DECODER = "decoder"  # causal, bottom-right aligned over context + new tokens, paged cache
    ENCODER = "encoder"  # bidirectional over the sequence itself, no cache
    ENCODER_ONLY = "encoder_only"  # bidirectional, no cache; windows are symmetric
    ENCODER_DECODER = "encoder_decoder"  # decoder queries attend every encoder key (cross cache)
    KERNEL = "kernel"  # a raw kernel call: query_len and key_len independent, causal / alignment / window explicit


class CausalAlignment(Enum):
    """Where the causal diagonal sits when query_len < kv_len (or >)."""

    BOTTOM_RIGHT = "bottom_right"  # the last query sees every key (vLLM, flash-attn >= 2.1)
    TOP_LEFT = "top_left"  # query j sees keys 0..j (SDPA's is_causal)


class AlibiConvention(Enum):
    """How an ALiBi slope turns into a bias; identical under a causal mask, different without one."""

    SIGNED = "signed"  # slope * (k_pos - q_pos)   (vLLM's xformers and paged kernels)
    SYMMETRIC = "symmetric"  # -slope * |k_pos - q_pos|   (flash-attn's non-causal ALiBi)
    SQRT = "sqrt"  # -slope * sqrt(q_pos - k_pos) for earlier keys, 0 for later ones (vLLM's use_alibi_sqrt)


class ValueDistribution(Enum):
    """How q/k/v values are drawn; each exposes a different class of kernel error."""

    NORMAL = "normal"  # N(0, 1): logits O(logit_scale)
    OUTLIERS = "outliers"  # a few channels and tokens 20x larger: stresses the running max
    SHARP = "sharp"  # keys are near-duplicates of a few prototypes: peaked, near-tied softmax
    RECENT = "recent"  # a recency bias, as trained decoders have: the latest keys carry weight, mask edges show
    EDGE = "edge"  # each sequence's last key holds about 3/4 of the weight at any length and logit scale: the key a
    #                full row's one-key mask shift drops (cross attention over thousands of keys is not blind)


class ValueSource(Enum):
    """Where a case's normal draws come from (reference/values.py): each tensor of them from the case's generator, or
    each token's row of them read from one fixed table of normal draws at an offset the generator draws."""

    GENERATOR = "generator"  # torch.randn from the case's generator, tensor by tensor (cases saved before 2026-12-01)
    TABLE = "table"  # rows of values.normal_table() for every tensor of TABLE_ABOVE values or more: 3-8x cheaper to
    #                  make than torch.randn on one CPU thread, the long tier's largest cost


class KVLayout(Enum):
    """Physical layout of the paged KV cache (see reference/layouts.py for shapes)."""

    FLASH_NHD = "flash_nhd"  # [2, num_blocks, block_size, H_kv, D]
    FLASH_HND = "flash_hnd"  # same logical shape, stored [2, num_blocks, H_kv, block_size, D]
    FLASHINFER_NHD = "flashinfer_nhd"  # [num_blocks, 2, block_size, H_kv, D]
    FLASHINFER_HND = "flashinfer_hnd"  # [num_blocks, 2, H_kv, block_size, D]
    PAGED_V0 = "paged_v0"  # key [nb, H_kv, D/x, bs, x], value [nb, H_kv, D, bs]
    MLA_LATENT = "mla_latent"  # [nb, bs, kv_lora_rank + rope_dim]: one latent "head"; value = its prefix
    # vLLM 0.26's packed cache: logical [nb, H_kv, bs, 2*D], K in [..., :D], V in [..., D:], stored NHD or HND
    VLLM_NHD = "vllm_nhd"  # memory [nb, bs, H_kv, 2*D]
    VLLM_HND = "vllm_hnd"  # memory [nb, H_kv, bs, 2*D]


class BlockTableKind(Enum):
    """How sequences' logical blocks map to physical blocks of the pool."""

    CONTIGUOUS = "contiguous"  # sequence i owns a run of consecutive blocks after the null block
    SHUFFLED = "shuffled"  # a random permutation of the pool; block 0 is the reserved null block
    SHARED_PREFIX = "shared_prefix"  # the first prefix_blocks blocks are the same physical blocks
    SPARSE = "sparse"  # few used blocks scattered in a pool 4x larger than needed


class KVCacheDType(Enum):
    AUTO = "auto"  # the model dtype
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    INT8_KV = "int8_kv"  # int8 fork level 1: int8 K (per token-head scale), int8 V (per channel)
    INT8_K_FP16_V = "int8_k_fp16_v"  # int8 fork level 2: int8 K (per token-head scale), 16-bit V
    # vLLM 0.26's dynamic per-(token, head) modes: K and V each get scale = max(amax / QMAX, 1e-6),
    # kept in scale caches [num_blocks, block_size, H_kv]; the Quant's static scales are unused.
    INT8_PER_TOKEN_HEAD = "int8_per_token_head"
    FP8_PER_TOKEN_HEAD = "fp8_per_token_head"
    # ... and its int4 mode: Hadamard-rotated, asymmetric 4-bit codes two per byte (reference/int4.py).
    INT4_PER_TOKEN_HEAD = "int4_per_token_head"

    @property
    def is_fp8(self) -> bool:
        """fp8 with static (per tensor / per head) scales."""
        return self in (KVCacheDType.FP8_E4M3, KVCacheDType.FP8_E5M2)

    @property
    def is_int8(self) -> bool:
        """The int8 fork's modes."""
        return self in (KVCacheDType.INT8_KV, KVCacheDType.INT8_K_FP16_V)

    @property
    def is_per_token_head(self) -> bool:
        return self in (KVCacheDType.INT8_PER_TOKEN_HEAD, KVCacheDType.FP8_PER_TOKEN_HEAD,
                        KVCacheDType.INT4_PER_TOKEN_HEAD)

    @property
    def is_one_byte(self) -> bool:
        """Keys stored one byte per element."""
        return self.is_fp8 or self.is_int8 or self in (KVCacheDType.INT8_PER_TOKEN_HEAD, KVCacheDType.FP8_PER_TOKEN_HEAD)

    def holds_heads(self, head_size: int, head_size_v: int) -> bool:
        """Whether this kv dtype can store vectors of these sizes: int4's rotation needs powers of two."""
        return self != KVCacheDType.INT4_PER_TOKEN_HEAD or all(d >= 2 and is_power_of_two(d)
                                                                for d in (head_size, head_size_v))

    def holds(self, dtype: DType) -> bool:
        """Whether a cache of this kv dtype can hold a model of `dtype`: a 16-bit cache holds its own dtype only."""
        return self not in (KVCacheDType.BFLOAT16, KVCacheDType.FLOAT16) or self.value == dtype.value


class ScaleGranularity(Enum):
    PER_TENSOR = "per_tensor"
    PER_KV_HEAD = "per_kv_head"
