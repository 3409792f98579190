#!/usr/bin/env bash
# Fuzz campaign: every target in fuzz/fuzz_targets for RUNS executions (default 10^7) each, from a seed corpus
# of valid encodings, then one line per target: executions, crashes, coverage (libFuzzer's final `cov:` =
# covered edges and `ft:` = features), corpus size and wall time.
#
#   fuzz/run.sh                      # all targets, 10^7 executions each (about 4 min on one free core)
#   RUNS=100000 fuzz/run.sh chunk_frame   # a quick smoke run of one target
#   nice -n 10 fuzz/run.sh           # on a shared machine
#
# Toolchain: the *stable* toolchain with RUSTC_BOOTSTRAP=1, which lets stable rustc take the `-Z` sanitizer
# and coverage flags cargo-fuzz passes (a fresh machine has no nightly; set FUZZ_TOOLCHAIN=nightly to use
# one). cargo-fuzz is installed from crates.io if missing (CARGO_FUZZ_VERSION, default 0.13.2). Targets run
# with AddressSanitizer (cargo-fuzz's default) and debug assertions (integer overflow panics), release mode.
#
# Environment: RUNS (executions per target), FRESH=1 (empty each target's corpus first; otherwise
# fuzz/corpus/<target> keeps growing across runs), FUZZ_TOOLCHAIN, CARGO_FUZZ_VERSION.
# Outputs (git-ignored): fuzz/corpus/<target> (corpus), fuzz/seeds/<target> (generated seeds),
# fuzz/artifacts/<target> (crashing inputs), fuzz/logs/<target>.log (libFuzzer's output).
# Exit status: 0 when no target crashed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-10000000}"
FUZZ_TOOLCHAIN="${FUZZ_TOOLCHAIN:-stable}"
CARGO_FUZZ_VERSION="${CARGO_FUZZ_VERSION:-0.13.2}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
echo "toolchain: $(cargo "+$FUZZ_TOOLCHAIN" --version) / $(rustc "+$FUZZ_TOOLCHAIN" --version); $(cargo fuzz --version)" >&2

# Seeds: valid encodings of every message (protocol/examples/fuzz_seeds.rs), rewritten on every run.
rm -rf fuzz/seeds
cargo run -q -p protocol --example fuzz_seeds -- fuzz/seeds

FLAGS=(-O --debug-assertions)
cargo "+$FUZZ_TOOLCHAIN" fuzz build "${FLAGS[@]}"

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+$FUZZ_TOOLCHAIN" fuzz list)
fi

mkdir -p fuzz/logs
failed=0
summary=()
for t in "${targets[@]}"; do
    [ "${FRESH:-0}" = 1 ] && rm -rf "fuzz/corpus/$t"
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    seeds="fuzz/seeds/$t"
    [ -d "$seeds" ] || { mkdir -p "$seeds"; echo "warning: no seeds for $t" >&2; }
    before=$(find "fuzz/artifacts/$t" -type f | wc -l)
    echo "== $t: $RUNS executions" >&2
    start=$(date +%s)
    rc=0
    # The first corpus directory receives new inputs; the seeds are read only.
    cargo "+$FUZZ_TOOLCHAIN" fuzz run "${FLAGS[@]}" "$t" "fuzz/corpus/$t" "$seeds" -- \
        -runs="$RUNS" -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1 || rc=$?
    wall=$(($(date +%s) - start))
    after=$(find "fuzz/artifacts/$t" -type f | wc -l)
    crashes=$((after - before))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "fuzz/logs/$t.log" | tail -1)
    last=$(grep -E '^#[0-9]+' "fuzz/logs/$t.log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        failed=1
        echo "!! $t exited with $rc; new artifacts in fuzz/artifacts/$t; see fuzz/logs/$t.log" >&2
        [ "$crashes" -eq 0 ] && crashes="? (exit $rc)"
    fi
    summary+=("$(printf '%-12s %12s %8s %6s %6s %10s %7ss' "$t" "${execs:-?}" "$crashes" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$wall")")
done

printf '%-12s %12s %8s %6s %6s %10s %8s\n' target executions crashes cov ft corpus wall
printf '%s\n' "${summary[@]}"
exit "$failed"
