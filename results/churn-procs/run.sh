#!/bin/sh
# Regenerates results/churn-procs (issue 15): 8 `node` processes, k = 2, r = 4, 25 rounds of the default
# synthetic task with 5 local epochs a round (so a round lasts about a second), loopback timing (5 s exchange
# deadline), seeds 1-3, debug build; about 4 minutes on two cores. Per seed: a clean run; 25% of the nodes (6 and 7) SIGKILLed once a node reports round 6 and
# restarted 3 s later with `node run --resume`; one node (7) SIGSTOPped once a node reports round 4 and
# SIGCONTed once another reports round 9 (5 rounds later). summary.md is made from the runs' summary.json.
set -e
cd "$(dirname "$0")/../.."
OUT=${1:-results/churn-procs}
cargo build -p node -p testnet
for seed in 1 2 3; do
    common="--mode procs --nodes 8 --vns 2 --rounds 25 --local-epochs 5 --seed $seed --plain"
    ./target/debug/testnet $common --out "$OUT/clean/seed-$seed"
    ./target/debug/testnet $common --kill 0.25@6 --restart-after 3 --out "$OUT/kill/seed-$seed"
    ./target/debug/testnet $common --pause 0.125@4:5 --out "$OUT/pause/seed-$seed"
done
python3 results/churn-procs/summarize.py "$OUT" > "$OUT/summary.md"
