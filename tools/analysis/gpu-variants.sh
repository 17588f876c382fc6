#!/usr/bin/env bash
# Run ON THE DEVICE after tools/stage-vllm.sh: the diagnosis of the vLLM whole-backend findings (2026-11-23), each saved
# minimal case replayed with one ingredient changed (tools/analysis/replay-variants.py), so a finding's note
# says what it needs. Output: one line per variant.   Usage: bash tools/analysis/gpu-variants.sh [first|window]
set -uo pipefail
P="$PWD:${PYTHONPATH:-}:/tmp/vdeps"
C=benchmarks/results/cases
v() { echo "== $1"; PYTHONPATH=$P timeout 150 python3 tools/analysis/replay-variants.py "$@" 2>&1 | grep -v "WARNING\|INFO\|^\s" | tail -20; }
first() {
# FLASH_ATTN whole, cascade + a dominant sink: does it need cascade? a sink that large?
v $C/vllm-backend-flash-903ca3b289.json '{"encodings": [["cache_layout", "NHD"], ["cascade", "off"]]}' \
  '{"sinks": [10.0, 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}' \
  '{"sinks": [60.0, 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}'
# unified attention, int8 per token-head + window: does it need the quantization? the long context?
v $C/vllm-triton-unified-1a0f43dc5f.json '{"cache.quant.kv_cache_dtype": "auto"}' \
  '{"cache.quant.kv_cache_dtype": "fp8_per_token_head"}' '{"sliding_window": null}'
# TRITON_ATTN whole, int8 per token-head, window 1 (each query sees itself)
v $C/vllm-backend-triton-8b2c89bab4.json '{"cache.quant.kv_cache_dtype": "auto"}' '{"sliding_window": null}' \
  '{"dtype": "bfloat16"}'
# chunked_prefill_paged_decode, ALiBi + window: the prefill half (context_attention_fwd) without ALiBi?
v $C/vllm-chunked-paged-decode-036dbda0c9.json '{"alibi": null}' '{"sliding_window": null}'
}
window() {  # V10: unified attention, sliding window over a long context: which lengths and windows?
  local S='{"query_len": 3, "context_len": %d, "encoder_len": 0, "key_len": null}'
  local args=()
  for ctx in 8188 4093 2045 1021 509; do args+=("{\"sequences\": [$(printf "$S" $ctx)], \"cache.quant.kv_cache_dtype\": \"auto\"}"); done
  for w in 3 17 64 257; do args+=("{\"sliding_window\": $w, \"cache.quant.kv_cache_dtype\": \"auto\"}"); done
  args+=('{"cache.quant.kv_cache_dtype": "auto", "dtype": "bfloat16"}' '{"cache.quant.kv_cache_dtype": "auto", "num_heads": 3, "num_kv_heads": 3}')
  v $C/vllm-triton-unified-1a0f43dc5f.json "${args[@]}"
}
for group in "${@:-first}"; do $group; done
