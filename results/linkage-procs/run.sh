#!/usr/bin/env bash
# Regenerates results/linkage-procs/ (issue 13): the network observer's timing attack on real node processes.
# 8 `node` processes × 4 VNs, r = 4, 20 rounds, the default synthetic task, loopback timing, release build;
# every node logs what reaches its VNs and when (`arrivals = "arrivals.log"`), and the attack of
# testnet/src/linkage.rs runs on those logs (`--observe-timing`). Variants: the loopback timing's 20 ms send
# jitter with and without a 150 ms send pace; a 200 ms jitter without pace, with a 150 ms pace and with the
# learnt pace; the VNs in 4 VN hosts (the hosts observe). Seeds 1-3, about 15 minutes. Run from the
# repository root.
set -euo pipefail
cargo build -q --release -p node -p testnet
OUT=target/linkage-procs
rm -rf "$OUT"
run() {  # name, extra args (the jitter and pace variants of issue 13, without the chunk grid that replaced
  # the jitter since: --no-chunk-slots)
  local name=$1; shift
  for seed in 1 2 3; do
    target/release/testnet --mode procs --nodes 8 --vns 4 --degree 4 --rounds 20 --seed "$seed" \
      --observe-timing --out "$OUT/$name/seed-$seed" --plain --no-chunk-slots "$@" > /dev/null
  done
}
run no-pace
run pace-150ms --send-pace-ms 150
run jitter-200ms --send-jitter-ms 200
run jitter-200ms-pace-150ms --send-jitter-ms 200 --send-pace-ms 150
run jitter-200ms-pace-auto --send-jitter-ms 200 --send-pace-auto
run hosts-no-pace --vn-hosts 4
run hosts-jitter-200ms-pace-150ms --vn-hosts 4 --send-jitter-ms 200 --send-pace-ms 150
python3 - "$OUT" > results/linkage-procs/summary.md <<'PY'
import json, statistics as st, sys, pathlib
out = pathlib.Path(sys.argv[1])
def ms(xs):
    xs = [x for x in xs if x is not None]
    return f"{st.mean(xs):.3f} ± {st.stdev(xs):.3f}" if len(xs) > 1 else (f"{xs[0]:.3f}" if xs else "–")
print("| variant | AUC from chunk arrivals | AUC from first-hop walks | neighbours / VN | round s | training s |")
print("|---|---|---|---|---|---|")
for name in ["no-pace", "pace-150ms", "jitter-200ms", "jitter-200ms-pace-150ms", "jitter-200ms-pace-auto",
             "hosts-no-pace", "hosts-jitter-200ms-pace-150ms"]:
    rows = [json.loads((out / name / f"seed-{s}/summary.json").read_text()) for s in (1, 2, 3)]
    ch = [r["linkage"]["chunks"]["auc_pooled"] for r in rows]
    wk = [r["linkage"]["walks"]["auc_pooled"] for r in rows]
    print(f"| {name} | {ms(ch)} | {ms(wk)} | {ms([r['neighbours_per_vn'] for r in rows])} | "
          f"{ms([r['mean_round_seconds'] for r in rows])} | {ms([r['mean_train_seconds'] for r in rows])} |")
print("\n8 nodes × 4 VNs, r = 4, 20 rounds, seeds 1-3 (mean ± sample std). Regenerate: `results/linkage-procs/run.sh`.")
PY
cat results/linkage-procs/summary.md
