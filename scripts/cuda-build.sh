#!/usr/bin/env bash
# Build `node` and `testnet` with `--features cuda` on any Linux x86_64 machine, GPU or not, without a system
# CUDA toolkit: the compiler, headers and libraries come from NVIDIA's PyPI wheels.
#
#   scripts/cuda-build.sh                 # release build of node + testnet into target/cuda/release
#   CUDA_COMPUTE_CAP=80 scripts/cuda-build.sh   # A100; the default 90 is H100/H200
#   scripts/cuda-build.sh --env           # only print the environment the binaries need at run time
#   scripts/cuda-build.sh --build-env     # only print the environment for another cargo command with
#                                         # --features cuda (after a first full run installed the toolkit)
#
# What it does, in order (each step is skipped when already done):
#  1. pip-installs the CUDA 13.0 toolkit wheels (NVIDIA's `cuda-toolkit` package with the extras nvcc, crt,
#     nvvm, cudart, nvrtc, cublas, curand, cccl) into $CUDA_TOOLKIT_DIR/wheels (default target/cuda-toolkit,
#     so `cargo clean` removes it). They install one toolkit tree, wheels/nvidia/cu13, laid out as nvcc expects
#     (bin/, include/, lib/, nvvm/). CUDA 12's wheels cannot do this: their nvidia-cuda-nvcc-cu12 carries ptxas
#     and libnvvm but neither nvcc nor cicc;
#  2. gives the libraries the unversioned `lib*.so` names the linker looks for;
#  3. writes a link-time stub of the driver library, lib/stubs/libcuda.so (soname libcuda.so.1), with
#     every driver entry point cudarc declares, each returning CUDA_ERROR_NO_DEVICE. This is what a system
#     toolkit's own stubs/libcuda.so is for: candle links the driver dynamically, and the driver comes with the
#     GPU, not with the toolkit. At run time the real libcuda.so.1 of the NVIDIA driver is loaded; the stub is
#     never on the run-time library path (`--env`);
#  4. runs `cargo build --release -p testnet -p node --features cuda` into its own target folder, target/cuda
#     (so the CPU binaries in target/release stay as they are; about 25 minutes from cold on 2 cores, most of
#     it candle's kernels), with CUDA_HOME, PATH and CUDA_COMPUTE_CAP set (the compute capability is given,
#     since a machine without a GPU cannot detect it);
#  5. checks what it built: the binaries need libcuda.so.1 and the wheels' libraries, and `testnet
#     --device cuda:0` either trains on the GPU or, on a machine without a driver (with the stub standing in
#     for it), says why and trains on the CPU.
#
# The GPU machine needs an NVIDIA driver for CUDA 13 (580 or newer): candle compiles its kernels to PTX, which
# the driver compiles again when they load, and PTX from a newer nvcc needs a newer driver.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
DIR=${CUDA_TOOLKIT_DIR:-$REPO/target/cuda-toolkit}
VERSION=13.0.2
CAP=${CUDA_COMPUTE_CAP:-90}
TARGET=${CUDA_TARGET_DIR:-$REPO/target/cuda}
BIN=$TARGET/release

WHEELS=$DIR/wheels
ROOT=$WHEELS/nvidia/cu13
# The libraries the binaries load at run time: the toolkit's lib/, never lib/stubs.
runtime_path() {
    echo "$ROOT/lib"
}

if [[ "${1:-}" == "--env" ]]; then
    echo "export LD_LIBRARY_PATH=$(runtime_path)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    exit 0
fi
if [[ "${1:-}" == "--build-env" ]]; then
    [[ -x "$ROOT/bin/nvcc" ]] || { echo "no toolkit in $ROOT yet: run scripts/cuda-build.sh first" >&2; exit 1; }
    echo "export CUDA_HOME=$ROOT PATH=$ROOT/bin:\$PATH CUDA_COMPUTE_CAP=$CAP CUDARC_CUDA_VERSION=13000"
    echo "export LD_LIBRARY_PATH=$(runtime_path)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    exit 0
fi

step() { echo "== $*" >&2; }

