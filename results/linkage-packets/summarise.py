#!/usr/bin/env python3
"""Per-feature table of the packet attack: one column per variant, each cell the pooled sibling-linkage ROC-AUC
(mean ± sample std over seeds, then the seeds), and the best feature of each run.

usage: summarise.py OUT_DIR VARIANT... (each VARIANT a directory OUT_DIR/VARIANT/seed-*/summary.json)
"""
import json
import pathlib
import statistics as st
import sys

out = pathlib.Path(sys.argv[1])
variants = sys.argv[2:]


def ms(xs, digits=3):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}"
    return f"{st.mean(xs):.{digits}f} ± {st.stdev(xs):.{digits}f}"


runs = {}
for v in variants:
    seeds = sorted((out / v).glob("seed-*/summary.json"))
    runs[v] = [json.loads(p.read_text()) for p in seeds]

features = []
for v in variants:
    for r in runs[v]:
        for f in r.get("linkage_packets", {}).get("features", []):
            if f["name"] not in features:
                features.append(f["name"])

print("| feature | " + " | ".join(variants) + " |")
print("|---|" + "---|" * len(variants))
for name in features:
    cells = []
    for v in variants:
        aucs = []
        for r in runs[v]:
            f = next((f for f in r["linkage_packets"]["features"] if f["name"] == name), None)
            aucs.append(f and f["auc_pooled"])
        seeds = " ".join("–" if a is None else f"{a:.3f}" for a in aucs)
        cells.append(f"{ms(aucs)} ({seeds})")
    print(f"| {name} | " + " | ".join(cells) + " |")
best = []
for v in variants:
    b = [r["linkage_packets"].get("best") or {} for r in runs[v]]
    best.append(" ".join(f"{x.get('name', '–')} {x.get('auc_pooled') or 0:.3f}" for x in b))
print("| **best feature per seed** | " + " | ".join(best) + " |")
print("| best, mean over seeds | " + " | ".join(
    ms([(r["linkage_packets"].get("best") or {}).get("auc_pooled") for r in runs[v]]) for v in variants) + " |")


def held_out(rs):
    """Each seed scored by the feature that was best on the other seeds (mean pooled AUC there): the best
    feature chosen without looking at the seed it is scored on, so not inflated by the choice."""
    out = []
    for i, r in enumerate(rs):
        others = [o for j, o in enumerate(rs) if j != i]
        if not others:
            return []
        means = {}
        for f in r["linkage_packets"]["features"]:
            xs = [next((g["auc_pooled"] for g in o["linkage_packets"]["features"] if g["name"] == f["name"]), None)
                  for o in others]
            if f["auc_pooled"] is not None and all(x is not None for x in xs):
                means[f["name"]] = st.mean(xs)
        if means:
            name = max(means, key=means.get)
            out.append((name, next(f["auc_pooled"] for f in r["linkage_packets"]["features"] if f["name"] == name)))
    return out


print("| best feature chosen on the other seeds, scored on this one (per seed) | " + " | ".join(
    " ".join(f"{n} {a:.3f}" for n, a in held_out(runs[v])) for v in variants) + " |")
print("| ... mean over seeds | " + " | ".join(ms([a for _, a in held_out(runs[v])]) for v in variants) + " |")


def chance(v, key):
    return [(r["linkage_packets"].get("chance") or {}).get(key) for r in runs[v]]


print("| chance floor: best feature under random groupings, mean (per seed) | " + " | ".join(
    f"{ms(chance(v, 'best_auc_mean'))} ({' '.join('–' if x is None else f'{x:.3f}' for x in chance(v, 'best_auc_mean'))})"
    for v in variants) + " |")
print("| chance floor: 95th percentile (per seed) | " + " | ".join(
    f"{ms(chance(v, 'best_auc_p95'))} ({' '.join('–' if x is None else f'{x:.3f}' for x in chance(v, 'best_auc_p95'))})"
    for v in variants) + " |")
print("| real best's permutation p-value (per seed) | " + " | ".join(
    " ".join('–' if x is None else f'{x:.3f}' for x in chance(v, 'best_p_value')) for v in variants) + " |")
print("| neighbours / VN | " + " | ".join(ms([r.get("neighbours_per_vn") for r in runs[v]]) for v in variants) + " |")
print("| mean round s | " + " | ".join(ms([r.get("mean_round_seconds") for r in runs[v]]) for v in variants) + " |")
print("| data packets (all seeds) | " + " | ".join(
    str(sum(r["linkage_packets"]["data_packets"] for r in runs[v])) for v in variants) + " |")
print("| unmapped packets | " + " | ".join(
    str(sum(r["linkage_packets"]["unmapped_packets"] for r in runs[v])) for v in variants) + " |")
print("| seeds | " + " | ".join(str(len(runs[v])) for v in variants) + " |")
