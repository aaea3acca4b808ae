#!/usr/bin/env bash
# The GEMM shapes the transformer workloads run (issue 28), each in the three layouts a
# linear layer uses: forward y = x·Wᵀ (nt: M = tokens, K = in, N = out), dx = dy·W (nn: M =
# tokens, K = out, N = in) and dW = dyᵀ·x (tn: M = out, K = tokens, N = in). Prints one line
# per shape: GFLOP/s (median of STEPS steps) and the share of the FMA peak `fma-peak`
# measures for THREADS threads.
#
#   tools/bench_gemm_shapes.sh [THREADS]        (STEPS=50 WARMUP=5 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
threads=${1:-2}
steps=${STEPS:-50}
warmup=${WARMUP:-5}
cargo build --release -q -p fucina-benches --bin fucina-bench --bin fma-peak
# The widest vector path's line for this thread count (fma-peak prints 512-bit first).
peak=$(target/release/fma-peak "$threads" | awk -v t="$threads" \
    '$0 ~ ", " t " thread" && !done { sub(/.*\(sum /, ""); sub(/\).*/, ""); print; done = 1 }')
echo "FMA peak, $threads thread(s): $peak GFLOP/s ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
# workload tokens in out  (one linear layer each)
shapes="gpt 2048 256 768
gpt 2048 256 256
gpt 2048 256 1024
gpt 2048 1024 256
gpt 2048 256 65
llama 1024 384 384
llama 1024 384 128
llama 1024 384 1024
llama 1024 1024 384
llama 1024 384 8192
minilm 1024 384 384
minilm 1024 384 1536
minilm 1024 1536 384
square 1024 1024 1024"
printf '%-7s %-6s %-16s %10s %7s\n' workload layout MxKxN GFLOP/s peak
while read -r w t i o; do
    for l in nt nn tn; do
        case $l in
            nt) s="${t}x${i}x${o}" ;;
            nn) s="${t}x${o}x${i}" ;;
            tn) s="${o}x${t}x${i}" ;;
        esac
        g=$(target/release/fucina-bench --workload gemm --shape "$s" --layout "$l" \
            --steps "$steps" --warmup "$warmup" --threads "$threads" | tail -n 1 |
            sed 's/.*"gflops": \([0-9.]*\).*/\1/')
        printf '%-7s %-6s %-16s %10s %6.0f%%\n' "$w" "$l" "$s" "$g" "$(echo "100*$g/$peak" | bc -l)"
    done
done <<<"$shapes"
