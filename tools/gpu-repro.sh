#!/usr/bin/env bash
# Run ON THE DEVICE (repo root) after the staging calls (docs/gpu-offline.md): every reproducer of the findings
# catalog, each in a fresh process: the committed scripts (benchmarks/results/repro/) and the script
# `attnref repro` writes for every committed case it can write one for. Into $OUT/repro-log.txt: device and
# versions, then one line per script: its exit status (1: the kernel is off, as FINDINGS.md expects; 0: it
# passes here; 124: it ran past TIMEOUT; other: it crashed), its seconds and its last output line. control-*:
# a plain case per template (tools/repro-controls.py), expected to exit 0.
#   JOBS=6 TIMEOUT=420 MATCH='fa4|flashinfer' bash tools/gpu-repro.sh     (MATCH='^control-': the controls alone)
set -uo pipefail
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"; LOG=$OUT/repro-log.txt; DIR=/tmp/attnref-repro; rm -rf "$DIR"; mkdir -p "$DIR"
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
bash tools/device-info.sh > "$LOG" 2>&1
python3 - "$DIR" "${MATCH:-.}" <<'PY'  # one process writes every script (an import of torch per case costs seconds)
import json, pathlib, re, sys
from reference.case import Case
from reports.repro import write_repro
for path in sorted(pathlib.Path("benchmarks/results/cases").glob("*.json")):
    if re.search(sys.argv[2], path.stem):
        saved = json.loads(path.read_text())
        try:
            (pathlib.Path(sys.argv[1]) / f"{path.stem}.py").write_text(write_repro(Case.from_dict(saved["case"]), saved["backend"]))
        except ValueError:  # ReproUnsupported: FINDINGS.md lists the replay command instead
            pass
PY
# controls: a plain case per template (tools/repro-controls.py), each expected to exit 0 (CONTROLS=0 skips them)
if [ "${CONTROLS:-1}" != 0 ]; then
  python3 tools/repro-controls.py "$DIR"
  for script in "$DIR"/control-*.py; do [[ "$(basename "$script" .py)" =~ ${MATCH:-.} ]] || rm -f "$script"; done
fi
for script in benchmarks/results/repro/*.py; do
  name=$(basename "$script" .py); [[ "$name" =~ ${MATCH:-.} ]] && cp "$script" "$DIR/committed-$name.py"
done
run_one() {
  local t0=$(date +%s) rc last
  # vLLM's backends driven whole need its config code's packages (tools/stage-vllm.sh: /tmp/vdeps), last on the path
  local path=$PYTHONPATH
  case $(basename "$1") in
    *vllm-backend-*|*vllm-layer-*|*vllm-fa4-*) path=$PYTHONPATH:/tmp/vdeps ;;
    # xformers imports any flash_attn as FA2 and FA4's has no flash_attn_interface: xformers runs from its own folder
    *xformers-*) path=$PWD:/tmp/site-xf ;;
  esac
  PYTHONPATH=$path timeout "${TIMEOUT:-420}" python3 "$1" > "$1.out" 2>&1; rc=$?
  last=$(grep -v '^\s*$' "$1.out" | tail -1)
  printf '%-72s rc=%-4s %4ss  %s\n' "$(basename "$1")" "$rc" "$(( $(date +%s) - t0 ))" "${last:0:160}"
}
export -f run_one
ls "$DIR"/*.py | xargs -P "${JOBS:-6}" -I{} bash -c 'run_one "$@"' _ {} >> "$LOG"
tar cJf "$OUT/repro-outputs.tar.xz" -C "$DIR" . 2>/dev/null  # every script and its full output
cat "$LOG"
