"""Summary of results/gpu/run.sh's measurements: median and range over the repeats, GPU against CPU.

    python3 results/gpu/summarise.py results/gpu/runs     # writes runs/summary.md and prints it
"""

import statistics
import sys
from collections import defaultdict
from pathlib import Path


def spread(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def main(out: Path) -> None:
    lines = [f"# GPU figures ({out})", ""]
    machine = (out / "machine.txt").read_text().strip().splitlines()
    lines += [f"Machine: {'; '.join(machine)}", ""]

    rate = defaultdict(list)
    params = {}
    for row in (out / "throughput.tsv").read_text().splitlines():
        f = row.split("\t")
        if len(f) < 7 or f[1] == "device":
            continue
        _, device, model, n, _, _, sps = f
        rate[(model, "cpu" if device == "cpu" else "gpu")].append(float(sps))
        params[model] = int(n)
    lines += [
        "## Local training throughput (samples/s, batches of 32, 3x32x32 images)",
        "",
        "| model | parameters | GPU, median (min-max) | CPU, median (min-max) | GPU / CPU |",
        "|---|---|---|---|---|",
    ]
    for model in sorted(params):
        gpu, cpu = rate[(model, "gpu")], rate[(model, "cpu")]
        ratio = statistics.median(gpu) / statistics.median(cpu) if gpu and cpu else float("nan")
        lines.append(
            f"| {model} | {params[model]:,} | {spread(gpu) if gpu else '-'} | {spread(cpu) if cpu else '-'} | {ratio:.0f}x |"
        )

    lines += ["", "## GPU against CPU, same start, same batches (device_agrees)", "", "```"]
    lines += [l for l in (out / "agree.txt").read_text().splitlines() if "steps, max" in l or "test result" in l]
    lines += ["```", ""]

    wall, acc = defaultdict(list), defaultdict(list)
    for row in (out / "sim.tsv").read_text().splitlines():
        _, dev, secs, a = row.split("\t")
        wall[dev].append(float(secs))
        acc[dev].append(float(a))
    lines += [
        "## Simulation: 64 nodes x 4 VNs, r = 4, LeNet, synthetic 3x32x32 images",
        "",
        "| device | wall s, median (min-max) | final accuracy, per run |",
        "|---|---|---|",
    ]
    for dev in sorted(wall):
        lines.append(f"| {dev} | {spread(wall[dev])} | {', '.join(f'{a:.4f}' for a in acc[dev])} |")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/gpu/runs"))
