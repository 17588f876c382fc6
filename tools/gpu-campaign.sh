#!/usr/bin/env bash
# Run ON THE DEVICE (repo root), after tools/stage-wheels.sh calls and tools/gpu-setup.sh:
#   PARTS="replay fa4 xformers flashinfer torch" TIME_FA4=100 ... bash tools/gpu-campaign.sh
# FUZZ_ARGS adds `attnref fuzz` arguments to every part (a part may set its own); EXAMPLES caps each backend's
# generated examples (a campaign whose backends all reach it ends early and frees the cores).
# Fuzzes every available CUDA backend, grouped (JIT-heavy third-party libraries get their own time),
# xformers in its own PYTHONPATH (see gpu-setup.sh), then builds the report and the throughput
# table. Everything lands in $OUT (gpu-results.tar.xz, logs, summary; `attnref report` rebuilds the report).
set -uo pipefail
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"
RES=${RES:-/tmp/gpu-results}
PARTS=${PARTS:-"replay fa4 xformers flashinfer torch"}
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 ATTNREF_XFORMERS_FORCE_CUDA_FLAG=1
BASE=$PWD
# BUDGET (seconds, default 540) bounds the whole script: each campaign is cut to what is left before it, less
# room to stop and pack, so a device call's time limit never takes the packed results with it (it did twice).
DEADLINE=$(( $(date +%s) + ${BUDGET:-540} ))
run() {  # run ENV_PYTHONPATH SECONDS BACKENDS...
  local path=$1 secs=$2; shift 2
  [ $# -eq 0 ] || [ "$secs" = 0 ] && return  # no backend, or a part's time set to 0: skipped
  local left=$(( DEADLINE - $(date +%s) - 75 ))  # start-up, the 30-s stop grace, the pack
  [ "$left" -lt "$secs" ] && secs=$left
  [ "$secs" -le 10 ] && { echo "skipped $*: no time left in BUDGET" >> "$OUT/campaign.log"; return; }
  local args=""; for b in "$@"; do args="$args --backend $b"; done
  PYTHONPATH=$BASE:$path timeout $((secs + 60)) python3 -m cli fuzz $args --time "$secs" --workers "${WORKERS:-auto}" --quiet \
    --example-timeout 240 --out "$RES" --resume --limits "${LIMITS:-{\}}" ${EXAMPLES:+--examples $EXAMPLES} ${FUZZ_ARGS:-} \
    >> "$OUT/campaign.log" 2>&1
}
path_for() {  # path_for BACKEND: the PYTHONPATH its replay needs (xformers apart; vLLM's config code for some)
  case $1 in xformers-*) echo /tmp/site-xf ;; vllm-backend-*|vllm-fa4-*|vllm-fa3-cp) echo "${PYTHONPATH:-}:/tmp/vdeps" ;;
             *) echo "${PYTHONPATH:-}" ;; esac
}
pack() {  # rows, cases, coverage and summary, xz: what `attnref report` rebuilds the rest from (the full folder
  # grew past what a device call brings back: 72 MB of rows, 50 MB of results.csv in one device call)
  tar cJf "$OUT/gpu-results.tar.xz" -C "$(dirname "$RES")" --exclude='*.pt' --exclude=results.csv \
    --exclude=results.parquet --exclude=junit.xml --exclude=report "$(basename "$RES")"
}
avail() {  # avail PYTHONPATH REGEX: available CUDA backends whose names match
  PYTHONPATH=$BASE:$1 python3 -m cli backends | awk -v re="$2" '$2 == "available" && $1 ~ re {print $1}'
}
# A pack-only run (blank PARTS: gpu-bg.sh's pack) keeps the start's machine facts (each line: a process importing torch)
if [ -n "${PARTS// /}" ] || [ ! -s "$OUT/device.txt" ]; then
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
  PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -c "import importlib.metadata as m; print('flash-attn-4', m.version('flash-attn-4'))" 2>&1 | tail -1
  PYTHONPATH=$BASE:/tmp/site-xf python3 -c "import xformers; print('xformers', xformers.__version__)" 2>&1 | tail -1
  date -u; } > "$OUT/device.txt" 2>&1
