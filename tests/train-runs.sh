#!/bin/sh
# A rerun never destroys an earlier run (issue 36, items 2 and 3; apps/train/train_runs.c,
# train_signals.c, train_progress_style.c):
#  - a new run at an earlier run's paths is refused (exit 2) before it writes anything,
#    saying how to continue, replace or keep both; the files are byte for byte as they
#    were, also when the rerun is cut by `| head` or Ctrl-C; each suggested command works;
#  - --overwrite and [train] overwrite = true replace it; a resumed run appends to its
#    log (an older header's log too, never rewritten); a run resumed into another run's
#    path is refused;
#  - {epoch}/{step} in checkpoint names, keep_last, save_every_steps in epoch mode;
#  - SIGPIPE (`| head`) and SIGTERM stop a run with a checkpoint saved, as Ctrl-C does;
#  - [train] progress = bar|lines|none, auto through a pseudo-terminal (tests/run-on-pty.py).
# Under mpirun: tests/train-runs-mpi.sh.
#   usage: train-runs.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-runs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-runs: $*"; exit 1; }
py=$(command -v python3 || true) # make deps installs it: the pseudo-terminal's
[ -n "$py" ] || fail "no python3 (make deps installs it)"

cat >"$tmp/ok.ini" <<INI
[runtime]
seed = 1

[data]
reader = synthetic
kind = blobs
samples = 200
features = 2
classes = 3
batch_size = 20

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
type = sgd
lr = 0.1

[train]
epochs = 2
checkpoint = $tmp/run/m.safetensors
log = $tmp/run/log.csv
INI
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh" # expect_error
snapshot() { (cd "$tmp/run" && for f in *; do cksum "$f"; done) >"$tmp/$1"; }

# ---- a rerun is refused, and every way on works --------------------------------------------
"$train" "$tmp/ok.ini" >"$tmp/first.txt" 2>&1 || { cat "$tmp/first.txt"; fail "the first run failed"; }
cp "$tmp/run/log.csv" "$tmp/first.csv"
snapshot before
expect_error rerun 2 "an earlier run is at the paths of \[train\] checkpoint and log: the checkpoint $tmp/run/m.safetensors (step 20, after epoch 2), $tmp/run/log.csv (2 rows)" \
    "$tmp/ok.ini"
for way in "continue it:" "replace it:" "keep both:"; do
    grep -q "^  $way  *$train " "$tmp/rerun.txt" || { cat "$tmp/rerun.txt"; fail "rerun: no '$way' command"; }
done
grep -q "continue it:.*--resume $tmp/run/m.safetensors (it finished its 2 epochs: add --set train.epochs=N" "$tmp/rerun.txt" ||
    fail "rerun: a finished run's continuation does not say to raise epochs"
snapshot after
cmp -s "$tmp/before" "$tmp/after" || fail "a refused rerun changed the earlier run's files"
# cut by | head, or by Ctrl-C a moment in: refused before it could write anything
"$train" "$tmp/ok.ini" 2>&1 | head -1 >/dev/null || true
"$train" "$tmp/ok.ini" >/dev/null 2>&1 &
pid=$!
sleep 0.2
kill -INT $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
snapshot after
cmp -s "$tmp/before" "$tmp/after" || fail "a rerun cut by | head or Ctrl-C changed the earlier run's files"
echo "rerun: refused, the earlier run untouched (also through | head and Ctrl-C)"
# the suggested commands, run as printed
cont=$(sed -n 's/^  continue it:  \(.*\) (it finished.*/\1/p' "$tmp/rerun.txt")
sh -c "$cont --set train.epochs=3" >"$tmp/cont.txt" 2>&1 || { cat "$tmp/cont.txt"; fail "continue it: failed"; }
grep -q "^resumed from $tmp/run/m.safetensors at the start of epoch 3" "$tmp/cont.txt" || { cat "$tmp/cont.txt"; fail "continue it: did not resume"; }
# the log was appended to: its first three lines are the first run's, byte for byte
head -3 "$tmp/run/log.csv" | cmp -s - "$tmp/first.csv" || { cat "$tmp/run/log.csv"; fail "continue it: the log was rewritten"; }
[ "$(wc -l <"$tmp/run/log.csv")" = 4 ] && [ "$(sed -n 4p "$tmp/run/log.csv" | cut -d, -f1)" = 3 ] ||
    { cat "$tmp/run/log.csv"; fail "continue it: the log should have epochs 1, 2, 3"; }
