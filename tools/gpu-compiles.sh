#!/usr/bin/env bash
# Run ON THE DEVICE after `bash tools/stage-wheels.sh --install` (FlashInfer's wheel group): JIT compiles off the
# critical path (campaign/compiles.py), measured on untold campaigns of the same backends, one after another (one
# nvcc-heavy campaign per machine). Parts:
#   cold   the default (--compile-share 0.3) over an empty cache folder
#   eager  --compile-share 1 (every case compiles where it is drawn: the behaviour before) over another empty one
#   warm   the default again over cold's cache folder (a second campaign on the same machine)
# Into $OUT: each campaign's output (its live lines show keys built, waiting cases and the compile share every 15 s)
# and compiles.md (benchmarks/throughput.py of each).
#   PARTS="cold eager" T=200 BACKENDS="flashinfer-decode flashinfer-prefill-fa2" bash tools/gpu-compiles.sh
set -uo pipefail
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"
T=${T:-200}; args=(); for b in ${BACKENDS:-flashinfer-decode flashinfer-prefill-fa2}; do args+=(--backend "$b"); done
run() {  # run NAME [fuzz args]
  local name=$1; shift
  timeout $((T + 150)) python3 -m cli fuzz "${args[@]}" --time "$T" --workers auto --no-replay \
    --out "/tmp/compiles-$name" "$@" > "$OUT/$name.txt" 2>&1
  echo "### $name: $*" >> "$OUT/compiles.md"
  python3 benchmarks/throughput.py "/tmp/compiles-$name" >> "$OUT/compiles.md" 2>&1
}
for part in ${PARTS:-cold eager}; do
  case $part in
    cold) run cold --cache-dir /tmp/cache-cold ;;
    eager) run eager --compile-share 1 --cache-dir /tmp/cache-eager ;;
    warm) run warm --cache-dir /tmp/cache-cold ;;
  esac
done
cat "$OUT/compiles.md"
