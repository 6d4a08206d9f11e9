#!/bin/sh
# A checkpoint is one atomic unit (apps/train/train_checkpoint.c): weft-train is killed
# (SIGKILL, through the WEFT_TEST_CRASH_AT hook of weft/checkpoint.h, which only the
# test build weft-train-crashpoints has: tests/crashpoint.c) at every step of
# every save of a run, in turn; after each kill the files on disk must be the old
# complete checkpoint or the new one, and the run resumed from them (or started again,
# when the first save never completed) must end with a model file identical to an
# uninterrupted run's. Also: stale temporary files are removed by the next save, a model
# file beside the state of another save (or of another run at the same step) is refused
# naming both, and a changed scheduler
# and a finished run are refused on resume. (A full disk: checkpoint-disk-full.sh.)
#   usage: checkpoint-durability.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/tests/weft-train-crashpoints"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-durable.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "checkpoint-durability: $*"; exit 1; }

# 12 steps, a checkpoint every 4: three saves.
cat >"$tmp/run.ini" <<INI
[runtime]
seed = 5

[data]
reader = synthetic
kind = blobs
samples = 200
features = 2
classes = 3
batch_size = 20
shuffle = true

[layer.fc1]
type = linear
in_features = 2
out_features = 8

[layer.act]
type = relu

[layer.fc2]
type = linear
in_features = 8
out_features = 3

[optimizer]
type = adamw
lr = 0.01

[scheduler]
type = warmup_cosine
warmup_iters = 2
lr_decay_iters = 12
min_lr = 0.001

[train]
max_iters = 12
eval_interval = 4
log_interval = 4
checkpoint_interval = 4
INI

"$train" "$tmp/run.ini" --set "train.checkpoint=$tmp/full.safetensors" --set "train.log=$tmp/full.csv" \
    >"$tmp/full.txt" 2>&1 || { cat "$tmp/full.txt"; fail "the uninterrupted run failed"; }

# ---- a kill at each crash point of the run, in turn ----------------------------------
n=1
while :; do
    d="$tmp/k$n"
    mkdir "$d"
    set +e
    WEFT_TEST_CRASH_AT=$n "$train" "$tmp/run.ini" --set "train.checkpoint=$d/m.safetensors" \
        --set "train.log=$d/log.csv" >"$d/crash.txt" 2>&1
    code=$?
    set -e
    if [ "$code" = 0 ]; then
        grep -q 'killed at' "$d/crash.txt" && fail "point $n: exit 0 after a kill"
        break # past the last point: the run completed
    fi
    [ "$code" = 137 ] || { cat "$d/crash.txt"; fail "point $n: exit $code, expected a SIGKILL (137)"; }
    where=$(sed -n 's/^weft: WEFT_TEST_CRASH_AT: killed at //p' "$d/crash.txt")
    # resume from whatever is on disk; before the first complete save, start again
    if [ -f "$d/m.safetensors" ]; then
        # killed after the last save's commit point: the run is over, and resume says so
        "$train" "$tmp/run.ini" --set "train.checkpoint=$d/m.safetensors" --set "train.log=$d/log.csv" \
            --resume "$d/m.safetensors" >"$d/resume.txt" 2>&1 ||
            grep -q 'checkpoint is at step 12; \[train\] max_iters = 12 trains nothing' "$d/resume.txt" ||
            { cat "$d/resume.txt"; fail "point $n ($where): resuming failed"; }
    else
        [ "$where" = checkpoint.promoted ] && fail "point $n ($where): no model file after a complete save"
        # the killed run's log has rows: starting again replaces it, which is asked for
        "$train" "$tmp/run.ini" --set "train.checkpoint=$d/m.safetensors" --set "train.log=$d/log.csv" \
            --overwrite >"$d/resume.txt" 2>&1 || { cat "$d/resume.txt"; fail "point $n ($where): the new run failed"; }
    fi
    cmp -s "$tmp/full.safetensors" "$d/m.safetensors" ||
        fail "point $n ($where): the resumed run ends with a model other than the uninterrupted run's"
    ls "$d" | grep -q '\.tmp\.' && fail "point $n ($where): a stale temporary file was left: $(ls "$d")"
    ls "$d" | grep -q 'next' && fail "point $n ($where): the .next state was not renamed into place"
    echo "point $n ($where): resumed to the uninterrupted run's model"
    n=$((n + 1))
