"""Tabulates results/churn-procs/{clean,kill,pause}/seed-*/summary.json (written by run.sh) as markdown."""
import json, statistics, sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/churn-procs")

def runs(kind):
    for p in sorted((out / kind).glob("seed-*/summary.json")):
        s = json.loads(p.read_text())
        yield p.parent.name, (s[0] if isinstance(s, list) else s)

def spread(xs):
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"

def own_rounds(x):
    """A restarted victim's own rounds from its first one back to the one it was in step again (1: its first
    round back was in step), from its per-round lags; '-' if it never rejoined or was not restarted."""
    first, back = x.get("first_round_after_restart"), x.get("rejoined_at_round")
    if first is None or back is None:
        return "-"
    return str(sum(1 for r, _ in x["rounds_behind_the_others_per_round"] if first <= r <= back))

print("| run | seed | final metric (mean over nodes) | victims' last round | victims skipped | victims rejoined after (network rounds since the restart / SIGCONT) | victims' own rounds back until in step | metrics lines lost / duplicated | others' rounds completed / skipped (min / max) | others' slowest exchange (s) |")
print("|---|---|---|---|---|---|---|---|---|---|")
finals = {}
for kind in ("clean", "kill", "pause"):
    for seed, s in runs(kind):
        finals.setdefault(kind, []).append(s["final_metric"])
        c = s.get("churn")
        if not c:
            print(f"| {kind} | {seed} | {s['final_metric']:.3f} | | | | | | {s['rounds_completed']} | |")
            continue
        v = c["killed"] + c["paused"]
        last = ",".join(str(x["last_round"]) for x in v)
        skipped = ",".join(str(x["skipped_rounds"]) for x in v)
        rejoin = ",".join(str(x["rejoin_rounds"]) for x in v)
        own = ",".join(own_rounds(x) for x in v) if c["killed"] else "—"
        lost = ",".join(f"{x.get('metrics_lines_lost', '-')}/{x.get('metrics_lines_duplicated', '-')}" for x in v)
        others = c["others"]
        done = min(o["rounds_completed"] for o in others)
        skip = max(o.get("skipped_rounds", 0) for o in others)
        slow = max(o["slowest_exchange_secs"] for o in others)
        print(f"| {kind} | {seed} | {s['final_metric']:.3f} | {last} | {skipped} | {rejoin} | {own} | {lost} | {done} / {skip} | {slow:.2f} |")
print()
print("Final metric, mean ± sample std over seeds:", ", ".join(f"{k} {spread(v)}" for k, v in finals.items()))