PYTHONPATH=$BASE:${PYTHONPATH:-} python3 -m cli backends -v > "$OUT/backends.txt" 2>&1
PYTHONPATH=$BASE:/tmp/site-xf python3 -m cli backends | grep xformers >> "$OUT/backends.txt" 2>&1
fi
FOCUS_JIT=${FOCUS_JIT:-'{"dtypes": ["bfloat16"], "head_sizes": [128], "kv_cache_dtypes": ["auto", "fp8_e4m3"]}'}
FOCUS_MLA=${FOCUS_MLA:-'{"dtypes": ["bfloat16"], "head_sizes": [576, 192]}'}
FOCUS_VLLMJIT=${FOCUS_VLLMJIT:-'{"dtypes": ["bfloat16"], "head_sizes": [128]}'}
for g in $PARTS; do
  case $g in
    fa4) run "${PYTHONPATH:-}" "${TIME_FA4:-100}" $(avail "${PYTHONPATH:-}" '^fa4-') ;;
    flashinfer)  # every new dtype / head size / kv dtype is a JIT compile: fuzz a focused region
      LIMITS="$FOCUS_JIT" run "${PYTHONPATH:-}" "${TIME_FLASHINFER:-300}" $(avail "${PYTHONPATH:-}" '^flashinfer-(decode|decode-tc|prefill-fa2)$') ;;
    xformers) run /tmp/site-xf "${TIME_XFORMERS:-150}" $(avail /tmp/site-xf "${XFORMERS_RE:-^xformers-}") ;;
    torch)
      run "${PYTHONPATH:-}" "${TIME_TORCH:-150}" $(avail "${PYTHONPATH:-}" '(-cuda$|^torch-sdpa-(flash|efficient|cudnn)$|^aten-|^torch-varlen$|^torch-naive-paged$)' | grep -v '^flex-flash') ;;
    flexdecode)  # flex_attention with kernel_options BACKEND="TRITON_DECODE"
      run "${PYTHONPATH:-}" "${TIME_FLEXDECODE:-120}" $(avail "${PYTHONPATH:-}" '^flex-decode-cuda$') ;;
    newtorch)  # the aten / public varlen entry points added for #9
      run "${PYTHONPATH:-}" "${TIME_NEWTORCH:-200}" $(avail "${PYTHONPATH:-}" "${NEWTORCH_RE:-(^aten-|^torch-varlen$)}") ;;
    flexflash)  # flex_attention with kernel_options BACKEND="FLASH" (needs flash_attn.cute)
      run "${PYTHONPATH:-}" "${TIME_FLEXFLASH:-120}" $(avail "${PYTHONPATH:-}" '^flex-flash-cuda$') ;;
    ficover)  # every FlashInfer backend over its whole declared space, one compile slice (dtype x head
      # x kv dtype x keyed features) per shard, so that each declared value is drawn despite the nvcc JIT
      FUZZ_ARGS="--compile-slices" run "${PYTHONPATH:-}" "${TIME_FICOVER:-420}" $(avail "${PYTHONPATH:-}" '^flashinfer-') ;;
    finew)  # FlashInfer's fa3 prefill, multi-level cascade and MLA, each in a JIT-friendly focus
      LIMITS="$FOCUS_JIT" run "${PYTHONPATH:-}" "${TIME_FA3:-150}" $(avail "${PYTHONPATH:-}" '^flashinfer-prefill-fa3$')
      LIMITS="$FOCUS_JIT" run "${PYTHONPATH:-}" "${TIME_CASCADE:-120}" $(avail "${PYTHONPATH:-}" '^flashinfer-cascade$')
      LIMITS="$FOCUS_MLA" \
        run "${PYTHONPATH:-}" "${TIME_MLA:-180}" $(avail "${PYTHONPATH:-}" '^flashinfer-mla-') ;;
    fiprobe)  # which query position FlashInfer's prefill ALiBi bias leaves out of the LSE
      PYTHONPATH=$BASE:${PYTHONPATH:-} timeout 300 python3 tools/analysis/lse-offset.py tools/cases/flashinfer-prefill-alibi-context.json \
        > "$OUT/fi-alibi-lse.txt" 2>&1 ;;
    ficells)  # the cells ficover leaves near zero: fa3 prefill and cascade (their first nvcc compiles
      # outran the example timeout; now --compile-timeout, but an sm90 module still took > 4 min to build with 16
      # builds at once: 250 s drew none), decode-tc's fp8 / ALiBi slices (drawn)
      FUZZ_ARGS="--compile-slices" run "${PYTHONPATH:-}" "${TIME_FICELLS:-300}" $(avail "${PYTHONPATH:-}" '^flashinfer-(prefill-fa3|cascade)$')
      LIMITS='{"kv_cache_dtypes": ["fp8_e4m3"]}' FUZZ_ARGS="--compile-slices" \
        run "${PYTHONPATH:-}" "${TIME_FICELLSTC:-120}" $(avail "${PYTHONPATH:-}" '^flashinfer-decode-tc$') ;;
    fitop)  # #19: 10,000 generated examples per FlashInfer backend, in the JIT focus (every variant compiled once)
      LIMITS="$FOCUS_JIT" run "${PYTHONPATH:-}" "${TIME_FITOP:-300}" $(avail "${PYTHONPATH:-}" "${FITOP_RE:-^flashinfer-(decode|decode-tc|prefill-fa2)$}")
      LIMITS="$FOCUS_MLA" \
        run "${PYTHONPATH:-}" "${TIME_FITOPMLA:-0}" $(avail "${PYTHONPATH:-}" '^flashinfer-mla-') ;;
    vllmjit)  # #19: vLLM's Triton kernels (JIT-bound) in one dtype and head size, compile slices over the rest
      LIMITS="$FOCUS_VLLMJIT" FUZZ_ARGS="--compile-slices" \
        run "${PYTHONPATH:-}" "${TIME_VLLMJIT:-300}" \
        $(avail "${PYTHONPATH:-}" "${VLLMJIT_RE:-^vllm-(triton-unified|triton-decode|prefix-prefill|chunked-paged-decode|pth-writes-cache)$}") ;;
    kernel)  # the raw-API region (#9): explicit causal flag and alignment, window pairs, q > k
      LIMITS='{"attn_types": ["kernel"]}' run "${PYTHONPATH:-}" "${TIME_KERNEL:-200}" \
        $(avail "${PYTHONPATH:-}" '(^torch-sdpa-.*cuda$|^torch-sdpa-(flash|efficient|cudnn)$|^aten-|^torch-varlen$|^flex-cuda$|^flex-flash-cuda$|^fa4-varlen$)') ;;
    vllm)  # vLLM's own kernels (tools/stage-vllm.sh first)
      run "${PYTHONPATH:-}" "${TIME_VLLM:-240}" $(avail "${PYTHONPATH:-}" '^vllm-' | grep -v '^vllm-backend-') ;;
    vllmnew)  # chunked_prefill_paged_decode, the per-token-head writer, unified attention over those caches
      run "${PYTHONPATH:-}" "${TIME_VLLMNEW:-120}" $(avail "${PYTHONPATH:-}" '^vllm-(chunked-paged-decode|pth-writes-cache)$')
      LIMITS='{"kv_cache_dtypes": ["int8_per_token_head", "fp8_per_token_head"]}' \
        run "${PYTHONPATH:-}" "${TIME_VLLMPTH:-90}" $(avail "${PYTHONPATH:-}" '^vllm-triton-unified$') ;;
    vllmrules)  # vLLM's PrefixLM / R-SWA / chunk-lookback / qq_bias rules, vLLM's own FA4, and the whole
      # TRITON_ATTN backend with ranges and lookback; FLASH_ATTN whole for the false-alarm count
      run "${PYTHONPATH:-}" "${TIME_VLLMRULES:-90}" $(avail "${PYTHONPATH:-}" '^vllm-triton-unified$')
      LIMITS="$FOCUS_JIT" run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMFA4:-90}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" '^vllm-fa4-paged$')
      run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMTRITON:-70}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" '^vllm-backend-triton$')
      run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMFLASH:-50}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" '^vllm-backend-flash$') ;;
    vllmint4)  # int4 per-token-head caches (Hadamard-rotated nibbles): unified attention, vLLM's
      # writer, TRITON_ATTN whole; then the standalone reproducer of the mask rules its dispatch drops
      INT4='{"kv_cache_dtypes": ["int4_per_token_head"], "head_sizes": [32, 64, 128, 256]}'
      LIMITS="$INT4" run "${PYTHONPATH:-}" "${TIME_VLLMINT4:-120}" $(avail "${PYTHONPATH:-}" '^vllm-(triton-unified|pth-writes-cache)$')
      LIMITS="$INT4" run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMINT4WHOLE:-90}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" '^vllm-backend-triton$')
      PYTHONPATH=$BASE:${PYTHONPATH:-} timeout 120 python3 benchmarks/results/repro/vllm-int4-drops-mask-rules.py \
        > "$OUT/repro-int4.txt" 2>&1; echo "exit $?" >> "$OUT/repro-int4.txt" ;;
    vllmcp)  # FA3's context-parallel arguments (vllm-fa3-cp), FLEX_ATTENTION whole, then the blind share
      # of the merges and split-KV decode (re-measured after the outliers class put the edge key among them)
      run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMCP:-150}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" '^vllm-fa3-cp$')
      run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMFLEX:-200}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" '^vllm-backend-flex$')
      run "${PYTHONPATH:-}" "${TIME_VLLMBLIND:-0}" $(avail "${PYTHONPATH:-}" '^vllm-(merge-cuda|merge-triton|triton-decode)$')
      PYTHONPATH=$BASE:${PYTHONPATH:-}:/tmp/vdeps timeout 120 python3 benchmarks/results/repro/vllm-dcp-combine-head-size.py \
        > "$OUT/repro-dcp.txt" 2>&1; echo "exit $?" >> "$OUT/repro-dcp.txt" ;;
    vllmwhole)  # vLLM's backends driven whole (builder + impl): its config code from /tmp/vdeps
      run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMWHOLE:-180}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" "${VLLMWHOLE_RE:-^vllm-backend-}") ;;
    vllmmlalayer)  # vLLM's own MLAAttention layer driven whole (TRITON_MLA, FLASHMLA, FLASH_ATTN_MLA), its config
      # code from /tmp/vdeps; then the dynamic-scale probe of the Attention layer (tools/probe-layer-scales.py)
      run "${PYTHONPATH:-}:/tmp/vdeps" "${TIME_VLLMMLALAYER:-300}" $(avail "${PYTHONPATH:-}:/tmp/vdeps" "${VLLMMLALAYER_RE:-^vllm-layer-(triton-mla|flashmla|flash-attn-mla)$}")
      PYTHONPATH=$BASE:${PYTHONPATH:-}:/tmp/vdeps timeout 200 python3 tools/probe-layer-scales.py \
        benchmarks/results/cases/vllm-layer-triton-dynamic-scales-one-token.json > "$OUT/probe-layer-scales.txt" 2>&1 ;;
    vllmmla)  # vLLM's MLA decode kernels over the latent cache (tools/stage-vllm.sh first), then the API facts
      # their buckets hinge on (tools/probe-mla.py: FA3's out=, FlashMLA's fp8 output dtype, 0-key sequences)
      run "${PYTHONPATH:-}" "${TIME_VLLMMLA:-300}" $(avail "${PYTHONPATH:-}" "${VLLMMLA_RE:-^vllm-(triton-mla|flashmla|fa3-mla|mla-writes-cache)$}")
      PYTHONPATH=$BASE:${PYTHONPATH:-} timeout 200 python3 tools/probe-mla.py > "$OUT/probe-mla.txt" 2>&1 ;;
    probes)  # convention probes of every available CUDA backend (and xformers from its own path)
      cuda=$(avail "${PYTHONPATH:-}" "${PROBE_RE:-(cuda|^torch-sdpa-(flash|efficient|cudnn)$|^aten-|^torch-varlen$|^fa4-|^flashinfer-|^vllm-)}")
      xf=$(avail /tmp/site-xf '^xformers-')  # (an empty list would mean "every available backend")
      [ -n "$cuda" ] && PYTHONPATH=$BASE:${PYTHONPATH:-} timeout 300 python3 -m cli probe \
        $(echo "$cuda" | sed 's/^/--backend /') --out "$RES" >> "$OUT/probes.txt" 2>&1
      [ -n "$xf" ] && PYTHONPATH=$BASE:/tmp/site-xf timeout 120 python3 -m cli probe \
        $(echo "$xf" | sed 's/^/--backend /') --out "$RES" >> "$OUT/probes.txt" 2>&1 ;;
    replay)  # every committed minimal case (REPLAY_GLOB narrows), each in a fresh process (a crash must not poison the next)
      for f in benchmarks/results/cases/${REPLAY_GLOB:-*.json}; do
        b=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('backend',''))" "$f")
        path=$(path_for "$b")
        echo "== $f ($b)" >> "$OUT/replays.txt"
        PYTHONPATH=$BASE:$path timeout 240 python3 -m cli replay "$f" >> "$OUT/replays.txt" 2>&1
        echo "exit $?" >> "$OUT/replays.txt"
      done ;;
    sanitize)  # every saved crash / mismatch case of this campaign under compute-sanitizer memcheck, once
      for f in $(ls "$RES"/cases/*.json 2>/dev/null | head -n "${SANITIZE_MAX:-6}"); do
        b=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('backend',''))" "$f")
        path=$(path_for "$b")
        echo "== $f ($b)" >> "$OUT/sanitize.txt"
        # a plain replay first: the JIT kernel then comes from the library's disk cache, not a sanitized compile
        PYTHONPATH=$BASE:$path timeout 150 python3 -m cli replay "$f" > /dev/null 2>&1
        PYTHONPATH=$BASE:$path timeout 300 python3 -m cli replay "$f" --sanitize memcheck --sanitize-timeout 240 \
          >> "$OUT/sanitize.txt" 2>&1
      done ;;
  esac
  # pack after every part: a call cut by its time limit still brings back what the parts before it found
  pack 2>/dev/null
done
# the report and the throughput table read every row (minutes for 50,000 rows): cut to what BUDGET leaves (a call
# with BUDGET=520 ran past its 600-s limit in the report); the rows are packed already
left=$(( DEADLINE - $(date +%s) + 20 )); [ "$left" -lt 10 ] && left=10
PYTHONPATH=$BASE timeout $left python3 -m cli report "$RES" >> "$OUT/campaign.log" 2>&1
left=$(( DEADLINE - $(date +%s) + 40 )); [ "$left" -lt 10 ] && left=10
PYTHONPATH=$BASE timeout $left python3 benchmarks/throughput.py "$RES" > "$OUT/throughput.md" 2>&1
pack
ls -la "$OUT"
