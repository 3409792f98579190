#!/usr/bin/env bash
# Regenerates results/vn-hosts/ (issue 13): 8 node processes × 4 VNs, r = 4, the default synthetic
# task, 10 rounds, every process on its own loopback IP (--own-ips), seeds 1-3, with the VNs inside their nodes (hosts = 0)
# and in 4 VN host processes (`node vn`). Reports the address-grouping attack, the RN↔VN link traffic against
# the paper's (2 + 1/r) × D-PSGD accounting, and round times. Run from the repository root; release build, a
# few minutes. The deployments stay in target/vn-hosts/ (keys, configs, logs; out of git).
set -euo pipefail
cargo build -q --release -p node -p testnet
OUT=target/vn-hosts
rm -rf "$OUT"
for seed in 1 2 3; do
  for hosts in 0 4; do
    target/release/testnet --mode procs --nodes 8 --vns 4 --degree 4 --rounds 10 --seed "$seed" \
      --own-ips --vn-hosts "$hosts" --out "$OUT/hosts-$hosts/seed-$seed" --plain > /dev/null
  done
done
python3 - "$OUT" > results/vn-hosts/summary.md <<'PY'
import json, statistics as st, sys, pathlib
out = pathlib.Path(sys.argv[1])
def ms(xs):
    return f"{st.mean(xs):.3f} ± {st.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"
print("| VNs run | address-grouping AUC | distinct IPs | neighbours / VN | round s | chunk bytes / RN / round | link bytes / RN / round | link bytes / 4d (expected 1 + neighbours) | (chunk + link) / 4·d·r (2 + 1/r at full degree) |")
print("|---|---|---|---|---|---|---|---|---|")
for hosts in (0, 4):
    rows = [json.loads((out / f"hosts-{hosts}/seed-{s}/summary.json").read_text()) for s in (1, 2, 3)]
    auc = [r["address_grouping"]["sibling_linkage_auc"] for r in rows]
    ips = sorted({r["address_grouping"]["distinct_ips"] for r in rows})
    nb = [r["neighbours_per_vn"] for r in rows]
    rt = [r["mean_round_seconds"] for r in rows]
    ch = [r["chunk_bytes_per_rn_per_round"] for r in rows]
    link = [r.get("link_bytes_per_rn_per_round", 0.0) for r in rows]
    cost = [r["cost_model_bytes_per_rn_per_round"] for r in rows]
    ratio = [(c + l) / m for c, l, m in zip(ch, link, cost)]
    per_d = [l / (4 * r_["d"]) for l, r_ in zip(link, rows)]
    expect = [1 + n for n in nb]
    where = "inside their node" if hosts == 0 else f"in {hosts} VN hosts"
    dash = "–"
    link_cell = f"{ms(per_d)} ({ms(expect)})" if hosts else dash
    ip_cell = "/".join(map(str, ips))
    print(f"| {where} | {ms(auc)} | {ip_cell} | {ms(nb)} | {ms(rt)} | {st.mean(ch):,.0f} | {st.mean(link):,.0f} | {link_cell} | {ms(ratio)} |")
r = 4
print(f"\n8 nodes × 4 VNs, r = {r}, 10 rounds, seeds 1-3 (mean ± sample std); 2 + 1/r = {2 + 1/r}. "
      "Regenerate: `results/vn-hosts/run.sh`.")
PY
cat results/vn-hosts/summary.md
