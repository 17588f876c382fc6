#!/usr/bin/env bash
# Run ON THE DEVICE after the staging calls (tools/stage-wheels.sh; tools/stage-vllm.sh for vLLM): issue #35's measure,
# an untold campaign of one JIT library's backends (no --limits, no --compile-slices, --workers auto) that outlives
# one device call. The checkout is copied to /tmp/jit-run/NAME first: every device call lays the working tree anew.
#   PART=start NAME=flashinfer-cold CACHE=/tmp/jit-cache-fi SECS=600 BACKENDS="flashinfer-decode ..." bash tools/gpu-jit.sh
#   PART=wait NAME=flashinfer-cold [UNTIL=590] bash tools/gpu-jit.sh   # waits for its end (at most UNTIL s), then collects
# EXTRA_PATH=/tmp/vdeps for vLLM's backends driven whole (vllm-backend-*: its config code, tools/stage-vllm.sh);
# LIMITS='{"kv_cache_dtypes":["fp8_e4m3"]}' (no spaces) focuses a campaign that is not issue #35's untold one.
# SLEEP=N: the seconds PART=start waits before it shows the campaign's first lines (40; 5 lets the next start sooner).
# A warm run is the same command with another NAME and the same CACHE. Into $OUT: NAME.log (device, versions, the
# campaign's live lines), NAME.md (benchmarks/jit_campaign.py, benchmarks/throughput.py), NAME-summary.md,
# NAME-compile_keys.csv, NAME-compile_draws.json, NAME-rows.jsonl.xz (tools/analysis/first-calls.py reads it; a
# 10-minute FlashInfer campaign's is about 100 MB, over what a call brings back). NO_SPLIT=1 leaves out
# benchmarks/throughput.py's split (a minute or two on 300,000 rows) and the rows' copy where device time is short.
# PART=until NAME=... waits for the end only (and brings NAME.log back), so the next campaign can start before this
# one's report; PART=pack packs
# the log and the results folder into $OUT/NAME.tar.xz.part.aa, .ab, ... (15 MiB each: a file over 16 MiB does not
# come back; a 10-minute campaign's folder packs to about 26 MB) for a report here:
#   cat NAME.tar.xz.part.* | tar xJf -; python benchmarks/jit_campaign.py NAME; python -m cli report NAME
# A device machine left idle for 30 s between calls is given back with everything on it: chain the calls.
set -uo pipefail
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"; NAME=${NAME:?NAME}; RUN=/tmp/jit-run/$NAME; RES=/tmp/jit-res/$NAME
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1
wait_end() {  # until the campaign NAME has ended, at most UNTIL s; its pid in $pid
  pid=$(cat "/tmp/jit-res/$NAME.pid"); end=$((SECONDS + ${UNTIL:-590}))
  while kill -0 "$pid" 2> /dev/null && [ $SECONDS -lt $end ]; do sleep 2; done
}
case ${PART:-start} in
  start)
    rm -rf "$RUN" "$RES"; mkdir -p "$RUN" /tmp/jit-res
    tar cf - --exclude=./.whl --exclude=./.venv --exclude=./.git . | tar xf - -C "$RUN"
    { bash tools/device-info.sh; echo "backends: $BACKENDS; $SECS s; cache ${CACHE:?CACHE}"; nproc; } > "$OUT/$NAME.log" 2>&1
    cp "$OUT/$NAME.log" "/tmp/jit-res/$NAME.log"
    args=""; for b in $BACKENDS; do args="$args --backend $b"; done
    # its own session, started from the top shell (as tools/gpu-bg.sh): the device keeps it between calls
    # GPU=N CPUS=a-b: one of several campaigns side by side, on its own GPU and cores (nvcc's jobs inherit them)
    setsid nohup env PYTHONPATH="$RUN:${PYTHONPATH:-}${EXTRA_PATH:+:$EXTRA_PATH}" ${GPU:+CUDA_VISIBLE_DEVICES=$GPU} \
      ${CPUS:+taskset -c $CPUS} bash -c "cd $RUN && exec timeout $((SECS + 240)) python3 -m cli \
      fuzz $args ${LIMITS:+--limits '$LIMITS'} --time $SECS --workers auto --no-replay --cache-dir $CACHE --out $RES" \
      >> "/tmp/jit-res/$NAME.log" 2>&1 < /dev/null &
    echo $! > "/tmp/jit-res/$NAME.pid"
    sleep "${SLEEP:-40}"; ps -o pid,etime,cmd -p "$(cat /tmp/jit-res/$NAME.pid)" | cut -c1-120; tail -3 "/tmp/jit-res/$NAME.log" ;;
  until)  # only waits for the campaign's end (at most UNTIL s): the next campaign may start before this one's report;
    # the live lines so far come back even if the machine is taken back before the report, as it was for a run of
    # benchmarks/results/campaigns/jit-untold-flashinfer-cold-h200-2026-12-03.md
    wait_end; cp "/tmp/jit-res/$NAME.log" "$OUT/$NAME.log"; grep -E "^\[" "$OUT/$NAME.log" | tail -1 ;;
  pack)  # the raw results alone, in parts ($OUT takes 8 files): benchmarks/jit_campaign.py runs anywhere on them
    wait_end
    kill -0 "$pid" 2> /dev/null && echo "$NAME still running"
    XZ_OPT="-2 -T${XZ_THREADS:-8}" tar cJf "/tmp/jit-res/$NAME.tar.xz" -C /tmp/jit-res \
      --exclude="$NAME/logs/compile-slots" "$NAME.log" "$NAME"
    split -b 15M "/tmp/jit-res/$NAME.tar.xz" "$OUT/$NAME.tar.xz.part."
    ls -la "$OUT/$NAME".tar.xz.part.*; tail -2 "/tmp/jit-res/$NAME.log" ;;
  wait)
    wait_end
    cp "/tmp/jit-res/$NAME.log" "$OUT/$NAME.log"
    if kill -0 "$pid" 2> /dev/null; then echo "still running"; tail -3 "$OUT/$NAME.log"; exit 0; fi
    cd "$RUN" && export PYTHONPATH=$RUN:${PYTHONPATH:-}
    [ -n "${NO_SPLIT:-}" ] || xz -1 -T4 -c "$RES/rows.jsonl" > "$OUT/$NAME-rows.jsonl.xz"  # every field
    cp "$RES/compile_draws.json" "$OUT/$NAME-compile_draws.json" 2>/dev/null
    timeout 120 python3 -m cli report "$RES" > /dev/null 2>&1
    { echo "### $NAME"; python3 benchmarks/jit_campaign.py "$RES"; echo
      [ -n "${NO_SPLIT:-}" ] || python3 benchmarks/throughput.py "$RES"; } > "$OUT/$NAME.md" 2>&1
    cp "$RES/summary.md" "$OUT/$NAME-summary.md" 2>/dev/null
    cp "$RES/compile_keys.csv" "$OUT/$NAME-compile_keys.csv" 2>/dev/null
    grep -E "^\[" "$OUT/$NAME.log" | awk 'NR % 4 == 0' | tail -12; tail -4 "$OUT/$NAME.log"; cat "$OUT/$NAME.md" ;;
esac
