#!/usr/bin/env bash
# Side-by-side tiny/mlp train-step timing: fucina-bench and torch_workloads.py,
# interleaved (fucina, torch, fucina, torch, ...) so machine load hits both alike.
# Usage: tools/bench_train_vs_torch.sh [ROUNDS] [THREADS]   (needs torch in $PYTHON)
set -euo pipefail
ROUNDS=${1:-3}
THREADS=${2:-2}
PYTHON=${PYTHON:-/work/venv/bin/python}
TORCH_WL=${TORCH_WL:-$(dirname "$0")/../../shared/reference/torch_workloads.py}
cargo build --release -q -p fucina-benches --bin fucina-bench
for r in $(seq "$ROUNDS"); do
  ./target/release/fucina-bench --workload tiny,mlp --threads "$THREADS" --steps 20
  "$PYTHON" "$TORCH_WL" --workload tiny,mlp --threads "$THREADS" --steps 20
done
