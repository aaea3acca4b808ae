#!/usr/bin/env bash
# The MPI tests of fucina-distributed (issue 16), run by .ci/run after the
# workspace tests. Needs OpenMPI (`apt-get install -y openmpi-bin
# libopenmpi-dev libclang-dev clang` on Debian; .ci/run installs them when
# `mpirun` is missing). Builds the `ddp_mlp` example with the `mpi` feature
# and launches it with `mpirun -np 2` to check, each a numbered case:
#  1. 2 ranks x batch b, 20 AdamW steps == 1 process x batch 2b within 1e-5
#     relative (f64: elementwise; f32: by tensor norm, as AdamW amplifies
#     f32 summation-order differences where a gradient is near zero), and
#     the ranks' parameters bitwise identical after every step (hash
#     compared across ranks);
#  2. stop after step 25, restart from the last checkpoint (step 20): the
#     losses of steps 21..30 equal an uninterrupted run's, bit for bit;
#  3. a rank killed (SIGKILL) mid-run ends the job within 30 s, exit status
#     non-zero, with a message naming rank 1;
#  4. a rank that returns an error ends the job, naming itself;
#  5. a rank that stalls is named by its peer when the exchange deadline
#     passes, and the job ends;
#  6. averaging overlapped with backward (`--sync overlap`, 4 KiB buckets:
#     several buckets sent while backward runs) gives the losses and the
#     final parameter hash of averaging after backward, bit for bit (f32
#     and f64), and still matches one process with the global batch.
# Every mpirun runs under `timeout`, so a hang fails the script, never CI.
# Usage: tools/test-distributed.sh   (from anywhere; NP=2 by default)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

NP=${NP:-2}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NP")
BIN=target/release/examples/ddp_mlp
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fucina-dist-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

