#!/usr/bin/env bash
# Regenerates results/pdmm-mnist-mlp/ from the repository root: PDMM beside EL and Shatter (k = 8) on the real
# MNIST subset in ../shared/data/mnist with the MLP (784-128-10), the setting of ../pdmm-mnist/ otherwise
# (16 nodes, Dirichlet(0.1), r = 4, 10 rounds of one local epoch, the simulator, 3 seeds, audited in round 9).
# BIN defaults to the release build of the example.
set -euo pipefail
BIN=${BIN:-"cargo run --release -p testnet --example baselines --"}
$BIN --sweep-out results/pdmm-mnist-mlp \
    --algos pdmm:0.003,el,shatter@8 --dataset mnist --data-dir ../shared/data/mnist --model mlp \
    --partition dirichlet --alpha 0.1 --nodes 16 --degree 4 --rounds 10 --test-samples 300 \
    --audit --audit-every 9 --audit-chunks 4 --jobs 2