both=$(sed -n 's/^  keep both:    //p' "$tmp/rerun.txt")
sh -c "$both" >"$tmp/both.txt" 2>&1 || { cat "$tmp/both.txt"; fail "keep both: failed"; }
[ -f "$tmp/run/m-2.safetensors" ] && [ -f "$tmp/run/log-2.csv" ] || { ls "$tmp/run"; fail "keep both: no m-2 / log-2"; }
cp "$tmp/run/m.safetensors" "$tmp/m.kept"
over=$(sed -n 's/^  replace it:   //p' "$tmp/rerun.txt")
sh -c "$over" >"$tmp/over.txt" 2>&1 || { cat "$tmp/over.txt"; fail "replace it: failed"; }
grep -q "^overwrite: removed the earlier run's [0-9]* files" "$tmp/over.txt" || { cat "$tmp/over.txt"; fail "overwrite: not said"; }
[ "$(wc -l <"$tmp/run/log.csv")" = 3 ] || { cat "$tmp/run/log.csv"; fail "overwrite: the log should hold the new run's 2 epochs"; }
cmp -s "$tmp/m.kept" "$tmp/run/m.safetensors" && fail "overwrite: the model was not replaced"
"$train" "$tmp/ok.ini" --set train.overwrite=true >"$tmp/over2.txt" 2>&1 || { cat "$tmp/over2.txt"; fail "[train] overwrite = true failed"; }
echo "continue, replace, keep both: each printed command works"

# a resumed run writes where it was read from; into another run's path it is refused
"$train" "$tmp/ok.ini" --set "train.checkpoint=$tmp/other/m.safetensors" --set "train.log=$tmp/other/log.csv" \
    >/dev/null 2>&1 || fail "the other run failed"
expect_error resume_over_other 2 "\[train\] checkpoint = $tmp/other/m.safetensors holds another run than the one --resume $tmp/run/m.safetensors continues" \
    "$tmp/ok.ini" --set train.epochs=3 --set "train.checkpoint=$tmp/other/m.safetensors" --resume "$tmp/run/m.safetensors"
expect_error overwrite_and_resume 2 "starts a new run over the files at" \
    "$tmp/ok.ini" --set train.epochs=3 --overwrite --resume "$tmp/run/m.safetensors"

# a log of an older header is appended to in its own columns, never rewritten
printf 'epoch,train_loss,train_acc,val_loss,val_acc,lr,images_per_s,seconds\n1,0.5,0.8,nan,nan,0.1,100.0,1.000\n2,0.4,0.9,nan,nan,0.1,100.0,1.000\n' >"$tmp/old.csv"
cp "$tmp/old.csv" "$tmp/run/log.csv"
"$train" "$tmp/ok.ini" --set train.epochs=3 --resume "$tmp/run/m.safetensors" >"$tmp/old.txt" 2>&1 ||
    { cat "$tmp/old.txt"; fail "resume onto an older log failed"; }
head -3 "$tmp/run/log.csv" | cmp -s - "$tmp/old.csv" || { cat "$tmp/run/log.csv"; fail "the older log was rewritten"; }
[ "$(awk -F, '{ print NF }' "$tmp/run/log.csv" | sort -u)" = 8 ] || { cat "$tmp/run/log.csv"; fail "rows of another width in the older log"; }
echo "log: appended to on resume, in an older log's columns, never rewritten"

# ---- {epoch}, {step}, keep_last, save_every_steps -------------------------------------------
names="--set train.checkpoint=$tmp/named/e{epoch}-s{step:04d}.safetensors --set train.log=$tmp/named/log.csv"
# shellcheck disable=SC2086
"$train" "$tmp/ok.ini" $names --set train.epochs=3 --set train.save_every_steps=4 --set train.keep_last=3 \
    >"$tmp/named.txt" 2>&1 || { cat "$tmp/named.txt"; fail "named checkpoints failed"; }
# 10 steps an epoch, saves at 4, 8, 10 (end), 12, 16, 20 (end), 24, 28, 30 (end): the last 3 kept
[ "$(cd "$tmp/named" && ls e*.safetensors | grep -v train | tr '\n' ' ')" = "e3-s0024.safetensors e3-s0028.safetensors e3-s0030.safetensors " ] ||
    { ls "$tmp/named"; fail "keep_last = 3: expected the checkpoints of steps 24, 28 and 30"; }
[ "$(ls "$tmp/named" | grep -c 'train.safetensors$')" = 3 ] || { ls "$tmp/named"; fail "keep_last: a state left without its model"; }
grep -q "^checkpoint: $tmp/named/e3-s0030.safetensors$" "$tmp/named.txt" || fail "the last checkpoint's name is not printed"
# a save inside an epoch resumes there
# shellcheck disable=SC2086
"$train" "$tmp/ok.ini" $names --set train.epochs=4 --resume "$tmp/named/e3-s0028.safetensors" >"$tmp/mid.txt" 2>&1 ||
    { cat "$tmp/mid.txt"; fail "resuming a save inside an epoch failed"; }
grep -q "at epoch 3, after batch 8 of 10 (step 28)" "$tmp/mid.txt" || { cat "$tmp/mid.txt"; fail "resume: not inside epoch 3"; }
expect_error keep_last_one_file 2 "keep_last = 2 keeps the newest of several checkpoints, and \[train\] checkpoint = $tmp/x.safetensors names one" \
    "$tmp/ok.ini" --set train.keep_last=2 --set "train.checkpoint=$tmp/x.safetensors" --set "train.log=$tmp/x.csv"
