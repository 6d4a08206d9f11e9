#!/bin/sh
# weft-train as a new user meets it (issue 15, items 1-3):
#  - the model summary (torchinfo's layout) before the first step, and errors that name the
#    --set argument that caused them, a layer that --set would add, the file and line of an
#    unknown key, the key of a missing data file (exit 2);
#  - eval and predict on a checkpoint, [train] keep_best and early stopping restoring it;
#  - the progress line through a pseudo-terminal (and tmux where installed): elapsed and
#    ETA for the epoch and the run, one line per finished epoch; Ctrl-C printing the
#    command that resumes, which resumes and says where; the CSV's partial column; the SVG
#    plot over all epochs of a resumed run, with x tick labels, valid without validation
#    data (checked by rsvg-convert or ImageMagick where installed); [train] log_every.
#   usage: train-ux.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-ux.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-ux: $*"; exit 1; }
# the system python3 (with numpy, as the lead's machines have it), else any
py=$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 || true)

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
validation_split = 0.25

[data.test]
reader = synthetic
kind = blobs
samples = 60
features = 2
classes = 3

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
epochs = 3
checkpoint = $tmp/run/m.safetensors
log = $tmp/run/log.csv
INI

expect_fixed=1 # the patterns below are fixed text
. "$(dirname "$0")/lib.sh" # expect_error

# ---- 1. the summary, and errors that say where the mistake is -------------------------
"$train" "$tmp/ok.ini" >"$tmp/ok.txt" 2>&1 || { cat "$tmp/ok.txt"; fail "the good config failed"; }
for want in '^Layer \(type\) +Output Shape +Param #$' \
    '^layer\.fc1 \(Linear\) +\[20, 8\] +24$' \
    '^layer\.act \(ReLU\) +\[20, 8\] +--$' \
    '^layer\.fc2 \(Linear\) +\[20, 3\] +27$' \
    '^Total params: 51$' '^Trainable params: 51$' '^Non-trainable params: 0$' '^Params size \(MB\): 0\.00$'; do
    grep -qE -- "$want" "$tmp/ok.txt" || { cat "$tmp/ok.txt"; fail "summary: no line matching '$want'"; }
done
# the summary comes before the first epoch
[ "$(grep -n 'Total params' "$tmp/ok.txt" | cut -d: -f1)" -lt "$(grep -n '^epoch 1/3' "$tmp/ok.txt" | cut -d: -f1)" ] ||
    fail "summary: printed after the first epoch"
echo "summary: ok"

expect_error set_width 2 "--set layer.fc2.in_features=16 (set on the command line, over $tmp/ok.ini): [layer.fc2] (Linear) does not take its input, of shape [1, 8]" \
    "$tmp/ok.ini" --set layer.fc2.in_features=16
expect_error set_type 2 "--set layer.fc2.type=linaer (set on the command line, over $tmp/ok.ini): [layer.fc2] type = 'linaer'" \
    "$tmp/ok.ini" --set layer.fc2.type=linaer
expect_error set_new_layer 2 "--set layer.fc9.type=relu: $tmp/ok.ini has no [layer.fc9] section (its layers: fc1, act, fc2); --set changes the keys of a layer, it does not add one" \
    "$tmp/ok.ini" --set layer.fc9.type=relu
expect_error set_unknown_key 2 "--set train.epoch=5: [train] unknown key 'epoch' (did you mean 'epochs'?)" \
    "$tmp/ok.ini" --set train.epoch=5
expect_error set_bad_value 2 "--set optimizer.lr=fast (set on the command line, over $tmp/ok.ini): [optimizer] lr = 'fast'" \
    "$tmp/ok.ini" --set optimizer.lr=fast
# a validation set whose samples the model does not take: at load, not after an epoch
expect_error val_width 2 "[layer.fc1] (Linear) does not take its input, of shape [1, 3] for one sample of [data.val]" \
    "$tmp/ok.ini" --set data.validation_split=0 --set data.val.reader=synthetic --set data.val.features=3 \
    --set data.val.samples=30
