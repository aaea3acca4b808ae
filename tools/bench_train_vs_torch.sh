#!/usr/bin/env bash
# Side-by-side train-step timing: fucina-bench and torch_workloads.py, interleaved
# (per round and workload: fucina, then torch, each workload in a process of its own, so
# machine noise hits both alike and each peak RSS is that workload's), then a summary:
# per workload, each round's medians and ratio, the median of the per-round medians
# and the ratio of those, and each side's peak RSS.
# Usage: tools/bench_train_vs_torch.sh [ROUNDS] [THREADS] [WORKLOADS]
#   WORKLOADS: comma-separated, default tiny,mlp,gpt,minilm,gemm; also llama, llama-lora
#   fucina's gpt is timed against torch's `gpt-sdpa` (its fused scaled_dot_product_attention:
#   PyTorch at its best, as issue 28 asks); TORCH_GPT=gpt compares with the explicit-softmax one.
#   env: PYTHON (a python with torch; default python3), STEPS (default 50; tiny runs 20x
#   that, as the torch script does), WARMUP (default 5), TORCH_WL (the torch side of the
#   workloads; default ../shared/reference/torch_workloads.py beside the repository),
#   FUCINA_CACHE (where scripts/fetch-minilm.sh put all-MiniLM-L6-v2; default
#   ~/.cache/fucina). When the MiniLM checkpoint is there, both sides get --minilm-dir
#   (fucina loads the weights; the torch script reads its config.json; same shapes).
#   A venv with torch: python3 -m venv .venv && .venv/bin/pip install torch safetensors
#   then PYTHON=.venv/bin/python tools/bench_train_vs_torch.sh
set -euo pipefail
ROUNDS=${1:-5}
THREADS=${2:-2}
WORKLOADS=${3:-tiny,mlp,gpt,minilm,gemm}
STEPS=${STEPS:-50}
WARMUP=${WARMUP:-5}
PYTHON=${PYTHON:-python3}
TORCH_WL=${TORCH_WL:-$(dirname "$0")/../../shared/reference/torch_workloads.py}
[ -f "$TORCH_WL" ] || { echo "bench_train_vs_torch: $TORCH_WL not found; set TORCH_WL" >&2; exit 2; }
MINILM_DIR="${FUCINA_CACHE:-${HOME:-/nonexistent}/.cache/fucina}/all-MiniLM-L6-v2"
extra=()
if [ -f "$MINILM_DIR/config.json" ] && [ -f "$MINILM_DIR/model.safetensors" ]; then
  extra=(--minilm-dir "$MINILM_DIR")
fi
cargo build --release -q -p fucina-benches --bin fucina-bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  for wl in ${WORKLOADS//,/ }; do
    twl=$wl
    [ "$wl" = gpt ] && twl=${TORCH_GPT:-gpt-sdpa}
    # Each JSON line is tagged with the pair it belongs to (the fucina workload's name).
    ./target/release/fucina-bench --workload "$wl" --threads "$THREADS" --steps "$STEPS" \
      --warmup "$WARMUP" ${extra[@]+"${extra[@]}"} | sed "s/^{/{\"pair\": \"$wl\", /" | tee -a "$out"
    "$PYTHON" "$TORCH_WL" --workload "$twl" --threads "$THREADS" --steps "$STEPS" \
      --warmup "$WARMUP" ${extra[@]+"${extra[@]}"} | sed "s/^{/{\"pair\": \"$wl\", /" | tee -a "$out"
  done
done
"$PYTHON" - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for wl in dict.fromkeys(r["pair"] for r in rows):
    f = [r["median_ms"] for r in rows if r["pair"] == wl and r["framework"] == "fucina"]
    t = [r["median_ms"] for r in rows if r["pair"] == wl and r["framework"] == "torch"]
    tw = next(r["workload"] for r in rows if r["pair"] == wl and r["framework"] == "torch")
    per = [a / b for a, b in zip(f, t)]
    fm, tm = statistics.median(f), statistics.median(t)
    print(f"{wl}: fucina {' / '.join(f'{x:.3f}' for x in f)} ms; torch ({tw}) {' / '.join(f'{x:.3f}' for x in t)} ms")
    print(f"{wl}: per-round ratios {' '.join(f'{x:.2f}' for x in per)}; "
          f"medians fucina {fm:.3f} ms, torch {tm:.3f} ms, ratio {fm / tm:.2f}x "
          f"(median of per-round ratios {statistics.median(per):.2f}x)")
    fr = [r["peak_rss_mb"] for r in rows if r["pair"] == wl and r["framework"] == "fucina"]
    tr = [r["peak_rss_mb"] for r in rows if r["pair"] == wl and r["framework"] == "torch"]
    print(f"{wl}: peak RSS fucina {max(fr):.1f} MB, torch {max(tr):.1f} MB (largest over rounds)")
EOF