step() { printf '\n==> %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "cargo clippy -p fucina-distributed --features mpi --all-targets -- -D warnings"
cargo clippy -p fucina-distributed --features mpi --all-targets -- -D warnings
step "cargo build --release -p fucina-distributed --features mpi --example ddp_mlp"
cargo build --release -p fucina-distributed --features mpi --example ddp_mlp

step "1. $NP ranks vs one process with the global batch; bitwise-identical ranks"
for dtype in --f64 --f32; do
    flag=$([ "$dtype" = --f64 ] && echo --f64 || true)
    out=$(timeout 300 "${MPIRUN[@]}" "$BIN" --steps 20 --batch 16 --hidden 64 --check-single --timeout-s 60 $flag 2>&1) ||
        { echo "$out"; fail "case 1 ($dtype) exited non-zero"; }
    echo "$out"
    grep -q "max relative parameter difference" <<<"$out" || fail "case 1: no comparison printed"
    grep -q "ranks bitwise identical after every step" <<<"$out" || fail "case 1: no hash check printed"
done

step "2. stop at step 25, resume from the step-20 checkpoint: same losses"
common=(--steps 30 --batch 16 --hidden 64 --ckpt-every 10 --timeout-s 60)
timeout 300 "${MPIRUN[@]}" "$BIN" "${common[@]}" --ckpt "$WORK/a" --losses "$WORK/a.txt" >/dev/null
timeout 300 "${MPIRUN[@]}" "$BIN" "${common[@]}" --ckpt "$WORK/b" --losses "$WORK/b.txt" --stop-after 25 >/dev/null
timeout 300 "${MPIRUN[@]}" "$BIN" "${common[@]}" --ckpt "$WORK/b" --losses "$WORK/c.txt" --resume >/dev/null
[ "$(wc -l <"$WORK/a.txt")" -eq 30 ] || fail "case 2: the full run logged $(wc -l <"$WORK/a.txt") steps"
diff <(head -n 25 "$WORK/a.txt") "$WORK/b.txt" || fail "case 2: the stopped run's losses differ"
diff <(sed -n '21,30p' "$WORK/a.txt") "$WORK/c.txt" || fail "case 2: the resumed run's losses differ"
echo "steps 21..30 after resume match the uninterrupted run ($(wc -l <"$WORK/c.txt") losses, bitwise)"

step "3. kill -9 rank 1 mid-run: the job ends within 30 s, naming rank 1"
mkdir -p "$WORK/pids"
timeout 300 "${MPIRUN[@]}" "$BIN" --steps 100000000 --batch 16 --hidden 64 --log-every 1000 \
    --pid-dir "$WORK/pids" >"$WORK/kill.log" 2>&1 &
job=$!
for _ in $(seq 600); do [ -s "$WORK/pids/rank-1.pid" ] && break; sleep 0.1; done
[ -s "$WORK/pids/rank-1.pid" ] || { kill "$job"; fail "case 3: rank 1 never started"; }
sleep 3 # mid-run
t0=$(date +%s%N)
kill -9 "$(cat "$WORK/pids/rank-1.pid")"
rc=0
wait "$job" || rc=$?
took=$((($(date +%s%N) - t0) / 1000000))
cat "$WORK/kill.log"
echo "job ended ${took} ms after the kill, exit status $rc"
[ "$rc" -ne 0 ] || fail "case 3: exit status 0"
[ "$rc" -ne 124 ] || fail "case 3: the job hung until the outer timeout"
[ "$took" -lt 30000 ] || fail "case 3: took ${took} ms"
grep -q "rank 1" "$WORK/kill.log" || fail "case 3: no message names rank 1"

step "4. rank 1 fails with an error at step 5: the job ends, naming it"
rc=0
out=$(timeout 120 "${MPIRUN[@]}" "$BIN" --steps 1000 --batch 16 --hidden 64 --fail-rank 1 --fail-at 5 2>&1) || rc=$?
echo "$out"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "case 4: exit status $rc"
grep -q "rank 1 of $NP failed: invalid config: injected failure at step 5" <<<"$out" || fail "case 4: no message naming rank 1"

step "5. rank 1 stalls at step 5: rank 0 names it when the 5 s deadline passes"
rc=0
t0=$(date +%s%N)
out=$(timeout 120 "${MPIRUN[@]}" "$BIN" --steps 1000 --batch 16 --hidden 64 --fail-rank 1 --fail-at 5 --stall --timeout-s 5 2>&1) || rc=$?
took=$((($(date +%s%N) - t0) / 1000000))
echo "$out"
echo "job ended after ${took} ms, exit status $rc"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "case 5: exit status $rc"
grep -q "rank 0 of $NP failed: rank 0: .*no message from rank(s) \[1\]" <<<"$out" || fail "case 5: rank 0 did not name rank 1"

step "6. averaging overlapped with backward == averaging after it, bitwise"
for dtype in --f64 --f32; do
    flag=$([ "$dtype" = --f64 ] && echo --f64 || true)
    for sync in after overlap; do
        out=$(timeout 300 "${MPIRUN[@]}" "$BIN" --steps 20 --batch 16 --hidden 64 --bucket-kb 4 --check-single \
            --timeout-s 60 --sync "$sync" --losses "$WORK/$sync$dtype.txt" $flag 2>&1) ||
            { echo "$out"; fail "case 6 ($sync $dtype) exited non-zero"; }
        grep -E "bucket|check:" <<<"$out"
        grep -o "final hash [0-9a-f]*" <<<"$out" >"$WORK/$sync$dtype.hash" || fail "case 6: no final hash printed"
    done
    grep -q "in [3-9] bucket(s)\|in [1-9][0-9] bucket(s)" <<<"$out" || fail "case 6: fewer than 3 buckets"
    [ "$(wc -l <"$WORK/overlap$dtype.txt")" -eq 20 ] || fail "case 6: the overlapped run logged $(wc -l <"$WORK/overlap$dtype.txt") steps"
    diff "$WORK/after$dtype.txt" "$WORK/overlap$dtype.txt" || fail "case 6 ($dtype): the losses differ"
    diff "$WORK/after$dtype.hash" "$WORK/overlap$dtype.hash" || fail "case 6 ($dtype): the parameters differ"
    echo "$dtype: 20 losses and the final parameter hash ($(cat "$WORK/overlap$dtype.hash")) identical"
done

step "distributed tests passed"