# a value of the file is still the file's
sed 's/^lr = 0.1$/lr = fast/' "$tmp/ok.ini" >"$tmp/badlr.ini"
expect_error file_bad_value 2 "$tmp/badlr.ini: [optimizer] lr = 'fast'" "$tmp/badlr.ini" --set train.epochs=2
# an unknown key of the file: its line
sed 's/^epochs = 3$/epochs = 3\ncolour = blue/' "$tmp/ok.ini" >"$tmp/colour.ini"
line=$(grep -n '^colour' "$tmp/colour.ini" | cut -d: -f1)
expect_error file_unknown_key 2 "$tmp/colour.ini: line $line: [train] unknown key 'colour'" "$tmp/colour.ini"
# a data file that does not exist: its key, exit 2
cat >"$tmp/idx.ini" <<INI
[data]
reader = idx
images = $tmp/no-such-images.idx
labels = $tmp/no-such-labels.idx

[layer.fc]
type = linear
in_features = 4
out_features = 10

[train]
checkpoint = $tmp/run/idx.safetensors
log =
INI
expect_error missing_data 2 "[data] images = $tmp/no-such-images.idx" "$tmp/idx.ini"

# ---- 2. eval, predict, keep_best ------------------------------------------------------
grep -q '^test accuracy' "$tmp/ok.txt" || { cat "$tmp/ok.txt"; fail "training printed no test figures"; }
"$train" eval "$tmp/ok.ini" --checkpoint "$tmp/run/m.safetensors" >"$tmp/eval.txt" 2>&1 ||
    { cat "$tmp/eval.txt"; fail "eval failed"; }
cat "$tmp/eval.txt"
# the test figures of the trained model, the same as training's last line said
acc_train=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' "$tmp/ok.txt")
acc_eval=$(sed -n 's/^eval \[data.test\]: loss [0-9.]*  accuracy \([0-9.]*\)%.*/\1/p' "$tmp/eval.txt")
[ -n "$acc_eval" ] && [ "$acc_train" = "$acc_eval" ] ||
    fail "eval: accuracy '$acc_eval', training's test accuracy '$acc_train'"
"$train" eval "$tmp/ok.ini" --checkpoint "$tmp/run/m.safetensors" --data data.val >"$tmp/evalv.txt" 2>&1 ||
    { cat "$tmp/evalv.txt"; fail "eval --data data.val failed"; }
grep -q '^eval \[data.val (the validation_split of \[data\])\]: loss .* (50 samples)' "$tmp/evalv.txt" ||
    { cat "$tmp/evalv.txt"; fail "eval --data data.val: no figures for the 50 held-out samples"; }
expect_error eval_no_ckpt 2 "eval and predict need --checkpoint" eval "$tmp/ok.ini"
expect_error eval_bad_data 2 "--data data.nope: the config has no such dataset" \
    eval "$tmp/ok.ini" --checkpoint "$tmp/run/m.safetensors" --data data.nope

"$train" predict "$tmp/ok.ini" --checkpoint "$tmp/run/m.safetensors" --out "$tmp/pred.csv" >"$tmp/pred.txt" 2>&1 ||
    { cat "$tmp/pred.txt"; fail "predict to CSV failed"; }
"$train" predict "$tmp/ok.ini" --checkpoint "$tmp/run/m.safetensors" --out "$tmp/pred.npy" >/dev/null 2>&1 ||
    fail "predict to NPY failed"
head -1 "$tmp/pred.csv" | grep -qx 'index,class,prob_0,prob_1,prob_2' || { head -3 "$tmp/pred.csv"; fail "predict: CSV header"; }
[ "$(wc -l <"$tmp/pred.csv")" = 61 ] || fail "predict: expected 60 rows and a header"
expect_error predict_ext 2 "--out $tmp/pred.txt: expected a file name ending in .csv or .npy" \
    predict "$tmp/ok.ini" --checkpoint "$tmp/run/m.safetensors" --out "$tmp/pred.txt"
if [ -n "$py" ] && "$py" -c 'import numpy' 2>/dev/null; then
    "$py" - "$tmp/pred.csv" "$tmp/pred.npy" <<'PY' || fail "predict: the CSV and NPY disagree"
