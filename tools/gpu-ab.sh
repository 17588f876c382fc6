#!/usr/bin/env bash
# Run ON THE DEVICE (repo root): harness throughput before / after, in one call, campaigns alternating.
#   OLD=.ab-base PARTS="fast small" TIME_FAST=30 FAST="aten-flash-varlen torch-sdpa-flash" bash tools/gpu-ab.sh
# Parts: fast (the default tiers), small (the small tier), mps (small under `--mps`), newx (this tree alone with
# XARGS, e.g. XARGS="--oracle-cpu-max 262144"; its campaigns named NEWX_NAME-BACKEND, default newx), syncs (benchmarks/sync_count.py in each tree: $OUT/syncs.md).
# OLD is another tree of this repository (carried in an ignored folder: `git worktree add` a commit, copy it
# without .git). For each part and backend the old tree's campaign runs, then this tree's, so that a drift of
# the machine falls on both; each tree reads only its own modules (PYTHONPATH, cwd). $OUT/ab.md gets the rows
# of benchmarks/throughput.py (this tree's script, which reads either tree's rows), the logs $OUT/ab.log, the mean milliseconds
# of each part by size tier and oracle device $OUT/ab-tiers.md. OLD_PATH / NEW_PATH: folders put on each tree's
# PYTHONPATH after it (another version of a package, e.g. hypothesis installed with pip --target). OLD_ARGS / NEW_ARGS:
# arguments added to each tree's campaigns (OLD=. NEW_ARGS="--oracle-cpu-max 262144": one tree, two settings). Part draws runs
# benchmarks/draw_speed.py in this tree under OLD_PATH, then NEW_PATH ($OUT/draws.md): the package alone.
set -uo pipefail
PY=${PY:-python3}
OUT=${OUT:-/tmp/attnref-out}; mkdir -p "$OUT"
RES=${RES:-/tmp/ab-results}; mkdir -p "$RES"
OLD=${OLD:?OLD: a folder holding the tree to compare against}
OLD=$(cd "$OLD" && pwd); NEW=$PWD
PARTS=${PARTS:-"fast small"}
FAST=${FAST:-"aten-flash-varlen torch-sdpa-flash"}
export PYTHONUNBUFFERED=1
echo "| run | backend | examples | workers | examples/s | new-example share | materialize | oracle | JIT compile | kernel | compare | shrink | generation + harness | oracle on CPU |" >> "$OUT/ab.md"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" >> "$OUT/ab.md"
echo "| run | backend | size tier | oracle on | examples | materialize ms | oracle ms | JIT compile ms | kernel ms | compare ms | share of measured time | blind |" >> "$OUT/ab-tiers.md"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|" >> "$OUT/ab-tiers.md"
campaign() {  # campaign TREE NAME ARGS...: one campaign of that tree, its throughput row
  local tree=$1 name=$2; shift 2
  local extra=${NEW_PATH:-}; [ "$tree" = "$OLD" ] && extra=${OLD_PATH:-}
  (cd "$tree" && PYTHONPATH=$tree${extra:+:$extra} timeout $((${TIME_FAST:-30} + 120)) $PY -m cli fuzz --time "${TIME_FAST:-30}" \
     --workers auto --quiet --no-replay --out "$RES/$name" "$@" >> "$OUT/ab.log" 2>&1)
  local table; table=$($PY "$NEW/benchmarks/throughput.py" "$RES/$name" --by-tier)  # the rows, read once
  sed -n 3p <<< "$table" | sed "s/^/| $name /" >> "$OUT/ab.md"
  tail -n +7 <<< "$table" | sed "s/^/| $name /" >> "$OUT/ab-tiers.md"
}
for part in $PARTS; do
  for b in $FAST; do
    case $part in
      fast) args=(--backend "$b") ;;
      small) args=(--backend "$b" --limits '{"tiers": ["small"]}') ;;
      mps) args=(--backend "$b" --limits '{"tiers": ["small"]}' --mps) ;;
      draws) for extra in "${OLD_PATH:-}" "${NEW_PATH:-}"; do
               PYTHONPATH=$NEW${extra:+:$extra} $PY benchmarks/draw_speed.py --backend "$b" --rounds 3 >> "$OUT/draws.md" 2>> "$OUT/ab.log"
             done; continue ;;
      newx) campaign "$NEW" "${NEWX_NAME:-newx}-$b" --backend "$b" $XARGS; continue ;;  # this tree alone, with XARGS
      syncs) for tree in "$OLD" "$NEW"; do
               echo "### $(basename "$tree") $b" >> "$OUT/syncs.md"
               (cd "$tree" && PYTHONPATH=$tree $PY "$NEW/benchmarks/sync_count.py" --backend "$b" \
                  --examples "${SYNC_EXAMPLES:-150}" >> "$OUT/syncs.md" 2>> "$OUT/ab.log")
             done; continue ;;
      *) echo "unknown part $part" >> "$OUT/ab.log"; continue ;;
    esac
    campaign "$OLD" "old-$part-$b" "${args[@]}" ${OLD_ARGS:-}
    campaign "$NEW" "new-$part-$b" "${args[@]}" ${NEW_ARGS:-}
  done
done
cat "$OUT/ab.md"
