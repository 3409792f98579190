#!/usr/bin/env bash
# The GPU figures of the research path: training throughput of LeNet and ResNet-18 on the GPU against the
# CPU, whether the GPU trains the same model as the CPU, and a 64-node simulation training on one GPU beside
# the same run on the CPU.
#
# Two steps, since a GPU machine may have no Rust toolchain and no network:
#
#   results/gpu/run.sh bundle            # on any Linux x86_64 machine: builds with CUDA (scripts/cuda-build.sh)
#                                        # and puts the stripped binaries in gpu-bundle/ (160 MB, CUDA's kernels
#                                        # in each) and gpu-bundle.tar.xz (22 MB, what to copy over)
#   results/gpu/run.sh measure [DIR]     # on the GPU machine, from the repository root with gpu-bundle/ or
#                                        # gpu-bundle.tar.xz in it: writes DIR (default results/gpu/runs) and
#                                        # prints the summary
#
# On 2 cores `bundle` takes about 45 minutes from cold: the binaries, then the example and the test, whose
# dev-dependencies change the features of shared crates, so candle and its kernels are built twice.
#
# `measure` needs the NVIDIA driver for CUDA 13 (580 or newer) and the CUDA 13 libraries (cuBLAS, cuRAND,
# NVRTC): the ones of `scripts/cuda-build.sh --env`, or those of a Python environment's nvidia-* wheels
# (found through python3, as on a machine with PyTorch for CUDA 13), or CUDA_LIBS=dir.
#
# What it runs (REPEAT times each, default 3):
#  - device_throughput (models/examples/device_throughput.rs): --steps STEPS_GPU on cuda:0, STEPS_CPU on the
#    CPU (ResNet-18 trains at a few samples a second on a CPU core);
#  - the ignored test device_agrees (models/tests/device_agrees.rs): 5 SGD steps of each model on both, the
#    parameters within 1e-3 relative;
#  - testnet --mode sim, 64 nodes × 4 VNs, r = 4, LeNet on synthetic 3×32×32 images, ROUNDS rounds, once with
#    --device cuda:0 and once on the CPU, same seed: wall time and the final accuracy of each.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=gpu-bundle

case "${1:-}" in
bundle)
    scripts/cuda-build.sh
    eval "$(scripts/cuda-build.sh --build-env)"
    target=${CUDA_TARGET_DIR:-target/cuda}
    cargo build --release --target-dir "$target" -p models --features cuda --example device_throughput
    # The test binary's path has a hash in it: ask cargo for it.
    test_bin=$(cargo test --release --target-dir "$target" -p models --features cuda --test device_agrees \
        --no-run --message-format json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "device_agrees":
        print(m["executable"])')
    rm -rf "$BUNDLE"
    mkdir -p "$BUNDLE"
    cp "$target/release/testnet" "$target/release/examples/device_throughput" "$BUNDLE/"
    cp "$test_bin" "$BUNDLE/device_agrees"
    strip "$BUNDLE"/*
    git rev-parse HEAD > "$BUNDLE/commit"
    tar -C "$BUNDLE" -cf - . | xz -T0 -6 > "$BUNDLE.tar.xz"
    du -sh "$BUNDLE" "$BUNDLE.tar.xz"
    echo "now, on the GPU machine: results/gpu/run.sh measure"
    ;;
measure)
    out=${2:-results/gpu/runs}
    mkdir -p "$out"
    if [[ ! -x "$BUNDLE/testnet" && -f "$BUNDLE.tar.xz" ]]; then
        mkdir -p "$BUNDLE" && xz -dc "$BUNDLE.tar.xz" | tar -C "$BUNDLE" -xf -
    fi
    [[ -x "$BUNDLE/testnet" ]] || { echo "no $BUNDLE/: run 'results/gpu/run.sh bundle' first" >&2; exit 1; }
    if [[ -n "${CUDA_LIBS:-}" ]]; then
        libs=$CUDA_LIBS
    elif [[ -d target/cuda-toolkit/wheels/nvidia/cu13/lib ]]; then
        libs=$PWD/target/cuda-toolkit/wheels/nvidia/cu13/lib
    else
        libs=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
    fi
    export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    REPEAT=${REPEAT:-3}
    ROUNDS=${ROUNDS:-10}
    STEPS_GPU=${STEPS_GPU:-200}
    STEPS_CPU=${STEPS_CPU:-10}
    {
        echo "commit $(cat "$BUNDLE/commit")"
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        echo "cpus $(nproc)"
    } | tee "$out/machine.txt"
    : > "$out/throughput.tsv"
    for i in $(seq 1 "$REPEAT"); do
        "$BUNDLE/device_throughput" --device cuda:0 --steps "$STEPS_GPU" | sed "s/^/$i\t/" >> "$out/throughput.tsv"
        "$BUNDLE/device_throughput" --device cpu --steps "$STEPS_CPU" | sed "s/^/$i\t/" >> "$out/throughput.tsv"
    done
    # A disagreement is a finding, not the end of the run: it is kept in agree.txt and the summary.
    "$BUNDLE/device_agrees" --ignored --nocapture > "$out/agree.txt" 2>&1 || echo "test result: FAILED" >> "$out/agree.txt"
    cat "$out/agree.txt"
    : > "$out/sim.tsv"
    for i in $(seq 1 "$REPEAT"); do
        for dev in cuda:0 cpu; do
            dir=$(mktemp -d)
            start=$(date +%s%N)
            "$BUNDLE/testnet" --mode sim --nodes 64 --vns 4 --degree 4 --dataset synthetic-images --model lenet \
                --rounds "$ROUNDS" --device "$dev" --out "$dir" > "$dir.log" 2>&1
            end=$(date +%s%N)
            acc=$(python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
last = max(r["round"] for r in rows)
vals = [r["test_metric"] for r in rows if r["round"] == last and r.get("test_metric") is not None]
print(f"{sum(vals) / len(vals):.4f}")' "$dir")
            printf '%s\t%s\t%s\t%s\n' "$i" "$dev" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')" "$acc" \
                | tee -a "$out/sim.tsv"
            grep -i "device" "$dir.log" | head -2 || true
        done
    done
    python3 results/gpu/summarise.py "$out"
    ;;
*)
    sed -n 2,24p "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
