#!/usr/bin/env bash
# Regenerates results/baselines-mnist-ghp/ from the repository root: GHP, its random baseline and Shatter + GHP
# on the real MNIST subset (../shared/data/mnist), LeNet, 16 nodes, Dirichlet(0.1), r = 4, 6 rounds of 4 local
# steps (batch 32), the simulator, 3 seeds, audited in the last round — the setting of ../baselines-mnist/.
# Three sweeps: σ = 0.05 (this folder's summary.*), σ = 0.01 and 0.2 (sigma-sweep/), and GHP with per-sample
# clipping to B = 1 (clipped/, which reports the DP accountant's ε in each run's summary.json).
# BIN defaults to the release build of the example.
set -euo pipefail
BIN=${BIN:-"cargo run --release -p testnet --example baselines --"}
COMMON=(--dataset mnist --data-dir ../shared/data/mnist --model lenet --partition dirichlet --alpha 0.1
        --nodes 16 --degree 4 --rounds 6 --local-steps 4 --test-samples 200
        --audit --audit-every 100 --audit-chunks 4 --audit-la-samples 50 --jobs 2 --seeds 3)
$BIN --sweep-out results/baselines-mnist-ghp "${COMMON[@]}" --algos ghp:0.05@1,random:0.05@1,ghp:0.05@8
$BIN --sweep-out results/baselines-mnist-ghp/sigma-sweep "${COMMON[@]}" \
    --algos ghp:0.01@1,random:0.01@1,ghp:0.01@8,ghp:0.2@1,random:0.2@1,ghp:0.2@8
$BIN --sweep-out results/baselines-mnist-ghp/clipped "${COMMON[@]}" --clip 1 --algos ghp:0@1,ghp:0.05@1,ghp:0.2@1
