#!/usr/bin/env bash
# Run ON THE DEVICE (repo root), after tools/stage-wheels.sh calls and tools/gpu-setup.sh:
#   PARTS="third torch" TIME_THIRD=420 TIME_TORCH=150 bash tools/gpu-campaign.sh
# Fuzzes every available CUDA backend, grouped (JIT-heavy third-party libraries get their own time),
# xformers in its own PYTHONPATH (see gpu-setup.sh), then builds the report and the throughput
# table. Everything lands in $OUT (results tarball, logs, summary).
set -uo pipefail
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"
RES=${RES:-/tmp/gpu-results}
PARTS=${PARTS:-"third torch"}
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 ATTNREF_XFORMERS_FORCE_CUDA_FLAG=1
BASE=$PWD
run() {  # run ENV_PYTHONPATH SECONDS BACKENDS...
  local path=$1 secs=$2; shift 2
  [ $# -eq 0 ] && return
  local args=""; for b in "$@"; do args="$args --backend $b"; done
  PYTHONPATH=$BASE:$path timeout $((secs + 90)) python3 -m fuzz.cli fuzz $args --time "$secs" --examples 400 \
    --example-timeout 240 --out "$RES" --resume >> "$OUT/campaign.log" 2>&1
}
avail() {  # avail PYTHONPATH REGEX: available CUDA backends whose names match
  PYTHONPATH=$BASE:$1 python3 -m fuzz.cli backends | awk -v re="$2" '$2 == "available" && $1 ~ re {print $1}'
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
  PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -c "import importlib.metadata as m; print('flash-attn-4', m.version('flash-attn-4'))" 2>&1 | tail -1
  PYTHONPATH=$BASE:/tmp/site-xf python3 -c "import xformers; print('xformers', xformers.__version__)" 2>&1 | tail -1
  date -u; } > "$OUT/device.txt" 2>&1
PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -m fuzz.cli backends -v > "$OUT/backends.txt" 2>&1
PYTHONPATH=$BASE:/tmp/site-xf python3 -m fuzz.cli backends | grep xformers >> "$OUT/backends.txt" 2>&1
for g in $PARTS; do
  case $g in
    third)
      T=${TIME_THIRD:-420}
      run "${PYTHONPATH:-}" $((T * 2 / 10)) $(avail "${PYTHONPATH:-}" '^fa4-')
      run "${PYTHONPATH:-}" $((T * 6 / 10)) $(avail "${PYTHONPATH:-}" '^flashinfer-')
      run /tmp/site-xf $((T * 2 / 10)) $(avail /tmp/site-xf '^xformers-') ;;
    torch)
      run "${PYTHONPATH:-}" "${TIME_TORCH:-150}" $(avail "${PYTHONPATH:-}" '(cuda|^torch-sdpa-(flash|efficient|cudnn)$|^aten-|^torch-naive-paged$)') ;;
  esac
done
PYTHONPATH=$BASE python3 -m fuzz.cli report "$RES" >> "$OUT/campaign.log" 2>&1
PYTHONPATH=$BASE python3 benchmarks/throughput.py "$RES" > "$OUT/throughput.md" 2>&1
tar czf "$OUT/gpu-results.tgz" -C "$(dirname "$RES")" "$(basename "$RES")"
ls -la "$OUT"
