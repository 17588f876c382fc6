#!/usr/bin/env bash
# Run ON THE DEVICE (repo root) after the staging calls (docs/gpu-offline.md): an untold campaign, as a new
# user runs it (no --limits, no --compile-slices), of the backends in BACKENDS for SECS seconds, then the
# report. Into $OUT: NAME.log (device, versions, the campaign's closing lines), NAME-summary.md,
# NAME-coverage.csv, NAME-rows.jsonl.xz (every generated row, digested: tools/rows-digest.py) and
# NAME-cases.tar.xz (the minimal cases).
#   BACKENDS="aten-flash-varlen fa4-varlen" SECS=300 NAME=untold-torch bash tools/gpu-untold.sh
set -uo pipefail
OUT=${OUT:-/tmp/attnref-out}; NAME=${NAME:-untold}; RES=${RES:-/tmp/$NAME}; mkdir -p "$OUT"
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
{ bash tools/device-info.sh; echo "backends: $BACKENDS; $SECS s; workers ${WORKERS:-auto}"; } > "$OUT/$NAME.log" 2>&1
args=""; for b in $BACKENDS; do args="$args --backend $b"; done
timeout $((SECS + 120)) python3 -m cli fuzz $args --time "$SECS" --workers "${WORKERS:-auto}" --quiet \
  --out "$RES" >> "$OUT/$NAME.log" 2>&1
echo "fuzz exit $?" >> "$OUT/$NAME.log"
python3 -m cli report "$RES" >> "$OUT/$NAME.log" 2>&1
cp "$RES/summary.md" "$OUT/$NAME-summary.md" 2>/dev/null
cp "$RES/coverage.csv" "$OUT/$NAME-coverage.csv" 2>/dev/null
python3 tools/rows-digest.py "$RES" | xz -6 > "$OUT/$NAME-rows.jsonl.xz"
tar cJf "$OUT/$NAME-cases.tar.xz" -C "$RES" cases 2>/dev/null
tail -25 "$OUT/$NAME.log"
