#!/usr/bin/env python3
"""The VN threads' and the chunk grid's round-time cost (run.sh, BATCH=cost). usage: summarise_cost.py OUT_DIR BIN"""
import json, pathlib, statistics as st, sys
out = pathlib.Path(sys.argv[1])
loads = {}
for l in (out / "load.txt").read_text().splitlines():
    us, rep, *rest = l.split()
    loads[(us, rep)] = rest[0] + " → " + rest[3]
print("| variant | mean round s per run | mean | neighbours / VN | final RMSE | load (1 min) before → after |")
print("|---|---|---|---|---|---|")
for name in ["before", "threads", "after"]:
    if not (out / name).is_dir():
        continue
    d = out / name
    us = name
    rs = [json.loads(p.read_text()) for p in sorted(d.glob("rep-*/summary.json"))]
    rounds = [r["mean_round_seconds"] for r in rs]
    rmse = [r.get("final_metric") for r in rs]
    print(f"| {name} | {' '.join(f'{x:.3f}' for x in rounds)} | {st.mean(rounds):.3f} | "
          f"{' '.join('%.3f' % r['neighbours_per_vn'] for r in rs)} | "
          f"{' '.join('–' if x is None else f'{x:.4f}' for x in rmse)} | "
          f"{'; '.join(v for (u, _), v in sorted(loads.items()) if u == us)} |")
print()
print(f"MovieLens MF, 8 RNs, k = 2, r = 4, 51 rounds, inproc TCP (the rounds bench's setting), built with {sys.argv[2]};")
print("variants interleaved. Regenerate: `BATCH=cost results/linkage-packets/run.sh`.")