import sys, numpy as np
rows = np.loadtxt(sys.argv[1], delimiter=",", skiprows=1)
probs = np.load(sys.argv[2])
assert probs.shape == (60, 3) and probs.dtype == np.float32, (probs.shape, probs.dtype)
assert np.allclose(probs.sum(1), 1, atol=1e-5), "probabilities sum to 1"
assert (rows[:, 0] == np.arange(60)).all(), "the index column counts the samples in order"
assert (rows[:, 1] == probs.argmax(1)).all(), "the class is the argmax"
assert np.allclose(rows[:, 2:], probs, atol=1e-5), "the CSV's probabilities are the NPY's"
print("predict: CSV and NPY agree, 60 x 3 probabilities")
PY
else
    echo "predict: NPY not read back (no python3 with numpy)"
fi
# unlabelled data named with --data: a CSV of features alone
printf 'x,y\n0.5,0.5\n-1,2\n3,-0.5\n' >"$tmp/unlabelled.csv"
"$train" predict "$tmp/ok.ini" --checkpoint "$tmp/run/m.safetensors" --data data.new \
    --set data.new.reader=csv --set "data.new.path=$tmp/unlabelled.csv" --out "$tmp/new.csv" >"$tmp/new.txt" 2>&1 ||
    { cat "$tmp/new.txt"; fail "predict on unlabelled data failed"; }
[ "$(wc -l <"$tmp/new.csv")" = 4 ] || { cat "$tmp/new.csv"; fail "predict: 3 unlabelled rows expected"; }
echo "predict: ok"

# keep_best with early stopping: lr 0 keeps the validation loss flat, so patience 1 stops
# at epoch 2 and the best is epoch 1's
expect_error best_no_val 2 "[train] keep_best = true keeps the model with the best validation loss, and there is no validation set" \
    "$tmp/ok.ini" --set train.keep_best=true --set data.validation_split=0
"$train" "$tmp/ok.ini" --set train.keep_best=true --set train.patience=1 --set train.epochs=5 \
    --set optimizer.lr=0 --set "train.checkpoint=$tmp/best/m.safetensors" --set train.log= >"$tmp/best.txt" 2>&1 ||
    { cat "$tmp/best.txt"; fail "keep_best run failed"; }
grep -q "^early stopping: " "$tmp/best.txt" || { cat "$tmp/best.txt"; fail "keep_best: no early stop"; }
grep -qF "restored the best model (epoch 1, val_loss" "$tmp/best.txt" || { cat "$tmp/best.txt"; fail "keep_best: not restored"; }
[ -f "$tmp/best/m.best.safetensors" ] && [ -f "$tmp/best/m.safetensors" ] || fail "keep_best: the best and the last files"
if [ -n "$py" ]; then
    "$py" - "$tmp/best/m.best.safetensors" <<'PY' || fail "keep_best: metadata"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
assert meta["weft.best_epoch"] == "1" and meta["weft.best_metric"] == "val_loss", meta
float(meta["weft.best_value"])
print("keep_best: metadata", {k: v for k, v in meta.items() if k.startswith("weft.best")})
PY
fi
"$train" eval "$tmp/ok.ini" --checkpoint "$tmp/best/m.best.safetensors" >"$tmp/evalbest.txt" 2>&1 ||
    { cat "$tmp/evalbest.txt"; fail "eval of the best file failed"; }
grep -q "(the best model: epoch 1, val_loss" "$tmp/evalbest.txt" || { cat "$tmp/evalbest.txt"; fail "eval: best not named"; }
echo "keep_best: ok"

# ---- 3. the run loop --------------------------------------------------------------------
# through a pseudo-terminal: the progress line, then one line per epoch in its place
big="--set data.samples=4000 --set data.batch_size=10 --set train.log= --set train.checkpoint=$tmp/pty/m.safetensors"
if [ -n "$py" ]; then
    COLUMNS=120 "$py" - "$train" "$tmp/ok.ini" "$tmp/pty.raw" $big >/dev/null <<'PY' || fail "pty: the run failed"