expect_error bad_field 2 "'{epcoh}' is not a field of a checkpoint name: expected {epoch} or {step}" \
    "$tmp/ok.ini" --set "train.checkpoint=$tmp/y/m{epcoh}.safetensors" --set "train.log=$tmp/y/log.csv"
echo "names: {epoch}/{step}, keep_last = 3 of 9 saves, save_every_steps inside epochs"

# ---- SIGPIPE and SIGTERM stop a run as Ctrl-C does ------------------------------------------
long="--set data.samples=400000 --set data.batch_size=2 --set train.log_every=1000"
# shellcheck disable=SC2086
{ set +e; "$train" "$tmp/ok.ini" $long --set "train.checkpoint=$tmp/pipe/m.safetensors" --set "train.log=$tmp/pipe/log.csv" \
    2>"$tmp/pipe.err"; echo $? >"$tmp/pipe.rc"; } | head -3 >/dev/null
[ "$(cat "$tmp/pipe.rc")" = 141 ] || { cat "$tmp/pipe.err"; fail "| head: exit $(cat "$tmp/pipe.rc"), expected 141"; }
grep -q "^interrupted (SIGPIPE: the output's reader went away) at epoch 1, batch [0-9]* of 200000: checkpoint saved to $tmp/pipe/m.safetensors" "$tmp/pipe.err" ||
    { cat "$tmp/pipe.err"; fail "| head: no message on stderr"; }
grep -q "^resume with: .* --resume $tmp/pipe/m.safetensors" "$tmp/pipe.err" || fail "| head: no resume command"
tail -1 "$tmp/pipe/log.csv" | awk -F, '{ exit $9 != 1 }' || { cat "$tmp/pipe/log.csv"; fail "| head: no partial row"; }
# shellcheck disable=SC2086
"$train" "$tmp/ok.ini" $long --set "train.checkpoint=$tmp/term/m.safetensors" --set "train.log=$tmp/term/log.csv" \
    >"$tmp/term.txt" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q '^epoch 1/2  step 1000 ' "$tmp/term.txt" 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid
set +e
wait $pid
code=$?
set -e
[ "$code" = 143 ] || { cat "$tmp/term.txt"; fail "SIGTERM: exit $code, expected 143"; }
grep -q "^interrupted (SIGTERM) at epoch 1, batch [0-9]* of 200000: checkpoint saved" "$tmp/term.txt" || { cat "$tmp/term.txt"; fail "SIGTERM: no message"; }
[ -f "$tmp/term/m.train.safetensors" ] || fail "SIGTERM: no checkpoint"
echo "| head: exit 141 with a checkpoint, said on stderr; SIGTERM: exit 143 with a checkpoint"

# ---- [train] progress ----------------------------------------------------------------------
prog="--set data.samples=20000 --set data.batch_size=10 --set train.log_every=500"
for style in auto bar lines none; do
    # shellcheck disable=SC2086
    "$py" "$here/run-on-pty.py" "$tmp/p-$style.raw" - "$train" "$tmp/ok.ini" $prog --set train.progress=$style \
        --set "train.checkpoint=$tmp/p-$style/m.safetensors" --set "train.log=$tmp/p-$style/log.csv" ||
        fail "progress = $style: the run failed"
done
grep -q "$(printf '\r')epoch 1/2 \[" "$tmp/p-auto.raw" || fail "progress = auto on a terminal: no bar"
grep -q "$(printf '\r')epoch 1/2 \[" "$tmp/p-bar.raw" || fail "progress = bar: no bar"
grep -q "$(printf '\033')\[K" "$tmp/p-lines.raw" && fail "progress = lines: escape codes on a terminal"
grep -q '^epoch 1/2  step 500 ' "$tmp/p-lines.raw" || fail "progress = lines: no log_every lines"
grep -q '^epoch 1/2  step 500 ' "$tmp/p-none.raw" && fail "progress = none: log_every lines printed"
grep -q "$(printf '\r')epoch 1/2 \[" "$tmp/p-none.raw" && fail "progress = none: a bar"
grep -q '^epoch 2/2  loss ' "$tmp/p-none.raw" || fail "progress = none: no epoch lines"
[ "$(wc -l <"$tmp/p-none/log.steps.csv")" -gt 2 ] || fail "progress = none: no steps log"
"$train" "$tmp/ok.ini" $prog --set train.progress=bar --set "train.checkpoint=$tmp/p-file/m.safetensors" \
    --set "train.log=$tmp/p-file/log.csv" >"$tmp/p-file.txt" 2>&1 || fail "progress = bar to a file failed"
grep -q "$(printf '\r')epoch 1/2 " "$tmp/p-file.txt" || fail "progress = bar: not forced in a file"
expect_error bad_progress 2 "\[train\] progress = 'tqdm'" "$tmp/ok.ini" --set train.progress=tqdm \
    --set "train.checkpoint=$tmp/z/m.safetensors" --set "train.log=$tmp/z/log.csv"
echo "progress: auto (a bar on a terminal), bar, lines, none"

echo "train-runs: ok"
