"""attnref's oracle: Case -> Inputs -> float64 attention output and natural-log LSE."""
from .attention import Expected, add_sink, attend_sequence, attention, sequence_kv
from .case import (Alibi, AlibiConvention, AttentionType, BlockSparse, BlockTableKind, CacheSpec, Case,
                   CaseError, CausalAlignment, DType, KVCacheDType, KVLayout, Quant, ScaleGranularity,
                   SequenceSpec, ValueDistribution, ValueSource, Values, kv_len)
from .inputs import Inputs, KVCache, materialize, read_kv, to_device, write_kv
from .merge import lse_from_base2, lse_to_base2, merge_attn_states

__all__ = [
    "Alibi", "AlibiConvention", "AttentionType", "BlockSparse", "BlockTableKind", "CacheSpec", "Case",
    "CaseError", "CausalAlignment", "DType", "Expected", "Inputs", "KVCache", "KVCacheDType", "KVLayout",
    "Quant", "ScaleGranularity", "SequenceSpec", "ValueDistribution", "ValueSource", "Values", "add_sink",
    "attend_sequence", "attention", "kv_len", "lse_from_base2", "lse_to_base2", "materialize",
    "merge_attn_states", "read_kv", "sequence_kv", "to_device", "write_kv",
]