# 1. The wheels.
if [[ ! -f "$WHEELS/.installed-$VERSION" ]]; then
    step "installing the CUDA $VERSION toolkit wheels into $WHEELS"
    rm -rf "$WHEELS"
    python3 -m pip install --quiet --disable-pip-version-check --target "$WHEELS" \
        "cuda-toolkit[nvcc,crt,nvvm,cudart,nvrtc,cublas,curand,cccl]==$VERSION"
    touch "$WHEELS/.installed-$VERSION"
fi
[[ -x "$ROOT/bin/nvcc" ]] || { echo "no nvcc in $ROOT/bin: the wheels' layout changed" >&2; exit 1; }

# 2. The linker asks for libcublas.so; the wheels ship libcublas.so.13 and the like.
for so in "$ROOT"/lib/lib*.so.*; do
    base=${so%%.so.*}.so
    [[ -e "$base" ]] || ln -s "$(basename "$so")" "$base"
done
"$ROOT/bin/nvcc" --version | tail -2 >&2

# 3. The driver's link-time stub, from the entry points of the cudarc that Cargo.lock resolves to.
if [[ ! -f "$ROOT/lib/stubs/libcuda.so" ]]; then
    step "writing the libcuda link stub"
    CUDARC=$(cargo metadata --format-version 1 --locked --features models/cuda | python3 -c '
import json, sys, os
m = json.load(sys.stdin)
paths = [p["manifest_path"] for p in m["packages"] if p["name"] == "cudarc"]
if not paths: sys.exit("cudarc is not in Cargo.lock")
print(os.path.dirname(paths[0]))')
    mkdir -p "$ROOT/lib/stubs"
    grep -ho 'load::<_F>("cu[A-Za-z0-9_]*")' "$CUDARC/src/driver/sys/mod.rs" \
        | sed -E 's/.*"(cu[A-Za-z0-9_]*)".*/\1/' | sort -u \
        | awk 'BEGIN { print "/* Link-time stub of the CUDA driver: never loaded at run time. */" }
               { printf "int %s(void) { return 100; /* CUDA_ERROR_NO_DEVICE */ }\n", $1 }' \
        > "$ROOT/lib/stubs/libcuda-stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$ROOT/lib/stubs/libcuda.so" "$ROOT/lib/stubs/libcuda-stub.c"
    echo "$(grep -c '^int' "$ROOT/lib/stubs/libcuda-stub.c") driver entry points stubbed" >&2
fi

# 4. The build.
step "cargo build --release -p testnet -p node --features cuda (compute capability $CAP)"
export CUDA_HOME=$ROOT
export PATH=$ROOT/bin:$PATH
export CUDA_COMPUTE_CAP=$CAP
export CUDARC_CUDA_VERSION=13000
cargo build --release --target-dir "$TARGET" -p testnet -p node --features cuda

# 5. What it built.
LD=$(runtime_path)
for bin in node testnet; do
    step "$BIN/$bin links"
    LD_LIBRARY_PATH=$LD ldd "$BIN/$bin" | grep -E 'libcuda|libcublas|libcurand|libnvrtc' >&2
done
step "a one-round run asking for cuda:0"
smoke=(--mode sim --nodes 2 --vns 2 --degree 1 --rounds 1 --device cuda:0 --out "$DIR/smoke")
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    LD_LIBRARY_PATH=$LD "$BIN/testnet" "${smoke[@]}" > "$DIR/smoke.log" 2>&1
else
    # No driver here, so the binaries cannot even load (no libcuda.so.1). For this one check the stub stands
    # in for the driver: the binary starts, the stub answers "no device", and the node must say so and train
    # on the CPU.
    fake=$(mktemp -d)
    ln -s "$ROOT/lib/stubs/libcuda.so" "$fake/libcuda.so.1"
    LD_LIBRARY_PATH=$fake:$LD "$BIN/testnet" "${smoke[@]}" > "$DIR/smoke.log" 2>&1
    rm -rf "$fake"
    grep -q 'training on the CPU instead' "$DIR/smoke.log" \
        || { echo "the CPU fallback did not show: see $DIR/smoke.log" >&2; exit 1; }
fi
grep -E 'WARN|accuracy|^[0-9]+ ' "$DIR/smoke.log" | head -8 >&2 || true
echo "built: $BIN/node and $BIN/testnet with the CUDA $VERSION toolkit." >&2
echo "run them with: eval \"\$(scripts/cuda-build.sh --env)\"" >&2
