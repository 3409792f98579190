#!/usr/bin/env bash
# The live view's cost: the default run (`testnet`, 8 nodes × 4 VNs, 20 rounds, inproc) without the view,
# and with `--ui` while a scraper reads `/metrics` every 0.2 s and a client holds `/events` open, RUNS of
# each, interleaved. Writes runs/<variant>-<i>/ and summary.md. Then (BROWSER=1, needs chromium and
# `npm install` here) the real-browser check, which refreshes the screenshots.
#
#   results/live-view/run.sh            # RUNS=3
#   RUNS=5 BROWSER=1 results/live-view/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
RUNS=${RUNS:-3}
cargo build -p testnet
bin=target/debug/testnet
runs="$here/runs"
rm -rf "$runs"
mkdir -p "$runs"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

for i in $(seq 1 "$RUNS"); do
  echo "run $i/$RUNS: plain"
  "$bin" --plain --out "$runs/plain-$i" > "$runs/plain-$i.log" 2>&1

  echo "run $i/$RUNS: --ui with a scraper and an event-stream client"
  port=$(free_port)
  "$bin" --plain --ui "127.0.0.1:$port" --out "$runs/ui-$i" > "$runs/ui-$i.log" 2>&1 &
  net=$!
  until curl -sf "http://127.0.0.1:$port/metrics" > /dev/null; do sleep 0.05; done
  curl -sN "http://127.0.0.1:$port/events" > "$runs/ui-$i.events" &
  stream=$!
  ( while curl -sf "http://127.0.0.1:$port/metrics" -o "$runs/ui-$i.scrape"; do
      mv "$runs/ui-$i.scrape" "$runs/ui-$i.metrics"; sleep 0.2; done ) &
  scraper=$!
  # The view stays up after the run until Ctrl-C: wait for the report, then send it.
  until grep -q "live view still at" "$runs/ui-$i.log"; do sleep 0.2; done
  kill -INT "$net"
  wait "$net" || true
  kill "$scraper" "$stream" 2>/dev/null || true
  wait "$scraper" "$stream" 2>/dev/null || true
done

python3 - "$runs" "$RUNS" > "$here/summary.md" <<'PY'
import json, os, statistics, sys
runs, n = sys.argv[1], int(sys.argv[2])
def load(v, i):
    s = json.load(open(os.path.join(runs, f"{v}-{i}", "summary.json")))
    s = s[0] if isinstance(s, list) else s
    return s["mean_round_seconds"], s["wall_seconds"], s["neighbours_per_vn"], s["final_metric"]
print("# The live view's cost\n")
print("The default run (`testnet`: inproc, 8 nodes × 4 VNs, r = 4, 20 rounds, debug build), without the view")
print("(`plain`) and with `--ui` while a scraper reads `/metrics` every 0.2 s and a client holds `/events`")
print(f"open (`ui`), {n} runs of each, interleaved. Regenerate: `RUNS={n} results/live-view/run.sh`.\n")
print("| variant | mean round (s): min / median / max | wall (s): median | neighbours per VN: median | final accuracy: median |")
print("|---|---|---|---|---|")
for v in ("plain", "ui"):
    rows = [load(v, i) for i in range(1, n + 1)]
    r = sorted(x[0] for x in rows)
    print(f"| {v} | {r[0]:.3f} / {statistics.median(r):.3f} / {r[-1]:.3f} | "
          f"{statistics.median(x[1] for x in rows):.1f} | {statistics.median(x[2] for x in rows):.2f} | "
          f"{statistics.median(x[3] for x in rows):.4f} |")
print()
print("Each run: " + ", ".join(
    f"{v}-{i} {load(v, i)[0]:.3f}" for i in range(1, n + 1) for v in ("plain", "ui")) + " (mean round, s).")
PY
cat "$here/summary.md"

if [ "${BROWSER:-0}" = 1 ]; then
  (cd "$here" && npm install --no-audit --no-fund)
  cargo test -p testnet --test live_browser -- --ignored
fi
