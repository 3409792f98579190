#!/usr/bin/env bash
# Regenerates results/gia-synthetic/: gradient inversion inside a run, per algorithm. The analytic inversion
# of the first fully connected layer needs an MLP, so: the 1×16×16 synthetic images, MLP (64 hidden), 8 nodes,
# r = 4, one local step of batch 1 per round (the setting where one update is one sample's gradient), 5 rounds,
# the simulator, 3 seeds; the audit attacks the first 8 chunks each node receives in the last round.
set -euo pipefail
BIN=${BIN:-"cargo run --release -p testnet --example baselines --"}
$BIN --sweep-out results/gia-synthetic --dataset synthetic-images-small --model mlp:64 --local-steps 1 --batch 1 \
    --nodes 8 --degree 4 --rounds 5 --audit --audit-every 100 --seeds 3 --jobs 1 \
    --algos el,shatter@4,shatter@8,dpsgd,chunking:8,sparsify-random:0.125,sparsify-topk:0.125,muffliato:0.025,muffliato:0.1
