#!/usr/bin/env bash
# Run ON THE DEVICE: the campaign engine's compile slices, A/B in one campaign (tools/gpu-falsealarm.sh with
# --compile-slices). Each named JIT backend runs beside its twin without slices (benchmarks/unsliced.py), the
# workers shared (the scheduler splits them evenly), FA4's on-disk kernel cache off so that neither side loads
# what the other compiled.   bash tools/gpu-slices-ab.sh NAME SECONDS EXTRA_PYTHONPATH BACKEND...
set -uo pipefail
name=$1 secs=$2 path=$3; shift 3
pairs=(); for b in "$@"; do pairs+=("$b" "$b-unsliced"); done
FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=0 CLI_ARGS="--backend-spec benchmarks.unsliced:twins" \
  FUZZ_ARGS="--compile-slices" exec bash tools/gpu-falsealarm.sh "$name" "$secs" 1000000 "$path" '{}' "${pairs[@]}"
