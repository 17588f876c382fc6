#!/usr/bin/env bash
# Run ON THE DEVICE (repo root): list backends, fuzz every CUDA backend, build the report, run the
# detection benchmark, and pack everything into $OUT (at most 8 files come back).
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"
TIME=${TIME:-300}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$OUT/device.txt" 2>&1
python3 -m fuzz.cli backends -v > "$OUT/backends.txt" 2>&1
backends=$(python3 -m fuzz.cli backends | awk '$2 == "available" && $1 != "torch-sdpa-math" && $1 != "flex" && $1 != "flex-compiled" && $1 != "torch-sdpa-cpu-flash" {print "--backend " $1}')
timeout $((TIME + 60)) python3 -m fuzz.cli fuzz $backends --time "$TIME" --examples 400 --example-timeout 90 --out /tmp/gpu-results > "$OUT/campaign.log" 2>&1
python3 -m fuzz.cli report /tmp/gpu-results >> "$OUT/campaign.log" 2>&1
python3 benchmarks/throughput.py /tmp/gpu-results > "$OUT/throughput.md" 2>&1
timeout 150 python3 benchmarks/detection.py --seeds 3 --budget 300 --correct torch-naive-paged > "$OUT/detection.md" 2>&1
tar czf "$OUT/gpu-results.tgz" -C /tmp gpu-results
ls -la "$OUT"
