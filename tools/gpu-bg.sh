#!/usr/bin/env bash
# Run ON THE DEVICE (repo root): a campaign longer than one device call. The device keeps a process session
# running between calls while the machine is held (calls back to back, under 30 s apart); each call is at
# most 10 minutes, and an nvcc-built sm90 FlashInfer module alone took over 4 minutes
# (benchmarks/results/campaigns/flashinfer-alibi-softcap-10k-h100-2026-11-24.md).
#   bash tools/gpu-bg.sh start NAME [VAR=VALUE ...]   tools/gpu-campaign.sh with those variables, in its own
#                                                     session (setsid); RES=/tmp/bg-NAME unless given
#   bash tools/gpu-bg.sh hold SECONDS                 keep the call (and the machine) busy while any started
#                                                     campaign runs, a progress line a minute
#   bash tools/gpu-bg.sh pack NAME [VAR=VALUE ...]    stop NAME if it still runs (SIGINT: its rows are flushed),
#                                                     then $OUT/NAME-results.tar.xz and $OUT/NAME-log.txt
set -uo pipefail
cmd=${1:?start, hold or pack}; shift
progress() {  # one line: UTC time, rows per started campaign, running nvcc / cicc / ptxas processes
  local line="$(date -u +%H:%M:%S)"
  for p in /tmp/bg-*.pid; do
    [ -e "$p" ] || continue
    local name; name=$(basename "$p" .pid)
    local state=done; kill -0 "$(cat "$p")" 2>/dev/null && state=running
    line="$line | ${name#bg-} $state rows=$(cat "/tmp/${name}.res"/rows.jsonl 2>/dev/null | wc -l)"
  done
  echo "$line | nvcc=$(pgrep -c -f 'nvcc|cicc|ptxas' || true)"
}
running() { for p in /tmp/bg-*.pid; do [ -e "$p" ] && kill -0 "$(cat "$p")" 2>/dev/null && return 0; done; return 1; }
case $cmd in
  start)
    name=${1:?NAME}; shift
    res=/tmp/bg-$name; for kv in "$@"; do case $kv in RES=*) res=${kv#RES=} ;; esac; done
    ln -sfn "$res" "/tmp/bg-$name.res"
    setsid nohup env RES="$res" OUT="/tmp/bg-$name-out" "$@" bash tools/gpu-campaign.sh \
      > "/tmp/bg-$name.log" 2>&1 < /dev/null &
    echo $! > "/tmp/bg-$name.pid"; echo "started $name (pid $!, RES=$res)" ;;
  hold)
    end=$(( $(date +%s) + ${1:?SECONDS} ))
    while [ "$(date +%s)" -lt "$end" ] && running; do progress; sleep $(( end - $(date +%s) < 60 ? 5 : 60 )); done
    progress
    for l in /tmp/bg-*-out/campaign.log; do [ -e "$l" ] && { echo "== $l"; tail -n 4 "$l"; }; done ;;
  pack)
    name=${1:?NAME}; shift
    : "${OUT:?export OUT first (the device sets it; gpu-campaign.sh writes elsewhere without it)}"
    pid=$(cat "/tmp/bg-$name.pid" 2>/dev/null)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"  # the script first, so that it starts no further part
      pkill -INT -s "$pid" -f 'cli fuzz' || true  # the campaign's driver stops its workers and flushes (#19)
      for _ in $(seq 60); do pgrep -s "$pid" > /dev/null || break; sleep 1; done
      pkill -KILL -s "$pid" || true
    fi
    # two files back per campaign (a device call brings back 8 files at most): its packed rows, its logs
    env RES="$(readlink "/tmp/bg-$name.res")" OUT="/tmp/bg-$name-out" PARTS=" " "$@" bash tools/gpu-campaign.sh > /dev/null 2>&1
    cp "/tmp/bg-$name-out/gpu-results.tar.xz" "$OUT/$name-results.tar.xz"
    cat "/tmp/bg-$name.log" "/tmp/bg-$name-out"/{device.txt,campaign.log,throughput.md} > "$OUT/$name-log.txt" 2>/dev/null
    ls -la "$OUT/$name"-* ;;
  *) echo "usage: gpu-bg.sh start NAME [VAR=VALUE ...] | hold SECONDS | pack NAME [VAR=VALUE ...]" >&2; exit 2 ;;
esac
