#!/usr/bin/env bash
# Regenerates results/movielens-gap/ from the repository root: where Shatter's accuracy gap to EL on MovieLens
# (results/baselines-movielens: RMSE 1.901 against 1.841 at k = 8) comes from. The setting is that folder's:
# ml-latest-small in ../shared/data/movielens, split by user over 32 nodes, `mf` (d = 206,680), lr 0.075, batch
# 32, r = 6, 3 seeds. The oracle (testnet example mixing_oracle) replays the simulator's nodes (same data split,
# initial model, training RNGs) with the paper's central random-graph oracle in place of the network, and
# changes one thing at a time. The engine's own k sweep (k = 1, 2, 4, 8, 3 seeds) is in
# results/baselines-movielens (its run.sh). About 45 min on two shared cores (release).
set -euo pipefail
BIN=${BIN:-"cargo run --release -p testnet --example mixing_oracle --"}
OUT=results/movielens-gap
ML="--dataset movielens --data-dir ../shared/data/movielens/ml-latest-small --model mf --nodes 32 --degree 6 --lr 0.075 --seeds 3"
# 10 local epochs x 30 rounds (baselines-movielens' setting): who meets whom, and how parameters are dealt.
$BIN $ML --rounds 30 --local-epochs 10 --variants el,shatter:8,aligned:8,rows:8 --csv $OUT/e10-t30.csv > $OUT/e10-t30.md
$BIN $ML --rounds 30 --local-epochs 10 --variants selfr:8,shatter:2,shatter:4,aligned:2 --csv $OUT/e10-t30-k.csv > $OUT/e10-t30-k.md
# The gap over rounds, and with less local work per round (the same 300 local epochs in all).
$BIN $ML --rounds 100 --local-epochs 10 --variants el,shatter:8 --eval-every 5 --csv $OUT/e10-t100.csv > $OUT/e10-t100.md
$BIN $ML --rounds 100 --local-epochs 3 --variants el,shatter:8 --eval-every 10 --csv $OUT/e3-t100.csv > $OUT/e3-t100.md
$BIN $ML --rounds 300 --local-epochs 1 --variants el,shatter:8 --eval-every 10 --csv $OUT/e1-t300.csv > $OUT/e1-t300.md
