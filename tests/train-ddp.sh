#!/bin/sh
# weft-train under mpirun -np 2 (docs/distributed.md): two processes with batch 25 each
# train as one with batch 50; a 2-process checkpoint resumes bit for bit under 2 and
# runs on under 1; a killed rank ends the job, a stopped one makes the other fail with
# the timeout's message within timeout_s; different models on the ranks are refused at
# start, naming the odd rank; [train] metrics is served by rank 0 alone unless
# metrics_all_ranks, and then by rank r on PORT + r.
#   usage: train-ddp.sh BUILD_DIR      (exit 77, skipped, where mpirun is missing)
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
command -v mpirun >/dev/null 2>&1 || { echo "train-ddp: no mpirun (make deps installs openmpi-bin): skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-ddp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-ddp: $*"; exit 1; }
# Open MPI refuses root without these (CI runs as root); shared memory between the ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader
mpi2() { mpirun --oversubscribe --bind-to none -np 2 "$@"; }

. "$(dirname "$0")/blobs-model.sh"
{
    cat <<INI
[runtime]
seed = 3

INI
    blobs_model
    cat <<INI
[optimizer]
type = sgd
lr = 0.5
momentum = 0.9

[train]
max_iters = 20
eval_interval = 20
log_interval = 10
log = $tmp/log.csv
INI
} >"$tmp/blobs.ini"

# ---- 2 x 25 = 1 x 50: rank r reads order[r::2], so step k sees the same 50 samples ------
mpi2 "$train" "$tmp/blobs.ini" --set "train.checkpoint=$tmp/ddp.safetensors" \
    --set "train.log=$tmp/ddp.csv" >"$tmp/ddp.txt" 2>&1 || { cat "$tmp/ddp.txt"; fail "2 processes failed"; }
cat "$tmp/ddp.txt"
grep -q '^data parallel: 2 processes (mpi), batch_size 25 per process' "$tmp/ddp.txt" ||
    fail "no data-parallel line"
[ "$(grep -c '^step 20/20 ' "$tmp/ddp.txt")" = 1 ] || fail "rank 1 printed too (or nobody did)"
"$train" "$tmp/blobs.ini" --set data.batch_size=50 --set "train.checkpoint=$tmp/one.safetensors" \
    --set "train.log=$tmp/one.csv" >"$tmp/one.txt" 2>&1 || { cat "$tmp/one.txt"; fail "1 process failed"; }
v2=$(tail -1 "$tmp/ddp.csv" | cut -d, -f4)
v1=$(tail -1 "$tmp/one.csv" | cut -d, -f4)
awk -v a="$v1" -v b="$v2" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }' ||
    fail "val loss after 20 steps: $v1 with 1 x 50, $v2 with 2 x 25"

# ---- resume: 9 steps under 2, then on to 20 under 2, equals 20 straight -------------------
mpi2 "$train" "$tmp/blobs.ini" --set train.max_iters=9 --set "train.checkpoint=$tmp/part.safetensors" \
    --set "train.log=$tmp/part.csv" >"$tmp/part.txt" 2>&1 || { cat "$tmp/part.txt"; fail "part 1 failed"; }
cp "$tmp/part.safetensors" "$tmp/part1.safetensors"
cp "$tmp/part.train.safetensors" "$tmp/part1.train.safetensors"
mpi2 "$train" "$tmp/blobs.ini" --set "train.checkpoint=$tmp/part.safetensors" --set "train.log=$tmp/part.csv" \
    --resume "$tmp/part.safetensors" >"$tmp/resumed.txt" 2>&1 || { cat "$tmp/resumed.txt"; fail "resuming under 2 failed"; }
cmp "$tmp/ddp.safetensors" "$tmp/part.safetensors" ||
    fail "a 2-process run resumed at step 9 differs from an uninterrupted one"
# ... and under 1 process: the position in the epoch is converted, training goes on
"$train" "$tmp/blobs.ini" --set "train.checkpoint=$tmp/part1.safetensors" --set "train.log=$tmp/part1.csv" \
    --resume "$tmp/part1.safetensors" >"$tmp/resumed1.txt" 2>&1 || { cat "$tmp/resumed1.txt"; fail "resuming under 1 failed"; }
grep -q '^resuming a 2-process checkpoint under 1: 9 batches of the epoch read become 18' "$tmp/resumed1.txt" ||
    { cat "$tmp/resumed1.txt"; fail "no conversion of the epoch position"; }
grep -q '^step 20/20 ' "$tmp/resumed1.txt" || fail "the 1-process resume did not reach step 20"

# ---- deterministic = true: the same bits run to run ---------------------------------------
for i in 1 2; do
    mpi2 "$train" "$tmp/blobs.ini" --set distributed.deterministic=true --set train.max_iters=5 \
        --set "train.checkpoint=$tmp/det$i.safetensors" --set "train.log=$tmp/det$i.csv" >"$tmp/det.txt" 2>&1 || { cat "$tmp/det.txt"; fail "deterministic run failed"; }
