#!/usr/bin/env bash
# Run ON THE DEVICE (nvidia-h200-x2), after staging the ray wheels (../shared/device/fetch-wheels.sh ray):
# one campaign on 1 GPU (half the cores) and on 2 GPUs (all cores), with the local pool and through Ray.
#   bash tools/stage-wheels.sh --install && source /tmp/site/env.sh && bash tools/gpu-ray.sh
set -uo pipefail
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"; RES=${RES:-/tmp/ray-results}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
B=${B:-torch-sdpa-flash}; T=${T:-30}; LIM=${LIM:-'{"tiers": ["small"]}'}
half=$(( $(nproc) / 2 - 1 ))
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  python3 -c "import torch, ray; print('torch', torch.__version__, 'ray', ray.__version__)"; date -u; } > "$OUT/device.txt" 2>&1
one() {  # one NAME [env...] -- fuzz args
  local name=$1; shift
  env "$@" timeout $((T + 180)) python3 -m cli fuzz --backend "$B" --time "$T" --workers auto --quiet --no-replay \
    --limits "$LIM" --out "$RES/$name" ${RAY:+--ray} >> "$OUT/ray.log" 2>&1
  python3 benchmarks/throughput.py "$RES/$name" | tail -n +3 | sed "s/^/| $name /" >> "$OUT/scaling.md"
}
echo "| run | backend | examples | workers | examples/s | new-example share | materialize | oracle | JIT compile | kernel | compare | shrink | generation + harness | oracle on CPU |" > "$OUT/scaling.md"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" >> "$OUT/scaling.md"
CUDA_VISIBLE_DEVICES=0 taskset -c 0-$half bash -c 'true'  # taskset exists
for run in ${RUNS:-local-1gpu local-2gpu ray-1gpu ray-2gpu}; do
  case $run in
    local-1gpu) one local-1gpu CUDA_VISIBLE_DEVICES=0 taskset -c 0-$half ;;
    local-2gpu) one local-2gpu ;;
    ray-1gpu) RAY=1 one ray-1gpu CUDA_VISIBLE_DEVICES=0 taskset -c 0-$half ;;
    ray-2gpu) RAY=1 one ray-2gpu ;;
    local-all) one local-all ;;
    ray-all) RAY=1 one ray-all ;;
  esac
done
cat "$OUT/scaling.md"
