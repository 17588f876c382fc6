#!/usr/bin/env bash
# Run ON THE DEVICE (repo root): the campaign engine's measurements for benchmarks/results/.
#   PARTS="info oracle fast" bash tools/gpu-bench.sh           # torch only: no wheels needed
#   PARTS="jit" bash tools/gpu-bench.sh                         # after tools/gpu-setup.sh (FA4, FlashInfer)
# Parts:
#   info       device, versions, `attnref backends`
#   oracle     benchmarks/oracle_device.py: oracle cost on one CPU thread vs a shared GPU, by size
#   fast       aggregate examples/s with --workers auto (TIME_FAST s each) for the fast torch backends
#   jit        JIT-compiled backends: one worker vs --workers auto, TIME_JIT s each
#   falsealarm >= 10,000 generated examples per correct backend (FA_BACKENDS), buckets reported
#   mutant     a campaign against a planted bug on the GPU: share of worker time on new examples
#   cpuprof    benchmarks/profile_evaluate.py on this host's CPU, one thread (packed and chunked oracle)
#   cpuharness the small tier of torch-sdpa-math (CPU) with 16 workers: the harness alone, no GPU
#   mps        fast and small under CUDA MPS (`attnref fuzz --mps`: the workers' kernels share the GPU at once)
#   cpumax     fast with each --oracle-cpu-max of ORACLE_MAXES (score elements up to which the oracle stays on the
#              CPU), in turns per backend: where the crossover lies for the whole harness in one run
#   profile    fast and small again under `attnref fuzz --profile` (TIME_PROF s each): the workers' and the driver's
#              calls by own time (benchmarks/worker_profile.py), profile.md
#   syncs      benchmarks/sync_count.py per FAST backend (SYNC_EXAMPLES cases): GPU synchronisations by line, syncs.md
#   workers    fast with --workers ALT_WORKERS (12): whether the 16 cores are the limit
# Everything lands in $OUT (markdown tables, logs, a results tarball).
set -uo pipefail
PY=${PY:-python3}
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"
RES=${RES:-/tmp/bench-results}; mkdir -p "$RES"
PARTS=${PARTS:-"info oracle fast"}
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
FAST=${FAST:-"aten-flash-varlen torch-sdpa-flash flex-cuda"}
JIT=${JIT:-"fa4-varlen flashinfer-decode"}
FA_BACKENDS=${FA_BACKENDS:-"torch-sdpa-math-cuda torch-sdpa-efficient torch-sdpa-flash torch-sdpa-cudnn aten-flash-varlen aten-efficient-varlen aten-cudnn-varlen torch-varlen flex-cuda"}
fuzz() {  # fuzz NAME SECONDS WORKERS [extra args]: one campaign in its own results dir
  local name=$1 secs=$2 workers=$3; shift 3
  timeout $((secs + 120)) $PY -m cli fuzz --time "$secs" --workers "$workers" --quiet --no-replay \
    --out "$RES/$name" "$@" >> "$OUT/bench.log" 2>&1
  $PY benchmarks/throughput.py "$RES/$name" | tail -n +3 | sed "s/^/| $name /" >> "$OUT/throughput.md"
}
header() { echo "| run | backend | examples | workers | examples/s | new-example share | materialize | oracle | JIT compile | kernel | compare | shrink | generation + harness | oracle on CPU |" >> "$OUT/throughput.md"
           echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" >> "$OUT/throughput.md"; }
for part in $PARTS; do
  case $part in
    info)
      { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
        $PY -c "import torch, hypothesis; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'hypothesis', hypothesis.__version__)"
        $PY -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
        $PY -c "import importlib.metadata as m; print('flash-attn-4', m.version('flash-attn-4'))" 2>&1 | tail -1
        date -u; } > "$OUT/device.txt" 2>&1
      $PY -m cli backends > "$OUT/backends.txt" 2>&1 ;;
    oracle) timeout 500 $PY benchmarks/oracle_device.py --workers "$(nproc)" > "$OUT/oracle-device.md" 2>&1 ;;
    fast) header; for b in $FAST; do fuzz "fast-$b" "${TIME_FAST:-40}" auto --backend "$b"; done ;;
    small) header; for b in $FAST; do fuzz "small-$b" "${TIME_FAST:-40}" auto --backend "$b" --limits '{"tiers": ["small"]}'; done ;;
    jit) header; for b in $JIT; do
           fuzz "jit1-$b" "${TIME_JIT:-60}" 1 --backend "$b" --limits '{"dtypes": ["bfloat16"], "tiers": ["small", "tile"]}'
           fuzz "jitN-$b" "${TIME_JIT:-60}" auto --backend "$b" --limits '{"dtypes": ["bfloat16"], "tiers": ["small", "tile"]}'
         done ;;
    falsealarm) for b in $FA_BACKENDS; do
           timeout $((${TIME_FA:-60} + 120)) $PY -m cli fuzz --backend "$b" --examples 10000 --time "${TIME_FA:-60}" \
             --workers auto --quiet --no-replay --out "$RES/fa-$b" > "$OUT/fa-$b.txt" 2>&1
           echo "== $b exit $?" >> "$OUT/falsealarm.md"; grep -E "examples:|^  b-|exit" "$OUT/fa-$b.txt" >> "$OUT/falsealarm.md"
         done ;;
    cpuprof) for args in "--tiers small" "--tiers small --chunked" "" "--chunked"; do
           echo "### profile_evaluate.py $args" >> "$OUT/cpuprof.md"
           timeout 200 $PY benchmarks/profile_evaluate.py --examples 300 --top 12 $args >> "$OUT/cpuprof.md" 2>&1
         done ;;
    cpuharness) header; fuzz "cpu16-torch-sdpa-math" "${TIME_FAST:-40}" 16 --backend torch-sdpa-math --limits '{"tiers": ["small"]}' ;;
    mps) header; for b in $FAST; do  # attnref fuzz --mps: the daemon started and stopped with each campaign
           fuzz "mps-fast-$b" "${TIME_FAST:-40}" auto --backend "$b" --mps
           fuzz "mps-small-$b" "${TIME_FAST:-40}" auto --backend "$b" --limits '{"tiers": ["small"]}' --mps
         done ;;
    cpumax) header; for b in $FAST; do for m in ${ORACLE_MAXES:-65536 262144 1048576}; do
           fuzz "cpumax$m-$b" "${TIME_FAST:-40}" auto --backend "$b" --oracle-cpu-max "$m"
         done; done ;;
    profile) for b in $FAST; do for tier in fast small; do
           lim='{}'; [ "$tier" = small ] && lim='{"tiers": ["small"]}'
           timeout $((${TIME_PROF:-30} + 120)) $PY -m cli fuzz --time "${TIME_PROF:-30}" --workers auto --quiet --no-replay \
             --out "$RES/prof-$tier-$b" --backend "$b" --limits "$lim" --profile "$RES/prof-$tier-$b/profile" >> "$OUT/bench.log" 2>&1
           { echo "## $tier, $b: workers"; $PY benchmarks/worker_profile.py "$RES/prof-$tier-$b/profile" --top 40
             echo; echo "## $tier, $b: driver"; $PY benchmarks/worker_profile.py "$RES/prof-$tier-$b/profile" --driver --top 12
             echo; $PY benchmarks/throughput.py "$RES/prof-$tier-$b"; echo; } >> "$OUT/profile.md" 2>&1
         done; done ;;
    syncs) for b in $FAST; do
           timeout 300 $PY benchmarks/sync_count.py --backend "$b" --examples "${SYNC_EXAMPLES:-150}" >> "$OUT/syncs.md" 2>&1
         done ;;
    workers) header; for b in $FAST; do fuzz "workers${ALT_WORKERS:-12}-$b" "${TIME_FAST:-40}" "${ALT_WORKERS:-12}" --backend "$b"; done ;;
    mutant) header; fuzz "mutant-window" "${TIME_MUTANT:-60}" auto --mutants --backend mutant-window-off-by-one ;;
  esac
done
tar czf "$OUT/bench-results.tgz" --exclude='*.pt' --exclude='*.prof' -C "$(dirname "$RES")" "$(basename "$RES")" 2>/dev/null
# a file over 16 MiB does not come back from the device: parts of 15 MiB (cat bench-results.tgz.part.* | tar xzf -)
if [ "$(stat -c %s "$OUT/bench-results.tgz")" -gt 15728640 ]; then
  split -b 15M "$OUT/bench-results.tgz" "$OUT/bench-results.tgz.part." && rm "$OUT/bench-results.tgz"
fi
ls -la "$OUT"
