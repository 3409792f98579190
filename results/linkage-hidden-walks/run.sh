#!/usr/bin/env bash
# Regenerates results/linkage-hidden-walks/ (issue 13): the network observer's sibling-linkage attack with overlay
# walks that name their origin (the default) and with walks that hide it (--hide-walk-origin: answers relayed
# back along the path). Same setting as results/linkage-timing-paced (16 nodes × 8 VNs, r = 8, 20 rounds,
# synthetic data, the simulator's links of 1-50 ms and 100 ms sub-steps, chunks paced at 12 s + 1 s jitter so
# that chunk timing is at chance), 3 seeds. A minute or two on two cores, release build; run from the
# repository root.
set -euo pipefail
common=(--algos shatter@8 --send-jitters-ms 1000 --send-pace-ms 12000 --nodes 16 --degree 8 --rounds 20
  --audit --audit-chunks 1 --audit-every 20 --jobs 2 --seeds 3)
cargo run --release -p testnet --example baselines -- --sweep-out results/linkage-hidden-walks/named "${common[@]}"
cargo run --release -p testnet --example baselines -- --sweep-out results/linkage-hidden-walks/hidden \
  "${common[@]}" --hide-walk-origin
