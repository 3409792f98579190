#!/usr/bin/env bash
# Regenerates results/linkage-packets/: the passive participant's timing attack on the packets of its own
# links (`testnet --capture`: message timing on packet times, and the all-packet features — same-millisecond
# coincidence and cross-correlation at lags 0-50 ms — with each feature's AUC and the best), and the
# address-grouping attack on the source addresses VNs really connect from. Needs root (tcpdump; network
# namespaces with --netns) and installs tcpdump if missing; run from the repository root.
#
# VARIANTS="lo-after netns-after" runs only those of a batch (the summary then has only the variants run;
# SUMMARY=name.md writes it under another name).
# BATCH selects what runs (default: `default`):
# - default: the issue "Unlinkable by default": the default procs network (`--mode procs --nodes 6 --vns 4
#   --degree 4 --rounds 15`, loopback timing, no timing flags), seeds 1-3, on loopback (one capture of the
#   run's ports on `lo`) and with every process in its own namespace (`--netns`): before (`--release-delay-us
#   0 --shared-vn-threads --no-chunk-slots`: every VN on the node's shared runtime, everything sent at once:
#   the code before the issue), threads (`--no-chunk-slots`: each VN on its own thread and runtime, chunks
#   sent when ready) and after (the defaults: the threads and the adaptive chunk grid). The node processes run
#   at the default priority (a niced node waits for the CPU behind other jobs, and what waits goes out
#   together). About 5 minutes. Summary: summary-default.md.
# - levers: each lever alone and together on loopback (release delays, threads, fixed chunk slots, the
#   adaptive grid). About 10 minutes. Summary: summary-levers.md.
# - cost: the levers' round-time cost in the rounds bench's setting (`cargo bench -p testnet --bench rounds`:
#   MovieLens MF, 8 RNs, k = 2, r = 4, 51 rounds, inproc TCP): before, threads and after as above, interleaved,
#   REPEAT times (default 3). About a minute a repeat. Summary: summary-cost.md.
# - lan: the batch of issue 13 (8 nodes x 4 VNs, 20 rounds, LAN timing, namespaces; the send-jitter and VN-host
#   variants, without the chunk grid that replaced the jitter since). About 20 minutes. Summary: summary.md.
# VARIANTS="a b" runs only those variants of the batch (into the existing output), then summarises all.
set -euo pipefail
if ! command -v tcpdump > /dev/null; then
  apt-get update -qq && apt-get install -y -qq tcpdump > /dev/null
fi
BIN=${BIN:-target/release}
# BIN=target/debug uses the dev build (the workspace is optimised there too: the root Cargo.toml).
if [ "$BIN" = target/debug ]; then
  nice -n 10 cargo build -q -p node -p testnet
else
  nice -n 10 cargo build -q --release -p node -p testnet
fi
BATCH=${BATCH:-default}
HERE=results/linkage-packets
OUT=target/linkage-packets
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

runp() {  # output dir, name, extra args: one default procs network per seed 1-3
  local out=$1 name=$2; shift 2
  if [ -n "${VARIANTS:-}" ] && [[ " $VARIANTS " != *" $name "* ]]; then return; fi
  for seed in 1 2 3; do
    echo "$name seed $seed, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
    "$BIN/testnet" --mode procs --nodes 6 --vns 4 --degree 4 --rounds 15 --seed "$seed" \
      --observe-timing --capture --out "$out/$name/seed-$seed" --plain "$@" > /dev/null
  done
}
header() {  # the summaries' first lines
  echo "Default procs network (6 nodes x 4 VNs, r = 4, 15 rounds, loopback timing), seeds 1-3; pooled"
  echo "sibling-linkage ROC-AUC per feature, mean ± sample std (per seed in brackets). Load average"
  echo "(1/5/15 min) of this invocation, before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg); each run's"
  echo "at the end. Commands: \`testnet --mode procs --nodes 6 --vns 4 --degree 4 --rounds 15 --seed S"
  echo "--observe-timing --capture [--netns] [variant flags]\`, the flags of each variant in run.sh. Regenerate:"
  echo "\`BATCH=$BATCH results/linkage-packets/run.sh\` (BIN=$BIN here)."
  echo
}

