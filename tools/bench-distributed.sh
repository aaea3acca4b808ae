#!/usr/bin/env bash
# Throughput of data-parallel training on one machine (docs/DISTRIBUTED.md,
# "Measurements"): the ddp_gpt example (WORKLOAD=gpt: the gpt workload of
# reference/torch_workloads.py, global batch 16 x 128 tokens) or the ddp_mlp
# example (WORKLOAD=mlp, the default) with the same global batch as
#   1 process  x 2 threads (batch G),
#   2 processes x 1 thread (batch G/2 each),
#   1 process  x 1 thread (batch G, the baseline),
# for two model sizes, REPS runs each; prints the median samples/s, median
# step time and the gradient averaging's median share of the step (rank 0's
# numbers). Processes are not bound to cores (`--bind-to none`): OpenMPI
# would otherwise pin a 1-rank job, threads and all, to one core.
# Needs OpenMPI (see tools/test-distributed.sh). Usage:
#   tools/bench-distributed.sh   (REPS=5 STEPS=300 GLOBAL=64 HIDDENS="256 1024" by default)
#   WORKLOAD=gpt tools/bench-distributed.sh   (REPS=5 STEPS=30 GLOBAL=16 by default;
#     tokens/s over the steps after 3 untimed warm-up steps)
#   MODE=overlap WORKLOAD=gpt tools/bench-distributed.sh   (issue 28: the same
#     2-process x 1-thread job, batch GLOBAL/2 each, with --sync none (no
#     exchange at all: the baseline), --sync overlap (averaging while backward
#     runs) and --sync after (averaging after backward), alternated run by
#     run, REPS runs each (>= 5); prints each mode's median over runs of rank
#     0's median step time and the ratios to the no-exchange step.
#     BUCKET_KB=1024 by default: the gpt's 12.8 MB of gradients in 13
#     buckets, so all but the last can leave while backward runs; with the
#     default 25 MiB cap there is one bucket and nothing to overlap.)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

WORKLOAD=${WORKLOAD:-mlp}
REPS=${REPS:-5}
if [[ $WORKLOAD == gpt ]]; then
    STEPS=${STEPS:-30}
    GLOBAL=${GLOBAL:-16}
    UNIT=tokens
else
    STEPS=${STEPS:-300}
    GLOBAL=${GLOBAL:-64}
    UNIT=samples
fi
BIN=target/release/examples/ddp_$WORKLOAD
cargo build --release -p fucina-distributed --features mpi --example "ddp_$WORKLOAD" >&2

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

run() { # np threads batch hidden
    local np=$1 threads=$2 batch=$3 hidden=$4 sps=() step=() comp=() avg=() share=() mins=() line out
    for _ in $(seq "$REPS"); do
        local model_flags=(--hidden "$hidden")
        [[ $WORKLOAD == gpt ]] && model_flags=()
        out=$(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$BIN" \
            --steps "$STEPS" --batch "$batch" "${model_flags[@]}" --threads "$threads" --log-every 100000)
        line=$(grep '^timing:' <<<"$out")
        mins+=("$(grep '^timing minima:' <<<"$out" | sed -E 's/timing minima: //')")
        sps+=("$(sed -E "s/.* ([0-9.]+) $UNIT\/s.*/\1/" <<<"$line")")
        step+=("$(sed -E 's/.*median step ([0-9.]+) ms.*/\1/' <<<"$line")")
        comp+=("$(sed -E 's/.*= compute ([0-9.]+) ms.*/\1/' <<<"$line")")
        avg+=("$(sed -E 's/.*gradient averaging ([0-9.]+) ms.*/\1/' <<<"$line")")
        share+=("$(sed -E 's/.*\(([0-9.]+)% of the step\).*/\1/' <<<"$line")")
    done
    printf "%-22s %-12s: %7.0f $UNIT/s, step %8.3f ms = compute %8.3f + averaging %7.3f ms (%4.1f%%) [medians of %d; $UNIT/s: %s]\n" \
        "$np proc x $threads thr x b$batch" "$([[ $WORKLOAD == gpt ]] && echo gpt || echo "hidden $hidden")" \
        "$(printf '%s\n' "${sps[@]}" | median)" "$(printf '%s\n' "${step[@]}" | median)" \
        "$(printf '%s\n' "${comp[@]}" | median)" "$(printf '%s\n' "${avg[@]}" | median)" \
        "$(printf '%s\n' "${share[@]}" | median)" "$REPS" "${sps[*]}"
    printf '    minima per run: %s\n' "${mins[@]}"
}

if [[ ${MODE:-} == overlap ]]; then
    BUCKET_KB=${BUCKET_KB:-1024}
    model_flags=(--hidden "${HIDDEN:-1024}")
    [[ $WORKLOAD == gpt ]] && model_flags=()
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "lscpu: $(lscpu | grep -E 'Model name' | sed -E 's/ +/ /g'), $(nproc) cores"
    declare -A steps=()
    for rep in $(seq "$REPS"); do
        for sync in none overlap after; do
            out=$(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$BIN" --steps "$STEPS" \
                --batch $((GLOBAL / 2)) "${model_flags[@]}" --threads 1 --log-every 100000 \
                --bucket-kb "$BUCKET_KB" --sync "$sync")
            [[ $rep == 1 && $sync == overlap ]] && grep -m1 'bucket(s)' <<<"$out"
            ms=$(grep '^timing:' <<<"$out" | sed -E 's/.*median step ([0-9.]+) ms.*/\1/')
            steps[$sync]+="$ms "
            echo "run $rep, --sync $sync: median step $ms ms"
        done
    done
    declare -A med=()
    for sync in none overlap after; do
        med[$sync]=$(tr ' ' '\n' <<<"${steps[$sync]}" | grep . | median)
        printf '%-8s median step %9.3f ms  (runs: %s)\n' "$sync" "${med[$sync]}" "${steps[$sync]}"
    done
    awk -v o="${med[overlap]}" -v a="${med[after]}" -v n="${med[none]}" \
        'BEGIN { printf "overlap / no exchange = %.4f; after / no exchange = %.4f\n", o / n, a / n }'
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
HIDDENS=${HIDDENS:-256 1024}
[[ $WORKLOAD == gpt ]] && HIDDENS=0
for hidden in $HIDDENS; do
    run 1 2 "$GLOBAL" "$hidden"
    run 2 1 $((GLOBAL / 2)) "$hidden"
    run 1 1 "$GLOBAL" "$hidden"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
