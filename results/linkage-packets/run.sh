#!/usr/bin/env bash
# Regenerates results/linkage-packets/ (issue 13): the network observer's timing attack on packet arrival
# times, and the address-grouping attack on the source addresses VNs really connect from. Every node process
# and VN host runs in a network namespace of its own (`--netns`: 10.77.0.0/16 on a bridge inside namespaces
# the run creates and deletes; nothing routes out), each observer's packets are captured by tcpdump on its
# interface inside its namespace (`--capture`), and the sibling-linkage scoring of testnet/src/linkage.rs runs
# on the packet times. 8 `node` processes × 4 VNs, r = 4, 20 rounds, the default synthetic task, LAN timing
# (200 ms overlay sub-steps: the loopback timing's 40 ms let the overlay collapse on a machine as loaded as the
# one these figures come from) with the loopback timing's 20 ms send jitter unless a variant says otherwise;
# variants: no defence, VNs in 4 VN hosts, the defences (200 ms jitter + 150 ms pace, with and without
# hosts; a 1 s jitter, with and without hosts, and with walks that hide their origin); seeds 1-3. Needs root (network namespaces) and installs tcpdump if missing. About 10 minutes; run
# from the repository root.
set -euo pipefail
if ! command -v tcpdump > /dev/null; then
  apt-get update -qq && apt-get install -y -qq tcpdump > /dev/null
fi
nice -n 10 cargo build -q --release -p node -p testnet
BIN=${BIN:-target/release}
OUT=target/linkage-packets
# VARIANTS="a b": run only those (into the existing $OUT), then summarise all.
[ -z "${VARIANTS:-}" ] && rm -rf "$OUT"
run() {  # name, extra args
  local name=$1; shift
  if [ -n "${VARIANTS:-}" ] && [[ " $VARIANTS " != *" $name "* ]]; then return; fi
  for seed in 1 2 3; do
    nice -n 10 "$BIN/testnet" --mode procs --nodes 8 --vns 4 --degree 4 --rounds 20 --seed "$seed" \
      --timing lan --netns --observe-timing --capture --out "$OUT/$name/seed-$seed" --plain "$@" > /dev/null
  done
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
run no-pace --send-jitter-ms 20
run hosts-no-pace --vn-hosts 4 --send-jitter-ms 20
run jitter-200ms-pace-150ms --send-jitter-ms 200 --send-pace-ms 150
run hosts-jitter-200ms-pace-150ms --vn-hosts 4 --send-jitter-ms 200 --send-pace-ms 150
run jitter-1s --send-jitter-ms 1000
run hosts-jitter-1s --vn-hosts 4 --send-jitter-ms 1000
run jitter-1s-hidden-walks --send-jitter-ms 1000 --hide-walk-origin
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
# Nothing of the run's namespaces may be left.
if ip netns list | grep -q '^stn'; then echo "namespaces left behind:"; ip netns list | grep '^stn'; fi
python3 - "$OUT" "$LOAD_BEFORE" "$LOAD_AFTER" > results/linkage-packets/summary.md <<'PY'
import json, statistics as st, sys, pathlib
out = pathlib.Path(sys.argv[1])
def ms(xs):
    xs = [x for x in xs if x is not None]
    return f"{st.mean(xs):.3f} ± {st.stdev(xs):.3f}" if len(xs) > 1 else (f"{xs[0]:.3f}" if xs else "–")
def gaps(p):
    c = [x["last_packet"]["chunks"] for x in p]
    if any(x.get("sibling_gap_ms_median") is None for x in c):
        return "–"
    return (f"{st.mean(x['sibling_gap_ms_median'] for x in c):.0f} / "
            f"{st.mean(x['stranger_gap_ms_median'] for x in c):.0f}")
names = ["no-pace", "hosts-no-pace", "jitter-200ms-pace-150ms", "hosts-jitter-200ms-pace-150ms", "jitter-1s",
         "hosts-jitter-1s", "jitter-1s-hidden-walks"]
print("| variant | chunk AUC, last packet | chunk AUC, burst start | chunk AUC, log (wall clock) | median gap ms, siblings / strangers (chunks, last packet) | walk AUC, last packet (first hops / any hop) | matched / unmatched arrivals | unmapped data packets | log − packet lag µs (median / p99) | neighbours / VN | round s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
rows = {}
for name in names:
    rs = [json.loads((out / name / f"seed-{s}/summary.json").read_text()) for s in (1, 2, 3)]
    rows[name] = rs
    p = [r["linkage_packets"] for r in rs]
    lags = " · ".join(f"{x['log_lag_us_median']}/{x['log_lag_us_p99']}" for x in p)
    print(f"| {name} | {ms([x['last_packet']['chunks']['auc_pooled'] for x in p])} | "
          f"{ms([x['burst_start']['chunks']['auc_pooled'] for x in p])} | "
          f"{ms([x['log_wall']['chunks']['auc_pooled'] for x in p])} | "
          f"{gaps(p)} | "
          f"{ms([x['last_packet']['walks']['auc_pooled'] for x in p])} / "
          f"{ms([x['last_packet'].get('walks_any_hop', {}).get('auc_pooled') for x in p])} | "
          f"{sum(x['matched'] for x in p)} / {sum(x['unmatched'] for x in p)} | "
          f"{sum(x['unmapped_packets'] for x in p)} of {sum(x['data_packets'] for x in p)} | {lags} | "
          f"{ms([r['neighbours_per_vn'] for r in rs])} | "
          f"{ms([r['mean_round_seconds'] for r in rs])} |")
print()
print("Address grouping (same runs): announced IPs, and the source IPs peers really connected from.")
print()
print("| variant | AUC, announced IP | AUC, observed source IP | distinct source IPs | VNs seen |")
print("|---|---|---|---|---|")
for name in names:
    g = [r["address_grouping"] for r in rows[name]]
    print(f"| {name} | {ms([x['sibling_linkage_auc'] for x in g])} | {ms([x['observed']['sibling_linkage_auc'] for x in g])} | "
          f"{'/'.join(sorted({str(x['observed']['distinct_source_ips']) for x in g}))} | "
          f"{'/'.join(sorted({str(x['observed']['vns_seen']) for x in g}))} |")
print(f"\n8 nodes × 4 VNs, r = 4, 20 rounds, seeds 1-3 (mean ± sample std), every process in its own network "
      f"namespace. Load average (1/5/15 min) before: {sys.argv[2]}; after: {sys.argv[3]}. "
      "Regenerate: `results/linkage-packets/run.sh`.")
PY
cat results/linkage-packets/summary.md
