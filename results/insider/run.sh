#!/usr/bin/env bash
# Regenerates results/insider/summary.md's tables (issue 44, item 2, "crowding a victim"): a whole rogue node
# (all k = 8 identities of one listed node) against victim node 0, 16 nodes × 8 VNs, r = 8, 50 rounds, seeds
# 1-3, every deviation of `sampling::sim::Rogue` alone and all together, with the overlay's repeat cap
# (as built) and without it (`--repeat-window 0`); then the overlay's quality in honest networks of the same
# size, with and without the cap. Run from the repository root; a few minutes on two cores. The JSON lines
# stay in target/insider/ (out of git).
#
# The "before" column of summary.md (the overlay before the defences) is not regenerated here: it was
# measured on commit 7ae8f78 (the rogue in the simulator, the overlay as it was) with
#   cargo test -p sampling --test crowding -- --ignored --nocapture
set -euo pipefail
cargo build -q -p sampling --examples
OUT=target/insider
mkdir -p "$OUT"
for w in 50 0; do
  target/debug/examples/insider_crowding --seeds 1,2,3 --rounds 50 --repeat-window "$w" > "$OUT/crowding-w$w.jsonl"
  for s in 1 2 3; do
    target/debug/examples/overlay_report --rns 16 --vns 8 --degree 8 --rounds 50 --seed "$s" \
      --repeat-window "$w" 2> /dev/null | tail -1 > "$OUT/quality-w$w-s$s.json"
  done
done
python3 - "$OUT" > results/insider/tables.md <<'PY'
import json, statistics as st, sys, pathlib
out = pathlib.Path(sys.argv[1])
def ms(xs, f="{:.3f}"):
    return (f + " ± " + f).format(st.mean(xs), st.stdev(xs)) if len(xs) > 1 else f.format(xs[0])
print("### Crowding (per round, mean ± sd over seeds 1-3)\n")
print("| variant | hidden walks | repeat cap | rogue / most crowded victim VN | rogue copies | rogue distinct chunks | honest node copies (mean; most) | victim VN-rounds short of r |")
print("|---|---|---|---|---|---|---|---|")
exp = None
for w in (50, 0):
    rows = [json.loads(l) for l in (out / f"crowding-w{w}.jsonl").read_text().splitlines()]
    for v in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == v]
        exp = rs[0]["expected_copies"]
        cap = "on" if w else "off"
        print(f"| {v} | {'yes' if rs[0]['hidden_walks'] else 'no'} | {cap} | {ms([r['rogue_max_vn'] for r in rs])} | "
              f"{ms([r['rogue_copies'] for r in rs], '{:.2f}')} | {ms([r['rogue_chunks'] for r in rs], '{:.2f}')} | "
              f"{ms([r['honest_copies'] for r in rs], '{:.2f}')}; {max(r['honest_max_copies'] for r in rs):.2f} | "
              f"{ms([r['victim_deficient'] for r in rs])} |")
print(f"\nAn honest node's expected share: {exp / 8:.3f} per victim VN and round, {exp:.2f} copies per round; "
      f"the bound (1.5 ×): {1.5 * exp / 8:.3f} and {1.5 * exp:.2f}.\n")
print("### Overlay quality, honest networks (16 × 8 VNs, r = 8, 50 rounds, seeds 1-3)\n")
print("| repeat cap | VN-rounds short of r | λ₂ (uniform r-regular) | fraction received (closed form; for the degrees) |")
print("|---|---|---|---|")
for w in (0, 50):
    q = [json.loads((out / f"quality-w{w}-s{s}.json").read_text()) for s in (1, 2, 3)]
    print(f"| {'on' if w else 'off'} | {ms([x['deficient_fraction'] for x in q], '{:.4f}')} | "
          f"{ms([x['lambda2_mean'] for x in q], '{:.4f}')} ({ms([x['lambda2_uniform_mean'] for x in q], '{:.4f}')}) | "
          f"{ms([x['frac_received_mean'] for x in q], '{:.4f}')} ({q[0]['frac_received_exact']:.4f}; "
          f"{ms([x['frac_received_expected_for_degrees'] for x in q], '{:.4f}')}) |")
PY
echo "wrote results/insider/tables.md"