done
# 3 saves x (begin, 3 per file x 2 files, promoted) = 24 points
[ "$n" -gt 24 ] || fail "only $((n - 1)) crash points were reached, expected 24"

# ---- kill -9 at random moments of a run that saves after every step --------------------
long="--set train.max_iters=150 --set train.checkpoint_interval=1 --set train.log_interval=50 --set train.eval_interval=50"
# shellcheck disable=SC2086
"$train" "$tmp/run.ini" $long --set "train.checkpoint=$tmp/long.safetensors" --set train.log= \
    >"$tmp/long.txt" 2>&1 || { cat "$tmp/long.txt"; fail "the uninterrupted 150-step run failed"; }
for i in 1 2 3 4 5 6; do
    d="$tmp/r$i"
    mkdir "$d"
    delay=$(awk -v s="$$$i" 'BEGIN { srand(s); printf "%.2f", 0.1 + rand() * 1.2 }')
    # shellcheck disable=SC2086
    "$train" "$tmp/run.ini" $long --set "train.checkpoint=$d/m.safetensors" --set train.log= \
        >"$d/run.txt" 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # shellcheck disable=SC2086
    if [ -f "$d/m.safetensors" ]; then
        "$train" "$tmp/run.ini" $long --set "train.checkpoint=$d/m.safetensors" --set train.log= \
            --resume "$d/m.safetensors" >"$d/resume.txt" 2>&1 || grep -q 'trains nothing' "$d/resume.txt" ||
            { cat "$d/resume.txt"; fail "killed after ${delay}s: resuming failed"; }
    else
        "$train" "$tmp/run.ini" $long --set "train.checkpoint=$d/m.safetensors" --set train.log= \
            --overwrite >"$d/resume.txt" 2>&1 || { cat "$d/resume.txt"; fail "killed after ${delay}s: the new run failed"; }
    fi
    cmp -s "$tmp/long.safetensors" "$d/m.safetensors" ||
        fail "killed after ${delay}s: the resumed run ends with a model other than the uninterrupted run's"
    ls "$d" | grep -q '\.tmp\.' && fail "killed after ${delay}s: a stale temporary file was left: $(ls "$d")"
    echo "killed after ${delay}s (at step $(sed -n 's/^step \([0-9]*\)\/150 .*/\1/p' "$d/run.txt" | tail -1)): resumed to the uninterrupted run's model"
done

# ---- a model beside the state of another save is refused, naming both ------------------
d="$tmp/mixed"
mkdir "$d"
"$train" "$tmp/run.ini" --set train.max_iters=4 --set "train.checkpoint=$d/a.safetensors" \
    --set train.log= >/dev/null 2>&1 || fail "the 4-step run failed"
"$train" "$tmp/run.ini" --set train.max_iters=8 --set "train.checkpoint=$d/b.safetensors" \
    --set train.log= >/dev/null 2>&1 || fail "the 8-step run failed"
cp "$d/a.safetensors" "$d/c.safetensors"
cp "$d/b.train.safetensors" "$d/c.train.safetensors"
if "$train" "$tmp/run.ini" --set train.log= --resume "$d/c.safetensors" >"$d/out.txt" 2>&1; then
    fail "a mixed pair was accepted"
fi
grep -q "c.safetensors (step 4.*c.train.safetensors (step 8.*not from the same save.*training state is newer" \
    "$d/out.txt" || { cat "$d/out.txt"; fail "message for a mixed pair"; }

# ---- a changed scheduler, and a run that is over ---------------------------------------
# none where there was one: refused
sed '/^\[scheduler\]/,/^$/d' "$tmp/run.ini" >"$tmp/nosched.ini"
if "$train" "$tmp/nosched.ini" --set train.log= --resume "$d/a.safetensors" >"$d/sched.txt" 2>&1; then
    fail "a removed scheduler was accepted on resume"
fi
grep -q 'saved with \[scheduler\] .*type=warmup_cosine.*, the config now gives none' "$d/sched.txt" ||
    { cat "$d/sched.txt"; fail "message for a removed scheduler"; }