done
cmp "$tmp/det1.safetensors" "$tmp/det2.safetensors" || fail "deterministic runs differ"

# ---- a killed rank ends the job; a stopped one fails the other within timeout_s -----------
# waits (at most 60 s) for the ranks to be training, then signals rank 1's process
signal_rank1() {
    n=0
    until grep -q '^data parallel' "$tmp/long.txt" 2>/dev/null; do
        n=$((n + 1)); [ $n -lt 600 ] || return 1; sleep 0.1
    done
    sleep 1
    pid=$(pgrep -f "^$train $tmp/blobs.ini" | tail -1)
    [ -n "$pid" ] && kill "-$1" "$pid"
}
for sig in KILL STOP; do
    : >"$tmp/long.txt"
    start=$(date +%s)
    mpi2 "$train" "$tmp/blobs.ini" --set train.max_iters=100000000 --set train.eval_interval=0 \
        --set train.log_interval=100000 --set distributed.timeout_s=3 \
        --set "train.checkpoint=$tmp/long.safetensors" >"$tmp/long.txt" 2>&1 &
    job=$!
    signal_rank1 "$sig" || { kill $job; fail "the ranks never started"; }
    if wait $job; then fail "the job survived SIG$sig on a rank"; fi
    took=$(( $(date +%s) - start ))
    [ "$took" -lt 45 ] || fail "the job took $took s to end after SIG$sig on a rank"
    if [ $sig = STOP ]; then
        grep -q 'weft: rank [01]: .*waited 3 s for the other ranks (timeout_s = 3); rank [01] did not arrive (no answer: stopped' "$tmp/long.txt" ||
            { cat "$tmp/long.txt"; fail "no timeout message from the rank left waiting"; }
    fi
done

# ---- different models on the ranks: refused at start, naming rank 1 -----------------------
if mpirun --oversubscribe --bind-to none -np 1 "$train" "$tmp/blobs.ini" : \
    -np 1 "$train" "$tmp/blobs.ini" --set layer.fc1.out_features=17 --set layer.fc2.in_features=17 \
    >"$tmp/mismatch.txt" 2>&1; then
    fail "different models on the ranks were accepted"
fi
grep -q 'the model on rank 1 differs from rank 0' "$tmp/mismatch.txt" || { cat "$tmp/mismatch.txt"; fail "message"; }
# ---- [train] metrics: rank 0 serves alone; with metrics_all_ranks rank r on PORT + r ------
# Two free ports in a row.
free_pair() { /usr/bin/python3 -c '
import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    try:
        socket.socket().bind(("127.0.0.1", p + 1))
    except OSError:
        continue
    print(p); break'; }
fetch() { # URL: the page on stdout, or fails (connection refused)
    /usr/bin/python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' "$1" 2>/dev/null
}
# metrics_job ALL_RANKS: training until killed; polls rank 0's page (and rank 1's when
# ALL_RANKS) until it shows steps; leaves them in page0 and page1 (empty when refused).
metrics_job() {
    port=$(free_pair)
    # mpirun itself in the background (not mpi2's subshell): $! is the pid to end it by.
    mpirun --oversubscribe --bind-to none -np 2 "$train" "$tmp/blobs.ini" --overwrite \
        --set train.max_iters=100000000 --set train.eval_interval=0 \
        --set train.log_interval=100000 --set "train.checkpoint=$tmp/metrics.safetensors" \
        --set "train.metrics=127.0.0.1:$port" --set "train.metrics_all_ranks=$1" \
        >"$tmp/metrics.txt" 2>&1 &
    job=$!
    i=0
    until fetch "http://127.0.0.1:$port/metrics" >"$tmp/page0" && grep -q '^weft_train_step [1-9]' "$tmp/page0" &&
          { [ "$1" = false ] || { fetch "http://127.0.0.1:$((port + 1))/metrics" >"$tmp/page1" &&
                                  grep -q '^weft_train_step [1-9]' "$tmp/page1"; }; }; do
        i=$((i + 1))
        [ "$i" -lt 300 ] || { kill $job; wait $job || true; cat "$tmp/metrics.txt"; fail "no metrics pages after 30 s (all ranks: $1)"; }
        sleep 0.1
    done
    [ "$1" = true ] || fetch "http://127.0.0.1:$((port + 1))/metrics" >"$tmp/page1" || : >"$tmp/page1"
    kill $job
    wait $job || true
}
metrics_job false
grep -q '^weft_train_info{rank="0",' "$tmp/page0" || fail "rank 0's page: $(cat "$tmp/page0")"
[ ! -s "$tmp/page1" ] || fail "rank 1 serves metrics without metrics_all_ranks: $(head -5 "$tmp/page1")"
metrics_job true
grep -q '^weft_train_info{rank="0",' "$tmp/page0" || fail "rank 0's page: $(cat "$tmp/page0")"
grep -q '^weft_train_info{rank="1",' "$tmp/page1" || fail "rank 1's page on PORT + 1: $(cat "$tmp/page1")"
echo "train-ddp: ok"
