"""Tabulates results/churn-procs/{clean,kill,pause}/seed-*/summary.json (written by run.sh) as markdown.

Final metrics are each node's own last round (`final_metric_per_node`), averaged over all nodes, over the
victims (the nodes killed or paused; in a clean run the same node indices) and over the others. "Rejoined"
counts the network's rounds (the newest round any node that is not a victim reported) from an event to
the victim's first round reported in step with the others (at most one round behind, with copies)."""
import json, statistics, sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/churn-procs")
KINDS = ("clean", "kill", "kill-3s", "pause", "clean-lookahead-1", "kill-lookahead-1")


def runs(kind):
    for p in sorted((out / kind).glob("seed-*/summary.json")):
        s = json.loads(p.read_text())
        yield p.parent.name, (s[0] if isinstance(s, list) else s)


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"


def mean(xs):
    return statistics.mean(xs) if xs else None


def own_rounds(x):
    """A restarted victim's own rounds from its first one back to the one it was in step again (1: its first
    round back was in step), from its per-round lags; '-' if it never rejoined or was not restarted."""
    first, back = x.get("first_round_after_restart"), x.get("rejoined_at_round")
    if first is None or back is None:
        return "-"
    return str(sum(1 for r, _ in x["rounds_behind_the_others_per_round"] if first <= r <= back))


def since(x, key):
    v = x.get(key)
    if not v:
        return "-"
    return f"{v['network_rounds']} ({v['secs']:.2f} s)"


# Which node indices are victims in each churn kind (from the runs themselves); clean runs are split the
# same way as the kill runs' victims.
victims_of = {}
for kind in ("kill", "kill-3s", "pause", "kill-lookahead-1"):
    for _, s in runs(kind):
        c = s.get("churn") or {}
        victims_of[kind] = sorted(x["node"] for x in c.get("killed", []) + c.get("paused", []))
        break
victims_of["clean"] = victims_of.get("kill", [])
victims_of["clean-lookahead-1"] = victims_of.get("kill-lookahead-1", [])

groups = {k: {"all": [], "victims": [], "others": []} for k in KINDS}
per_node = {k: {"victims": [], "others": []} for k in KINDS}
rejoin_cmd, rejoin_listen, rejoin_cont = {}, {}, []
round_secs = {k: [] for k in KINDS}

print("| run | seed | final metric: all nodes | victims | others | victims' last round | victims skipped "
      "| victims in step after: network rounds since the restart command (s) | since the restarted process "
      "listened (s) | since SIGCONT (s) | victims' own rounds back until in step | metrics lines lost / "
      "duplicated | others' rounds completed / skipped (min / max) | others' slowest exchange (s) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for kind in KINDS:
    for seed, s in runs(kind):
        finals = s.get("final_metric_per_node") or []
        if s.get("mean_round_seconds") is not None:
            round_secs[kind].append(s["mean_round_seconds"])
        vic = victims_of.get(kind, [])
        v_f = [finals[i] for i in vic if i < len(finals) and finals[i] is not None]
        o_f = [f for i, f in enumerate(finals) if i not in vic and f is not None]
        groups[kind]["all"].append(mean(v_f + o_f))
        groups[kind]["victims"].append(mean(v_f))
        groups[kind]["others"].append(mean(o_f))
        per_node[kind]["victims"] += v_f
        per_node[kind]["others"] += o_f
        fm = lambda x: "-" if x is None else f"{x:.3f}"
        head = f"| {kind} | {seed} | {fm(mean(v_f + o_f))} | {fm(mean(v_f))} | {fm(mean(o_f))}"
        c = s.get("churn")
        if not c:
            print(f"{head} | | | | | | | | {s['rounds_completed']} / 0 | |")
            continue
        v = c["killed"] + c["paused"]
        last = ",".join(str(x["last_round"]) for x in v)
        skipped = ",".join(str(x["skipped_rounds"]) for x in v)
        cmd = ", ".join(since(x.get("restart", {}), "in_step_since_restart") for x in c["killed"]) or "—"
        lis = ", ".join(since(x.get("restart", {}), "in_step_since_listening") for x in c["killed"]) or "—"
        cont = ", ".join(since(x, "in_step_since_continue") for x in c["paused"]) or "—"
        for x in c["killed"]:
            r = x.get("restart", {})
            if r.get("in_step_since_restart"):
                rejoin_cmd.setdefault(kind, []).append(r["in_step_since_restart"]["network_rounds"])
            if r.get("in_step_since_listening"):
                rejoin_listen.setdefault(kind, []).append(r["in_step_since_listening"]["network_rounds"])
        for x in c["paused"]:
            if x.get("in_step_since_continue"):
                rejoin_cont.append(x["in_step_since_continue"]["network_rounds"])
        own = ",".join(own_rounds(x) for x in v) if c["killed"] else "—"
        lost = ",".join(f"{x.get('metrics_lines_lost', '-')}/{x.get('metrics_lines_duplicated', '-')}" for x in v)
        others = c["others"]
        done = min(o["rounds_completed"] for o in others)
        skip = max(o.get("skipped_rounds", 0) for o in others)
        slow = max(o["slowest_exchange_secs"] for o in others)
        print(f"{head} | {last} | {skipped} | {cmd} | {lis} | {cont} | {own} | {lost} | {done} / {skip} | {slow:.2f} |")
print()
print("Final metric, mean ± sample std over seeds (each seed: the mean over the group's nodes):")
print()
print("| run | all nodes | victims (clean: the kill run's victim indices) | others |")
print("|---|---|---|---|")
for kind in KINDS:
    g = groups[kind]
    print(f"| {kind} | {spread(g['all'])} | {spread(g['victims'])} | {spread(g['others'])} |")
print()
print("Per node, mean ± sample std over every node of every seed:", ", ".join(
    f"{k} victims {spread(per_node[k]['victims'])} / others {spread(per_node[k]['others'])}" for k in KINDS))
print()
fmt = lambda xs: f"{min(xs)}-{max(xs)} (median {statistics.median(xs)})" if xs else "-"
print("Mean network round (s), mean ± std over seeds:", ", ".join(f"{k} {spread(round_secs[k])}" for k in KINDS))
print()
for kind in rejoin_cmd:
    print(f"Killed nodes in step after (network rounds), {kind}: since the restart command "
          f"{fmt(rejoin_cmd[kind])}; since their process listened {fmt(rejoin_listen.get(kind, []))}.")
print()
print(f"Paused node in step after SIGCONT (network rounds): {fmt(rejoin_cont)}.")
