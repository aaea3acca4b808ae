#!/usr/bin/env bash
# Side-by-side train-step timing: fucina-bench and torch_workloads.py, interleaved
# (fucina, torch, fucina, torch, ...) so machine noise hits both alike, then a summary:
# per workload, each round's medians and ratio, the median of the per-round medians
# and the ratio of those.
# Usage: tools/bench_train_vs_torch.sh [ROUNDS] [THREADS] [WORKLOADS]
#   env: PYTHON (a python with torch; default python3), STEPS (default 50; tiny runs 20x
#   that, as the torch script does), TORCH_WL (the torch side of the workloads).
#   A venv with torch: python3 -m venv .venv && .venv/bin/pip install torch
#   then PYTHON=.venv/bin/python tools/bench_train_vs_torch.sh
set -euo pipefail
ROUNDS=${1:-5}
THREADS=${2:-2}
WORKLOADS=${3:-tiny,mlp}
STEPS=${STEPS:-50}
PYTHON=${PYTHON:-python3}
TORCH_WL=${TORCH_WL:-$(dirname "$0")/../../shared/reference/torch_workloads.py}
cargo build --release -q -p fucina-benches --bin fucina-bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  ./target/release/fucina-bench --workload "$WORKLOADS" --threads "$THREADS" --steps "$STEPS" --warmup 5 | tee -a "$out"
  "$PYTHON" "$TORCH_WL" --workload "$WORKLOADS" --threads "$THREADS" --steps "$STEPS" --warmup 5 | tee -a "$out"
done
"$PYTHON" - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for wl in dict.fromkeys(r["workload"] for r in rows):
    f = [r["median_ms"] for r in rows if r["workload"] == wl and r["framework"] == "fucina"]
    t = [r["median_ms"] for r in rows if r["workload"] == wl and r["framework"] == "torch"]
    per = [a / b for a, b in zip(f, t)]
    fm, tm = statistics.median(f), statistics.median(t)
    print(f"{wl}: fucina {' / '.join(f'{x:.3f}' for x in f)} ms; torch {' / '.join(f'{x:.3f}' for x in t)} ms")
    print(f"{wl}: per-round ratios {' '.join(f'{x:.2f}' for x in per)}; "
          f"medians fucina {fm:.3f} ms, torch {tm:.3f} ms, ratio {fm / tm:.2f}x "
          f"(median of per-round ratios {statistics.median(per):.2f}x)")
EOF
