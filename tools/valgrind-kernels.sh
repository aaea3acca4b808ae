#!/usr/bin/env bash
# Runs the unsafe kernels' tests (GEMM packed path, strided copy, concat, pad,
# index, attention) under valgrind memcheck at reduced sizes: any invalid
# read or write, use of uninitialised memory or bad free fails the run.
#
# Needs valgrind (Debian/Ubuntu: `apt-get install valgrind`). The test
# binaries are built in release mode (the same code CI tests), without
# AVX-512 (valgrind does not emulate it; the kernels detect that at run time
# and take their AVX2 paths). FUCINA_REDUCED_SIZES shrinks the problems so
# the whole run stays within a few minutes; FUCINA_GEMM=packed forces the
# packed GEMM (the one with hand-written pointer arithmetic).
#
# Usage: tools/valgrind-kernels.sh            (from any directory)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind not found: install it (apt-get install valgrind)" >&2
    exit 1
fi

# test binary -> extra arguments for its harness ("" runs the whole binary).
# matmul: the f32 variants only (the f64 ones run the same pointer arithmetic
# with another element width, at twice valgrind's cost).
declare -A FILTER=(
    [matmul]="--skip _f64"
    [concat]=""
    [index]=""
    [attention]=""
    [views]=""
    [context]=""
)
# Tests that re-execute the binary or only measure threads, not memory
# (valgrind runs one thread at a time, so "more than one thread took chunks"
# cannot hold under it).
SKIPS=(--skip every_gemm_path_passes_this_suite --skip bitwise_equal_across_threads
    --skip for_chunks_uses_the_team_and_runs_every_chunk)

echo "==> building the kernel test binaries"
json=$(cargo test --release -p fucina-core --no-run --message-format=json 2>/dev/null)

export FUCINA_REDUCED_SIZES=1 FUCINA_GEMM=packed FUCINA_NUM_THREADS=2
status=0
for name in "${!FILTER[@]}"; do
    exe=$(printf '%s\n' "$json" \
        | grep "\"kind\":\[\"test\"\]" \
        | grep "\"name\":\"$name\"" \
        | grep -o '"executable":"[^"]*"' \
        | sed 's/"executable":"\(.*\)"/\1/' | head -n1)
    if [[ -z "$exe" ]]; then
        echo "test binary for $name not found" >&2
        exit 1
    fi
    echo "==> valgrind $name"
    start=$SECONDS
    if ! valgrind --quiet --error-exitcode=1 --track-origins=no \
        "$exe" --test-threads=1 -q "${SKIPS[@]}" ${FILTER[$name]}; then
        echo "valgrind reported errors (or a test failed) in $name" >&2
        status=1
    fi
    echo "    ($((SECONDS - start)) s)"
done
if [[ $status -eq 0 ]]; then
    echo "==> valgrind: 0 errors in the kernel tests"
fi
exit $status
