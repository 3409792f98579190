#!/usr/bin/env bash
# Regenerates results/baselines-mnist/ (the algorithm table) and results/baselines-mnist-k/ (Fig. 7: k sweep)
# from the repository root. The real MNIST subset in ../shared/data/mnist, LeNet, 16 nodes, Dirichlet(0.1),
# r = 4, 6 rounds of one local epoch, the simulator; the audit attacks 4 received chunks per node in the last
# round. BIN defaults to the release build of the example; the committed results were made with the debug
# build (same code; dependencies are optimised in both profiles), which is what fitted the time.
set -euo pipefail
BIN=${BIN:-"cargo run --release -p testnet --example baselines --"}
COMMON=(--dataset mnist --data-dir ../shared/data/mnist --model lenet --partition dirichlet --alpha 0.1
        --nodes 16 --degree 4 --rounds 6 --test-samples 300 --audit --audit-every 100 --audit-chunks 4
        --seeds 3 --jobs 2)
$BIN --sweep-out results/baselines-mnist \
    --algos el,shatter@8,dpsgd,chunking:8,sparsify-random:0.125,muffliato:0.025,muffliato:0.1 "${COMMON[@]}"
$BIN --sweep-out results/baselines-mnist-k --algos shatter@2,shatter@4,shatter@16 "${COMMON[@]}"