import os, pty, sys
out = open(sys.argv[3], "wb")
def read(fd):
    data = os.read(fd, 4096)
    out.write(data)
    return data
status = pty.spawn([sys.argv[1], sys.argv[2]] + sys.argv[4:], read)  # echoes to stdout
out.close()
sys.exit(os.waitstatus_to_exitcode(status))
PY
    "$py" - "$tmp/pty.raw" <<'PY' || fail "pty: the progress line"
import re, sys
raw = open(sys.argv[1], "rb").read().decode()
lines = raw.replace("\r\n", "\n").split("\n")
bars = [seg for line in lines for seg in line.split("\r") if re.match(r"epoch \d/3 \[[#.]+\] \d+/300 ", seg)]
assert bars, "no progress bar in:\n" + raw[-2000:]
last = bars[-1]
assert re.search(r" epoch \d+s<\d+s  run \d+s<\d+s", re.sub(r"\x1b\[K", "", last)), last
# each finished epoch: one line, the bar erased before it (\r and erase-line), no bar left
done = [l for l in lines if re.search(r"epoch \d/3  loss", l)]
assert len(done) == 3, done
for l in done:
    visible = l.split("\r")[-1]
    assert visible.startswith("\x1b[K") or re.match(r"epoch \d/3  loss", visible), repr(l[-200:])
    assert "[#" not in visible and ".]" not in visible, repr(visible)
print("pty: progress with elapsed<ETA for epoch and run; one line per epoch:", done[-1].split("\r")[-1].replace("\x1b[K", "")[:100])
PY
else
    echo "pty: not checked (no python3)"
fi
if command -v tmux >/dev/null 2>&1; then
    sock="$tmp/tmux.sock"
    tmux -S "$sock" new-session -d -x 100 -y 60 "'$train' '$tmp/ok.ini' $big --set train.checkpoint=$tmp/tmux/m.safetensors; echo EXIT=\$?; sleep 30" ||
        fail "tmux: no session started"
    for _ in $(seq 1 600); do
        tmux -S "$sock" capture-pane -p >"$tmp/tmux.txt" 2>/dev/null || true
        grep -q '^EXIT=' "$tmp/tmux.txt" && break
        sleep 0.2
    done
    tmux -S "$sock" kill-server 2>/dev/null || true
    grep -q '^EXIT=0' "$tmp/tmux.txt" || { cat "$tmp/tmux.txt"; fail "tmux: the run did not end well"; }
    [ "$(grep -c '^epoch [0-9]/3  loss' "$tmp/tmux.txt")" = 3 ] || { cat "$tmp/tmux.txt"; fail "tmux: expected three epoch lines on the screen"; }
    grep -q '\[#*\.*\]' "$tmp/tmux.txt" && { cat "$tmp/tmux.txt"; fail "tmux: a progress bar was left on the screen"; }
    echo "tmux: three epoch lines, no bar left on a 100-column screen"
else
    echo "tmux: not checked (not installed)"
fi

# Ctrl-C: the command that resumes, with the same --set arguments
rm -rf "$tmp/int"
"$train" "$tmp/ok.ini" --set data.samples=40000 --set data.batch_size=1 --set train.epochs=2 --set train.log_every=20 \
    --set "train.checkpoint=$tmp/int/m.safetensors" --set "train.log=$tmp/int/log.csv" >"$tmp/int.txt" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
    grep -q '^epoch 1/2  step 40 ' "$tmp/int.txt" 2>/dev/null && break
    sleep 0.02