# the same type with another key: allowed, with a warning naming both
"$train" "$tmp/run.ini" --set train.log= --set scheduler.min_lr=0.0001 --set "train.checkpoint=$d/a2.safetensors" \
    --resume "$d/a.safetensors" >"$d/sched2.txt" 2>&1 || { cat "$d/sched2.txt"; fail "a changed min_lr was refused"; }
grep -q 'warning: \[scheduler\] differs .*min_lr=0.001,.*now .*min_lr=0.0001.*continues from step 4' "$d/sched2.txt" ||
    { cat "$d/sched2.txt"; fail "no warning for a changed min_lr"; }
if "$train" "$tmp/run.ini" --set train.log= --set train.max_iters=8 \
    --resume "$d/b.safetensors" >"$d/over.txt" 2>&1; then
    fail "resuming a finished run with max_iters = 8 succeeded"
fi
grep -q 'checkpoint is at step 8; \[train\] max_iters = 8 trains nothing' "$d/over.txt" ||
    { cat "$d/over.txt"; fail "message for a finished run"; }

# ---- two runs written to one path --------------------------------------------------------
# A second run is refused at the first run's path (train-runs.sh); with --overwrite it
# removes the first run's files first. Before issue 36 it wrote over them: run A saved at
# step 4, run B (another lr) to the same path was killed right after its first save
# renamed its model into place, leaving B's model beside A's .train file, both "step 4,
# ..". Such a pair (made here by hand) has ids that agree and a model digest that does not.
d="$tmp/tworuns"
mkdir "$d" "$d/b"
b_args="--set optimizer.lr=0.05 --set train.max_iters=8 --set train.log="
# shellcheck disable=SC2086
"$train" "$tmp/run.ini" $b_args --set "train.checkpoint=$tmp/b-full.safetensors" >/dev/null 2>&1 ||
    fail "the uninterrupted run B failed"
"$train" "$tmp/run.ini" --set train.max_iters=4 --set "train.checkpoint=$d/m.safetensors" \
    --set train.log= >/dev/null 2>&1 || fail "run A failed"
set +e
# shellcheck disable=SC2086
WEFT_TEST_CRASH_AT=safetensors.renamed:2 "$train" "$tmp/run.ini" $b_args \
    --set "train.checkpoint=$d/b/m.safetensors" >"$d/b.txt" 2>&1
code=$?
set -e
[ "$code" = 137 ] || { cat "$d/b.txt"; fail "run B: exit $code, expected SIGKILL after its model's rename"; }
cp "$d/m.train.safetensors" "$d/b/m.train.safetensors" # A's state beside B's model
# without B's .next state: A's state is refused, naming both files (it was taken, rc 0)
mkdir "$d/alone"
cp "$d/b/m.safetensors" "$d/m.train.safetensors" "$d/alone/"
set +e
# shellcheck disable=SC2086
"$train" "$tmp/run.ini" $b_args --set "train.checkpoint=$d/alone/m.safetensors" \
    --resume "$d/alone/m.safetensors" >"$d/alone.txt" 2>&1
code=$?
set -e
[ "$code" = 2 ] || { cat "$d/alone.txt"; fail "a state of another run: exit $code, expected 2"; }
grep -q "the model $d/alone/m.safetensors (step 4, .*digest [0-9a-f]*) and the training state $d/alone/m.train.safetensors (step 4, .*saved with a model of digest [0-9a-f]*) are from different runs" \
    "$d/alone.txt" || { cat "$d/alone.txt"; fail "message for a state of another run"; }
# with it: B's own state is taken, and B ends where it would have uninterrupted
# shellcheck disable=SC2086
"$train" "$tmp/run.ini" $b_args --set "train.checkpoint=$d/b/m.safetensors" \
    --resume "$d/b/m.safetensors" >"$d/resume.txt" 2>&1 || { cat "$d/resume.txt"; fail "resuming run B failed"; }
cmp -s "$tmp/b-full.safetensors" "$d/b/m.safetensors" ||
    fail "run B resumed beside run A's state ends with a model other than its uninterrupted one"
echo "two runs on one path: the other run's state refused, the run's own taken"

echo "checkpoint-durability: ok"
