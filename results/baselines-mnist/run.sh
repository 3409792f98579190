#!/usr/bin/env bash
# Regenerates results/baselines-mnist/ (the algorithm table) and results/baselines-mnist-k/ (Fig. 7: k sweep)
# from the repository root: the real MNIST subset in ../shared/data/mnist, LeNet, 16 nodes, Dirichlet(0.1),
# r = 4, 6 rounds of 4 local steps (batch 32), the simulator, 3 seeds. The audit attacks the first 4 chunks
# each node receives in the last round; the LA scores 50 training samples of each other node.
# Sized to run in well under an hour on two shared cores; BIN defaults to the release build of the example.
set -euo pipefail
BIN=${BIN:-"cargo run --release -p testnet --example baselines --"}
COMMON=(--dataset mnist --data-dir ../shared/data/mnist --model lenet --partition dirichlet --alpha 0.1
        --nodes 16 --degree 4 --rounds 6 --local-steps 4 --test-samples 200
        --audit --audit-every 100 --audit-chunks 4 --audit-la-samples 50 --jobs 2)
$BIN --sweep-out results/baselines-mnist "${COMMON[@]}" --seeds 3 \
    --algos el,shatter@8,dpsgd,chunking:8,sparsify-random:0.125,sparsify-topk:0.125,muffliato:0.025,muffliato:0.1
# EL's local variant, added to the table above (--append keeps the other rows).
$BIN --sweep-out results/baselines-mnist "${COMMON[@]}" --seeds 3 --append --algos el-local
# The k sweep (Fig. 7), 3 seeds: k = 2, 4, 16, then k = 1 (el) and k = 8 re-run beside them on the same code
# (the table above was run on an earlier commit), then the figure from that folder's summary.
$BIN --sweep-out results/baselines-mnist-k "${COMMON[@]}" --seeds 3 --algos shatter@2,shatter@4,shatter@16
$BIN --sweep-out results/baselines-mnist-k "${COMMON[@]}" --seeds 3 --append --algos el,shatter@8
$BIN --sweep-out results/baselines-mnist-k --plot-k results/baselines-mnist-k/summary.json