done
kill -INT "$pid"
set +e
wait "$pid"
code=$?
set -e
[ "$code" = 130 ] || { cat "$tmp/int.txt"; fail "Ctrl-C: exit $code, expected 130"; }
grep -q '^interrupted at epoch 1, batch [0-9]* of 30000: checkpoint saved' "$tmp/int.txt" || { cat "$tmp/int.txt"; fail "Ctrl-C: no message"; }
resume=$(sed -n 's/^resume with: //p' "$tmp/int.txt")
case "$resume" in
"$train $tmp/ok.ini --set data.samples=40000 --set data.batch_size=1 --set train.epochs=2 --set train.log_every=20 --set train.checkpoint=$tmp/int/m.safetensors --set train.log=$tmp/int/log.csv --resume $tmp/int/m.safetensors") ;;
*) fail "Ctrl-C: the resume command is '$resume'" ;;
esac
echo "Ctrl-C: $resume"
tail -1 "$tmp/int/log.csv" | grep -q '^1,.*,1,[0-9]*$' || { cat "$tmp/int/log.csv"; fail "CSV: the interrupted epoch is not marked partial"; }
# the printed command, run as printed (through the shell): it says where it resumed
sh -c "$resume" >"$tmp/resumed.txt" 2>&1 || { cat "$tmp/resumed.txt"; fail "the printed resume command failed"; }
grep -q "^resumed from $tmp/int/m.safetensors at epoch 1, after batch [0-9]* of 30000 (step [0-9]*)" "$tmp/resumed.txt" ||
    { cat "$tmp/resumed.txt"; fail "resume: where it resumed is not said"; }
head -1 "$tmp/int/log.csv" | grep -qx 'epoch,train_loss,train_acc,val_loss,val_acc,lr,samples_per_s,seconds,partial,peak_allocated_bytes' ||
    fail "CSV: header"
awk -F, 'NR > 1 { print $1 "," $9 }' "$tmp/int/log.csv" | tr '\n' ' ' | grep -qx '1,1 1,1 2,0 ' ||
    { cat "$tmp/int/log.csv"; fail "CSV: rows (epoch,partial) should be 1,1 1,1 2,0"; }
# log_every: a line and a steps-log row every 20 steps
grep -q '^epoch 2/2  step [0-9]*  batch [0-9]*/30000  loss ' "$tmp/resumed.txt" || fail "log_every: no lines"
head -1 "$tmp/int/log.steps.csv" | grep -qx 'step,epoch,batch,loss,lr,samples_per_s,seconds' || fail "log_every: steps log header"
awk -F, 'NR > 1 && $1 % 20 != 0 { bad = 1 } END { exit bad }' "$tmp/int/log.steps.csv" || fail "log_every: a row off the 20-step grid"
echo "resume: $(grep '^resumed from' "$tmp/resumed.txt")"

# the plot: a 3-epoch run without validation data, resumed to 6 epochs, draws 1..6
rm -rf "$tmp/plot"
"$train" "$tmp/ok.ini" --set data.validation_split=0 --set "train.checkpoint=$tmp/plot/m.safetensors" \
    --set "train.log=$tmp/plot/log.csv" >"$tmp/plot1.txt" 2>&1 || { cat "$tmp/plot1.txt"; fail "plot run 1"; }
"$train" "$tmp/ok.ini" --set data.validation_split=0 --set "train.checkpoint=$tmp/plot/m.safetensors" \
    --set "train.log=$tmp/plot/log.csv" --set train.epochs=6 --resume "$tmp/plot/m.safetensors" >"$tmp/plot2.txt" 2>&1 ||
    { cat "$tmp/plot2.txt"; fail "plot run 2 (resumed)"; }
svg="$tmp/plot/log.svg"
grep -q 'points=""' "$svg" && fail "SVG: an empty polyline"
for k in 1 2 3 4 5 6; do
    grep -q "text-anchor=\"middle\">$k</text>" "$svg" || { cat "$svg"; fail "SVG: no x tick label $k"; }
done
[ "$(grep -c '<polyline' "$svg")" = 2 ] || { cat "$svg"; fail "SVG: expected the train loss and accuracy lines alone"; }
npoints=$(grep '<polyline' "$svg" | head -1 | sed 's/.*points="\([^"]*\)".*/\1/' | wc -w)
[ "$npoints" = 6 ] || fail "SVG: the loss line has $npoints points, expected 6 epochs"
rendered=no
if command -v rsvg-convert >/dev/null 2>&1; then
    rsvg-convert "$svg" -o "$tmp/plot.png" || fail "rsvg-convert rejected the plot"
    rendered=rsvg-convert
