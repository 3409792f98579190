#!/usr/bin/env bash
# The libp2p run of issue 44's crowding goal: six honest `node` processes x 4 VNs (r = 4, 50 rounds on
# 127.0.0.1) and a rogue node of 4 listed identities that proposes itself straight at victim node 0's VNs
# every 10 ms for each of the next rounds, confirms every Accept and withholds its chunks
# (node/tests/rogue_crowding.rs). REPEAT runs (default 3), one JSON line each, into
# target/insider/libp2p.jsonl; the table into results/insider/summary-libp2p.md. About a minute a run.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=target/insider
mkdir -p "$OUT"
: > "$OUT/libp2p.jsonl"
cargo build -q -p node --bin node
for i in $(seq 1 "${REPEAT:-3}"); do
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  cargo test -q -p node --test rogue_crowding -- --ignored --nocapture 2>/dev/null \
    | grep '^{' | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['load']='$load'; print(json.dumps(r))" \
    >> "$OUT/libp2p.jsonl"
done
python3 - "$OUT/libp2p.jsonl" > results/insider/summary-libp2p.md <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def ms(xs, f="{:.3f}"):
    return (f + " ± " + f).format(st.mean(xs), st.stdev(xs)) if len(xs) > 1 else f.format(xs[0])
r0 = rows[0]
print(f"Rogue node crowding a victim over real libp2p: {r0['nodes']} honest node processes × {r0['vns']} VNs, "
      f"r = {r0['degree']}, {r0['rounds']} rounds, a rogue node of {r0['rogue_identities']} identities proposing itself "
      f"straight at victim node 0's VNs every 10 ms and withholding its chunks; {len(rows)} runs, mean ± sd. "
      "Regenerate: `results/insider/run-libp2p.sh` (`cargo test -p node --test rogue_crowding -- --ignored --nocapture`, once per run).\n")
print("| | per run | mean ± sd |")
print("|---|---|---|")
for key, name in [("rogue_most_crowded_victim_vn", "rogue node: neighbour of the most crowded victim VN, per round"),
                  ("rogue_per_victim_vn_round", "rogue node: neighbour of a victim VN, per VN and round"),
                  ("honest_node_expected_share", "an honest node's expected share, r·k/(V − 1)"),
                  ("ratio", "most crowded / honest share (goal ≤ 1.5)"),
                  ("victim_neighbours_per_vn", "victim's neighbours per VN (of r)")]:
    xs = [r[key] for r in rows]
    print(f"| {name} | {' '.join(f'{x:.3f}' for x in xs)} | {ms(xs)} |")
print(f"| rounds skipped by any honest node | {' '.join(str(sum(r['rounds_skipped'])) for r in rows)} | |")
walls = " ".join("%.0f" % r["wall_s"] for r in rows)
print(f"| wall time, s | {walls} | |")
print("\nLoad average (1/5/15 min) at each run's start: " + "; ".join(r["load"] for r in rows))
PY
cat results/insider/summary-libp2p.md
