#!/usr/bin/env bash
# Regenerates results/linkage-timing-paced/ (issue 13): the network observer's sibling-linkage attack by timing
# with the send pace on, set (12 s) or learnt (--send-pace-auto) — every VN sends its chunk no earlier than its node's round start + 12 s (the slowest
# training of this simulator setting: 10 s ± 20%), then its own random jitter of up to 1 s or 250 ms. Same
# setting as results/linkage-timing (16 nodes × 8 VNs, r = 8, 20 rounds, synthetic data, links of 1-50 ms),
# 3 seeds. Seconds on two cores, release build; run from the repository root.
set -euo pipefail
for j in 1000 250; do
  cargo run --release -p testnet --example baselines -- --sweep-out results/linkage-timing-paced/jitter-$j \
    --algos shatter@8 --send-jitters-ms $j --send-pace-ms 12000 --nodes 16 --degree 8 --rounds 20 \
    --audit --audit-chunks 1 --audit-every 20 --jobs 2 --seeds 3
  # The automatic pace: each VN learns it from when its neighbours' chunks came (no operator setting).
  cargo run --release -p testnet --example baselines -- --sweep-out results/linkage-timing-paced/auto-jitter-$j \
    --algos shatter@8 --send-jitters-ms $j --send-pace-auto --nodes 16 --degree 8 --rounds 20 \
    --audit --audit-chunks 1 --audit-every 20 --jobs 2 --seeds 3
done
