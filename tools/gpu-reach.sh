#!/usr/bin/env bash
# Run ON THE DEVICE (repo root) after the staging calls (docs/gpu-offline.md: FlashInfer's and xformers' wheels
# through tools/gpu-setup.sh, vLLM with .whl/vdeps through tools/stage-vllm.sh): untold campaigns of the adapters
# whose spellings and raw regions are declared (issue "Reach II") and of vLLM's backends driven whole and under its
# own Attention layer. One part per call (each under 10 minutes):
#   PART=reach   xformers, cuDNN and vLLM's kernels / whole backends / layers (Triton, no nvcc), SECS seconds
#   PART=fi      FlashInfer's adapters and vLLM's FLASHINFER backend (nvcc JIT builds: alone on the machine)
#   PART=vfi     vLLM's FLASHINFER backend, whole and under the layer, beside the Triton layer
# Results into $OUT through tools/gpu-untold.sh (NAME.log, -summary.md, -coverage.csv, -rows.jsonl.xz, -cases).
#   PART=reach SECS=420 bash tools/gpu-reach.sh
set -uo pipefail
export PYTHONPATH=/tmp/vdeps ATTNREF_XFORMERS_FORCE_CUDA_FLAG=1  # vLLM's config code last on the path
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export ATTNREF_CACHE_DIR=${ATTNREF_CACHE_DIR:-/tmp/attnref-cache}  # survives the calls while the machine is held
LAYERS="vllm-layer-triton vllm-layer-flash vllm-layer-flex"
case ${PART:?reach, fi or vfi} in
  reach)
    BACKENDS="xformers-cutlass xformers-fa2 xformers-triton-splitk aten-cudnn-varlen aten-cudnn vllm-triton-unified \
vllm-prefix-prefill vllm-chunked-paged-decode vllm-backend-triton vllm-backend-flash vllm-backend-flex $LAYERS" \
      SECS=${SECS:-420} NAME=${NAME:-reach-untold} bash tools/gpu-untold.sh ;;
  fi)
    BACKENDS="flashinfer-decode flashinfer-decode-tc flashinfer-prefill-fa2 flashinfer-prefill-fa3 flashinfer-mla-fa2 \
vllm-backend-flashinfer vllm-layer-flashinfer" SECS=${SECS:-480} NAME=${NAME:-fi-untold} bash tools/gpu-untold.sh ;;
  vfi)
    BACKENDS="vllm-backend-flashinfer vllm-layer-flashinfer vllm-layer-triton" SECS=${SECS:-360} \
      NAME=${NAME:-vllm-flashinfer-untold} bash tools/gpu-untold.sh ;;
esac
