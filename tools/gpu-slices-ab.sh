#!/usr/bin/env bash
# Run ON THE DEVICE: the campaign engine's compile slices, A/B in one campaign. Each named JIT backend runs
# beside its twin without slices (benchmarks/unsliced.py), the workers shared (the scheduler splits them
# evenly), FA4's on-disk kernel cache off so that neither side loads what the other compiled.
#   bash tools/gpu-slices-ab.sh NAME SECONDS EXTRA_PYTHONPATH BACKEND...
# EXTRA_PYTHONPATH empty: the staged wheels' path (/tmp/site/env.sh). Rows in $RES/NAME, summary in $OUT/ab.md.
set -uo pipefail
name=$1 secs=$2 path=$3; shift 3
OUT=${OUT:-/tmp/attnref-out} RES=${RES:-/tmp/fa-res}; mkdir -p "$OUT" "$RES/logs"
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 ATTNREF_XFORMERS_FORCE_CUDA_FLAG=1 FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=0
args=""; for b in "$@"; do args="$args --backend $b --backend $b-unsliced"; done
PYTHONPATH=$PWD:${path:-${PYTHONPATH:-}} timeout $((secs + 100)) python3 -m cli --backend-spec benchmarks.unsliced:twins \
  fuzz $args --compile-slices --time "$secs" --workers "${WORKERS:-auto}" --quiet --no-replay --example-timeout 120 --out "$RES/$name" \
  > "$RES/logs/$name.txt" 2>&1
echo "== $name exit $? ($secs s)" >> "$OUT/ab.md"
grep -E "examples:|^  b-" "$RES/logs/$name.txt" >> "$OUT/ab.md"
PYTHONPATH=$PWD python3 benchmarks/throughput.py "$RES/$name" 2>&1 | tail -n +3 | sed "s/^/| $name /" >> "$OUT/ab.md"
tar czf "$OUT/results.tgz" --exclude='*.pt' -C "$(dirname "$RES")" "$(basename "$RES")"
