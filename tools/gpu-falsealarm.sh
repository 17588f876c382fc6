#!/usr/bin/env bash
# Run ON THE DEVICE (repo root): one false-alarm campaign, several backends side by side sharing the workers.
#   bash tools/gpu-falsealarm.sh NAME SECONDS EXAMPLES EXTRA_PYTHONPATH LIMITS_JSON BACKEND...
# EXTRA_PYTHONPATH empty: the staged wheels' path (/tmp/site/env.sh); else that path instead (xformers: /tmp/site-xf).
# EXAMPLES is per backend (the campaign stops at it or at SECONDS); rows land in $RES/NAME, the verdict
# counts and buckets of each backend in $OUT/falsealarm.md, the throughput split in $OUT/throughput.md.
# CLI_ARGS / FUZZ_ARGS (optional): more arguments before / after `fuzz` (tools/gpu-slices-ab.sh passes its twins).
# The outer timeout leaves room for start-up and the campaign's 30-s stop grace (45 s cut two runs short).
set -uo pipefail
name=$1 secs=$2 examples=$3 path=$4 limits=$5; shift 5
OUT=${OUT:-/tmp/attnref-out} RES=${RES:-/tmp/fa-res}; mkdir -p "$OUT" "$RES/logs"
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 ATTNREF_XFORMERS_FORCE_CUDA_FLAG=1
args=""; for b in "$@"; do args="$args --backend $b"; done
[ -z "$args" ] && { echo "== $name: no backend available" >> "$OUT/falsealarm.md"; exit 0; }
PYTHONPATH=$PWD:${path:-${PYTHONPATH:-}} timeout $((secs + 100)) python3 -m cli ${CLI_ARGS:-} fuzz $args ${FUZZ_ARGS:-} --examples "$examples" --time "$secs" \
  --workers "${WORKERS:-auto}" --quiet --no-replay --example-timeout 120 --limits "$limits" --out "$RES/$name" \
  > "$RES/logs/$name.txt" 2>&1
echo "== $name exit $? ($secs s, limits $limits)" >> "$OUT/falsealarm.md"
grep -E "examples:|^  b-" "$RES/logs/$name.txt" >> "$OUT/falsealarm.md"
PYTHONPATH=$PWD python3 benchmarks/throughput.py "$RES/$name" 2>&1 | tail -n +3 | sed "s/^/| $name /" >> "$OUT/throughput.md"
tar czf "$OUT/results.tgz" --exclude='*.pt' -C "$(dirname "$RES")" "$(basename "$RES")"
