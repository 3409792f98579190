#!/bin/sh
# Regenerates results/churn-procs (issue 15): 8 `node` processes (release build), k = 2, r = 4, 50 rounds of
# the default synthetic task with 5 local epochs a round, loopback timing (5 s exchange deadline) with the
# overlay negotiated 4 rounds ahead (--lookahead 4, see docs/protocol.md, "Timing"), seeds 1-3; about 12 minutes on two idle cores.
# Per seed:
#   clean   no churn;
#   kill    25% of the nodes (6 and 7) SIGKILLed once a node reports round 5, restarted 1 s later with
#           `node run --resume`;
#   kill-3s the same, restarted 3 s later;
#   pause   one node (7) SIGSTOPped once a node reports round 5, SIGCONTed once another reports round 10;
#   clean-lookahead-1, kill-lookahead-1
#           clean and kill with the overlay negotiated 1 round ahead (rounds about as long as the overlay
#           window, so a restarted node's first overlay window is about one network round).
# VARIANTS="kill-lookahead-1 ..." runs only those (into the existing output), then summarises everything.
# summary.md is made from the runs' summary.json. Run it niced on a shared machine:
#   nice -n 10 results/churn-procs/run.sh
set -e
cd "$(dirname "$0")/../.."
OUT=${1:-results/churn-procs}
cargo build --release -p node -p testnet
run() {  # variant, seed, extra args
    name=$1; seed=$2; shift 2
    if [ -n "${VARIANTS:-}" ] && ! echo " $VARIANTS " | grep -q " $name "; then return; fi
    ./target/release/testnet --mode procs --nodes 8 --vns 2 --rounds 50 --local-epochs 5 --seed "$seed" --plain \
        --node-bin target/release/node "$@" --out "$OUT/$name/seed-$seed"
}
for seed in 1 2 3; do
    run clean "$seed" --lookahead 4
    run kill "$seed" --lookahead 4 --kill 0.25@5 --restart-after 1
    run kill-3s "$seed" --lookahead 4 --kill 0.25@5 --restart-after 3
    run pause "$seed" --lookahead 4 --pause 0.125@5:5
    run clean-lookahead-1 "$seed" --lookahead 1
    run kill-lookahead-1 "$seed" --lookahead 1 --kill 0.25@5 --restart-after 1
done
python3 results/churn-procs/summarize.py "$OUT" > "$OUT/summary.md"