if [ "$BATCH" = default ]; then
  OUT=target/linkage-packets-default
  [ -z "${VARIANTS:-}" ] && rm -rf "$OUT"
  mkdir -p "$OUT"
  # before: the code before the issue "Unlinkable by default" (shared runtime, no delays, no grid);
  # threads: each VN on its own thread and runtime, chunks sent when ready; after: the defaults (the
  # threads and the adaptive chunk grid, `node/src/net/chunk_slots.rs`).
  for where in lo netns; do
    net=""; [ "$where" = netns ] && net=--netns
    # shellcheck disable=SC2086
    runp "$OUT" "$where-before" $net --release-delay-us 0 --shared-vn-threads --no-chunk-slots
    # shellcheck disable=SC2086
    runp "$OUT" "$where-threads" $net --no-chunk-slots
    # shellcheck disable=SC2086
    runp "$OUT" "$where-after" $net
  done
  if ip netns list | grep -q '^stn'; then echo "namespaces left behind:"; ip netns list | grep '^stn'; fi
  {
    header
    # shellcheck disable=SC2046
    python3 "$HERE/summarise.py" "$OUT" $(for v in lo-before lo-threads lo-after netns-before netns-threads netns-after; do
      [ -d "$OUT/$v" ] && echo "$v"; done)
    echo
    echo "Load average (1/5/15 min) at the start of each run:"
    echo
    sed 's/^/    /' "$OUT/load.txt"
  } > "$HERE/${SUMMARY:-summary-default.md}"
  cat "$HERE/${SUMMARY:-summary-default.md}"
  exit 0
fi

if [ "$BATCH" = levers ]; then
  # Each lever alone and together, without the chunk grid unless named (summary-levers.md).
  OUT=target/linkage-packets-levers
  [ -z "${VARIANTS:-}" ] && rm -rf "$OUT"
  mkdir -p "$OUT"
  runp "$OUT" lo-before --release-delay-us 0 --shared-vn-threads --no-chunk-slots
  runp "$OUT" lo-threads --no-chunk-slots
  runp "$OUT" lo-delay-only --shared-vn-threads --release-delay-us 4000 --no-chunk-slots
  runp "$OUT" lo-delay-16ms-only --shared-vn-threads --release-delay-us 16000 --no-chunk-slots
  runp "$OUT" lo-threads-delay-1ms --release-delay-us 1000 --no-chunk-slots
  runp "$OUT" lo-threads-delay-4ms --release-delay-us 4000 --no-chunk-slots
  runp "$OUT" netns-threads-delay-4ms --netns --release-delay-us 4000 --no-chunk-slots
  runp "$OUT" lo-slot-40ms --chunk-slot-ms 40
  runp "$OUT" lo-slot-80ms --chunk-slot-ms 80
  runp "$OUT" netns-slot-80ms --netns --chunk-slot-ms 80
  runp "$OUT" lo-grid
  if ip netns list | grep -q '^stn'; then echo "namespaces left behind:"; ip netns list | grep '^stn'; fi
  {
    header
    python3 "$HERE/summarise.py" "$OUT" lo-before lo-threads lo-delay-only lo-delay-16ms-only \
      lo-threads-delay-1ms lo-threads-delay-4ms netns-threads-delay-4ms
    echo
    python3 "$HERE/summarise.py" "$OUT" lo-threads lo-slot-40ms lo-slot-80ms netns-slot-80ms lo-grid
    echo
    sed 's/^/    /' "$OUT/load.txt"
  } > "$HERE/summary-levers.md"
  cat "$HERE/summary-levers.md"
  exit 0
fi

if [ "$BATCH" = cost ]; then
  OUT=target/linkage-packets-cost
  rm -rf "$OUT"; mkdir -p "$OUT"
  DATA=${DATA:-../shared/data/movielens/ml-latest-small}
  for rep in $(seq 1 "${REPEAT:-3}"); do
    for v in before threads after; do
      case $v in
        before) args="--release-delay-us 0 --shared-vn-threads --no-chunk-slots" ;;
        threads) args="--no-chunk-slots" ;;
        after) args="" ;;
      esac
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      # shellcheck disable=SC2086
      "$BIN/testnet" --mode inproc --nodes 8 --vns 2 --degree 4 --rounds 51 --dataset movielens \
        --data-dir "$DATA" $args --out "$OUT/$v/rep-$rep" --plain > /dev/null
      echo "$v $rep $load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
    done
  done
  python3 "$HERE/summarise_cost.py" "$OUT" "$BIN" > "$HERE/summary-cost.md"
  cat "$HERE/summary-cost.md"
  exit 0
fi

# BATCH=lan: the batch of issue 13.
[ -z "${VARIANTS:-}" ] && rm -rf "$OUT"
run() {  # name, extra args
  local name=$1; shift
  if [ -n "${VARIANTS:-}" ] && [[ " $VARIANTS " != *" $name "* ]]; then return; fi
  for seed in 1 2 3; do
    nice -n 10 "$BIN/testnet" --mode procs --nodes 8 --vns 4 --degree 4 --rounds 20 --seed "$seed" \
      --timing lan --netns --observe-timing --capture --out "$OUT/$name/seed-$seed" --plain --no-chunk-slots \
      "$@" > /dev/null
  done
}
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
