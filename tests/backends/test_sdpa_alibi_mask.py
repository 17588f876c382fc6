"""torch SDPA takes ALiBi as an additive attn_mask of the query's dtype, so the bias the kernel adds is rounded there
(Capabilities.alibi_in_model_dtype -> Alibi.in_model_dtype). Found in a CPU campaign of a stand-in that wraps
torch-sdpa-math: over 1,023 bfloat16 keys, a bias of -511 is off by up to 1 logit, and the output was 12.08 from the
exact bias's (limit 4.05); the same attention in float64 with the bias rounded to bfloat16 was 0.21 from the
kernel's."""
from __future__ import annotations

from dataclasses import replace

from backends.registry import get
from fuzz.compare import evaluate
from reference.case import Case

CASE = Case.from_json('{"sequences":[{"query_len":1,"context_len":0,"encoder_len":1023,"key_len":null}],"attn_type":"encoder_decoder","num_heads":8,"num_kv_heads":4,"head_size":64,"head_size_v":96,"dtype":"bfloat16","scale":null,"sliding_window":null,"alibi":{"slopes":[0.5,0.25,0.125,0.0625,0.03125,0.015625,0.0078125,0.00390625],"convention":"signed"},"soft_cap":null,"sinks":null,"attn_chunk_size":null,"block_sparse":null,"bidirectional_ranges":null,"global_prefix":null,"chunk_lookback":null,"qq_bias":false,"causal":false,"causal_alignment":"bottom_right","window":null,"cache":null,"values":{"distribution":"outliers","logit_scale":0.5,"outliers_at_edge":true,"edge_value_gain":32.0,"query_zero_dims":null},"encodings":[["scale","passed"],["gqa","repeat"],["mask","bool"]],"seed":353317}')


def test_the_bias_the_kernel_is_given_is_the_one_the_oracle_adds():
    backend = get("torch-sdpa-math")
    assert backend.caps.alibi_in_model_dtype
    held = replace(CASE, alibi=replace(CASE.alibi, in_model_dtype=True))
    assert evaluate(backend, held).row["verdict"] == "pass"
    # the exact bias is not what SDPA was given: the same case then fails, by the rounding alone
    exact = evaluate(backend, CASE).row
    assert exact["verdict"] == "mismatch" and exact["max_err"] > 2 * exact["limit"]
