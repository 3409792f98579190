#!/usr/bin/env bash
# Wall time of the paper-scale MovieLens simulation (100 nodes × 8 VNs, r = 8), and callgrind's instruction
# count of a short run of the same command (stable on a loaded machine, unlike the wall time).
#
#   results/sim-speed/run.sh                  # this tree: builds the release testnet, 3 timed runs
#   BIN=/tmp/testnet-before results/sim-speed/run.sh   # another build (e.g. of the commit before), same runs
#   ROUNDS=30 RUNS=3 CG_ROUNDS=3 results/sim-speed/run.sh
#
# Writes results/sim-speed/runs/<label>.tsv (one line per run: label, rounds, wall s, user s, sys s, the
# 1-minute load average before the run) and, with CALLGRIND=1, <label>.callgrind.txt (the instruction total).
# The metrics of each run are compared with the first run's (wall-clock fields left out): the simulator is
# deterministic per seed, so they must be identical.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-300}
RUNS=${RUNS:-3}
CG_ROUNDS=${CG_ROUNDS:-3}
CALLGRIND=${CALLGRIND:-1}
if [ -z "${BIN:-}" ]; then
  nice -n 10 cargo build --release -p testnet
  BIN=target/release/testnet
fi
LABEL=${LABEL:-$(git rev-parse --short HEAD)}
OUT=results/sim-speed/runs
mkdir -p "$OUT"
CMD=(--mode sim --dataset movielens --nodes 100 --vns 8 --degree 8 --lr 0.075 --batch 32 --local-epochs 1 --plain)
norm() {
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    v = json.loads(l)
    for f in ("train_secs", "eval_secs", "aggregate_secs"):
        v[f] = 0
    print(json.dumps(v, sort_keys=True))' "$1"
}
for i in $(seq 1 "$RUNS"); do
  dir=$(mktemp -d)
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %U %S" -o "$dir/time" "$BIN" "${CMD[@]}" --rounds "$ROUNDS" --out "$dir/run" > "$dir/log" 2>&1
  printf '%s\t%s\t%s\t%s\n' "$LABEL" "$ROUNDS" "$(tr ' ' '\t' < "$dir/time")" "$load" | tee -a "$OUT/$LABEL.tsv"
  norm "$dir/run/metrics.jsonl" > "$dir/metrics.norm"
  if [ "$i" = 1 ]; then cp "$dir/metrics.norm" "$OUT/$LABEL.metrics.norm"; else cmp "$dir/metrics.norm" "$OUT/$LABEL.metrics.norm"; fi
  rm -rf "$dir"
done
if [ "$CALLGRIND" = 1 ]; then
  dir=$(mktemp -d)
  # One matmul thread and no re-exec (testnet re-executes itself to set RAYON_NUM_THREADS otherwise).
  RAYON_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$BIN" "${CMD[@]}" --rounds "$CG_ROUNDS" --out "$dir/run" > "$dir/log" 2>&1
  callgrind_annotate "$dir/cg.out" 2>/dev/null | grep -m1 'PROGRAM TOTALS' | tee "$OUT/$LABEL.callgrind.txt"
  rm -rf "$dir"
fi