fi
if command -v convert >/dev/null 2>&1 && convert -version 2>/dev/null | grep -q ImageMagick; then
    convert "$svg" "$tmp/plot2.png" 2>"$tmp/convert.txt" || { cat "$tmp/convert.txt"; fail "ImageMagick rejected the plot"; }
    rendered="$rendered convert"
fi
[ "$rendered" = no ] && echo "SVG: no renderer installed (rsvg-convert, convert): not rendered" ||
    echo "SVG: 6 epochs, ticks 1..6, rendered by $rendered"
# the interrupted run's plot, with its validation data: valid too
grep -q 'points=""' "$tmp/int/log.svg" && fail "SVG (resumed run): an empty polyline"
if command -v rsvg-convert >/dev/null 2>&1; then
    rsvg-convert "$tmp/int/log.svg" -o "$tmp/int.png" || fail "rsvg-convert rejected the resumed run's plot"
fi
# early stopping counts on across a resume: with these settings the validation loss is
# best at epoch 2 and worse at 3, 4 and 5, so patience 3 stops after epoch 5, unbroken or
# resumed after epoch 4 (a counter restarted on resume would run all 6 epochs)
pat="--set optimizer.lr=1 --set optimizer.momentum=0.9 --set train.patience=3"
"$train" "$tmp/ok.ini" $pat --set train.epochs=6 --set train.checkpoint="$tmp/pat1/m.safetensors" \
    --set train.log="$tmp/pat1/log.csv" >"$tmp/pat1.txt" 2>&1 || { cat "$tmp/pat1.txt"; fail "patience: the unbroken run failed"; }
grep -q "early stopping: validation loss has not improved for 3 epochs" "$tmp/pat1.txt" ||
    { cat "$tmp/pat1.txt"; fail "patience: the unbroken run did not stop after 3 epochs without improvement"; }
"$train" "$tmp/ok.ini" $pat --set train.epochs=4 --set train.checkpoint="$tmp/pat2/m.safetensors" \
    --set train.log="$tmp/pat2/log.csv" >"$tmp/pat2.txt" 2>&1 || { cat "$tmp/pat2.txt"; fail "patience: the first half failed"; }
"$train" "$tmp/ok.ini" $pat --set train.epochs=6 --set train.checkpoint="$tmp/pat2/m.safetensors" \
    --set train.log="$tmp/pat2/log.csv" --resume "$tmp/pat2/m.safetensors" >"$tmp/pat3.txt" 2>&1 ||
    { cat "$tmp/pat3.txt"; fail "patience: the resumed run failed"; }
grep -q "early stopping: validation loss has not improved for 3 epochs" "$tmp/pat3.txt" ||
    { cat "$tmp/pat3.txt"; fail "patience: the resumed run forgot how long the loss had not improved"; }
[ "$(grep -c '^5,' "$tmp/pat1/log.csv")" = 1 ] && ! grep -q '^6,' "$tmp/pat1/log.csv" &&
    ! grep -q '^6,' "$tmp/pat2/log.csv" || fail "patience: both runs should end at epoch 5"
echo "patience: early stopping after epoch 5, unbroken and resumed after epoch 4"
# a shape error that only training meets (the last batch holds one sample, which
# BatchNorm refuses in training mode; the check at load runs in evaluation mode) names
# its layer too, found by running the batch's forward again layer by layer
sed -e 's/^\[layer.act\]$/[layer.bn]\ntype = batchnorm1d\nnum_features = 8\n\n[layer.act]/' \
    -e 's/^batch_size = 20$/batch_size = 149/' "$tmp/ok.ini" >"$tmp/bn.ini"
grep -q '^type = batchnorm1d$' "$tmp/bn.ini" || fail "blame: the batchnorm layer was not added to the config"
expect_error blame_in_training 2 "[layer.bn] Expected more than 1 value per channel when training, got input size [1, 8]" \
    "$tmp/bn.ini" --set train.checkpoint="$tmp/bn/m.safetensors" --set train.log="$tmp/bn/log.csv"
echo "blame: an error met in training names [layer.bn]"
echo "train-ux: ok"
