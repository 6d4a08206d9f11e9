#!/bin/sh
# PyTorch habits in weft-train (issue 36, item 5; the schedulers' formulas against PyTorch
# are test_optim.c's, from tests/sched/gen.py):
#  - [scheduler] type = plateau steps on the validation loss (the lr halves after each
#    evaluation that is not better), and a run resumed in the middle ends bit for bit as
#    one that was not; without a validation set it is refused;
#  - type = onecycle takes the run's length for total_steps, and a total_steps shorter
#    than the run fails with PyTorch's "Tried to step" (exit 2);
#  - [train] ema_decay: the .ema file is AveragedModel's EMA of the weights of every step
#    (recomputed here from a checkpoint per step), evaluated each epoch (log columns),
#    resumed exactly, tested at the end and readable by eval;
#  - keep_best: the final test tests the best model and says so, and the last beside it;
#    each figure is what `weft-train eval` prints for that file;
#  - --version of weft-train, weft-generate, weft-info, weft-bench and weft-infer.
#   usage: train-habits.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-habits.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-habits: $*"; exit 1; }
py=$(command -v python3 || true)
[ -n "$py" ] || fail "no python3 (make deps installs it)"
. "$(dirname "$0")/lib.sh" # expect_error

cat >"$tmp/base.ini" <<INI
[runtime]
seed = 1

[data]
reader = synthetic
kind = blobs
samples = 300
features = 2
classes = 3
batch_size = 20
shuffle = true
validation_split = 0.2

[data.test]
reader = synthetic
kind = blobs
samples = 90
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
epochs = 4
checkpoint = $tmp/default/m.safetensors
log = $tmp/default/log.csv
INI
# run NAME [weft-train arguments]: a run into $tmp/NAME/
run() {
    name=$1
    shift
    "$train" "$tmp/base.ini" --set "train.checkpoint=$tmp/$name/m.safetensors" \
        --set "train.log=$tmp/$name/log.csv" "$@" >"$tmp/$name.txt" 2>&1 ||
        { cat "$tmp/$name.txt"; fail "$name: the run failed"; }
}
lr_column() { awk -F, 'NR > 1 { printf "%s ", $6 }' "$1"; }

# ---- ReduceLROnPlateau ---------------------------------------------------------------------
# threshold 100 (abs): after the first evaluation none is better, so with patience 0 every
# later one halves the lr; the log's lr is the one each epoch trained with
plateau="--set scheduler.type=plateau --set scheduler.patience=0 --set scheduler.factor=0.5
         --set scheduler.threshold=100 --set scheduler.threshold_mode=abs"
# shellcheck disable=SC2086
run plateau $plateau
[ "$(lr_column "$tmp/plateau/log.csv")" = "0.1 0.1 0.05 0.025 " ] ||
    { cat "$tmp/plateau/log.csv"; fail "plateau: lr per epoch $(lr_column "$tmp/plateau/log.csv"), expected 0.1 0.1 0.05 0.025"; }
# shellcheck disable=SC2086
run plateau2 $plateau --set train.epochs=2
# shellcheck disable=SC2086
run plateau2 $plateau --resume "$tmp/plateau2/m.safetensors"
cmp -s "$tmp/plateau/m.safetensors" "$tmp/plateau2/m.safetensors" ||
    fail "plateau: 2 epochs + 2 resumed differ from 4 (its state was not resumed)"
# shellcheck disable=SC2086
expect_error plateau_no_val 2 "\[scheduler\] type = plateau steps on the validation loss, and there is no validation set" \
    "$tmp/base.ini" $plateau --set data.validation_split=0 --set "train.checkpoint=$tmp/x/m.safetensors" \
    --set "train.log=$tmp/x/log.csv"
echo "plateau: lr 0.1 0.1 0.05 0.025 on a plateau, resumed exactly"

# ---- OneCycleLR ------------------------------------------------------------------------------
# 240 training samples / 20 = 12 steps an epoch: total_steps 48, the run's
run onecycle --set scheduler.type=onecycle --set scheduler.max_lr=0.5
grep -q "^epoch 4/4 " "$tmp/onecycle.txt" || { cat "$tmp/onecycle.txt"; fail "onecycle: did not finish"; }
# the lr of the first epoch's end is the cycle's at step 12 of 48 (pct_start 0.3: rising
# from 0.02 to 0.5 until step 13.4), of the last its end: 0.5/25/1e4 at step 48 (past 47)
first=$(awk -F, 'NR == 2 { print $6 }' "$tmp/onecycle/log.csv")
"$py" -c "import math, sys; e = 13.4; want = 0.5 + (0.02 - 0.5) / 2 * (math.cos(math.pi * 12 / e) + 1); \
sys.exit(abs(float('$first') - want) > 1e-6 * want)" || fail "onecycle: lr $first after epoch 1"
expect_error onecycle_short 2 "total_steps = 5: Tried to step 7 times. The specified number of total steps is 5" \
    "$tmp/base.ini" --set scheduler.type=onecycle --set scheduler.total_steps=5 \
    --set "train.checkpoint=$tmp/y/m.safetensors" --set "train.log=$tmp/y/log.csv"
echo "onecycle: total_steps from the run's length; a shorter one is PyTorch's error"

# ---- EMA of the weights ------------------------------------------------------------------------
# a checkpoint at every step: the average recomputed from them in float64
run emasteps --set train.epochs=1 --set train.ema_decay=0.75 --set train.save_every_steps=1 \
    --set "train.checkpoint=$tmp/emasteps/m-{step:03d}.safetensors"
"$py" - "$tmp/emasteps" <<'PY' || fail "ema: the .ema file is not the average of the steps"
import json, os, struct, sys
d = sys.argv[1]
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    out = {}
    for k, v in h.items():
        assert v["dtype"] == "F32", v
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out, meta
steps = sorted(f for f in os.listdir(d) if f.startswith("m-") and not f.endswith(".train.safetensors"))
assert len(steps) == 12, steps
avg = None
for f in steps:  # AveragedModel: the first update copies, then 0.75 a + 0.25 w
    w, _ = load(os.path.join(d, f))
    avg = {k: list(v) for k, v in w.items()} if avg is None else \
          {k: [0.75 * a + 0.25 * x for a, x in zip(avg[k], w[k])] for k in w}
ema, meta = load(os.path.join(d, "m.ema.safetensors"))
assert meta["weft.ema_updates"] == "12" and meta["weft.ema_decay"] == "0.75", meta
assert meta["weft.checkpoint"] == "step 12, after epoch 1", meta
worst = max(abs(a - e) for k in avg for a, e in zip(avg[k], ema[k]))
print("ema: largest difference from the float64 average of 12 steps: %.2e" % worst)
sys.exit(worst > 1e-5)
PY
head -1 "$tmp/emasteps/log.csv" | grep -q ',ema_val_loss,ema_val_acc$' || fail "ema: no log columns"
grep -q '^epoch 1/1 .*  ema_val_loss [0-9.]*  ema_val_acc ' "$tmp/emasteps.txt" || fail "ema: not evaluated"
# resumed: the same average as without the break
run ema --set train.ema_decay=0.9
run ema2 --set train.ema_decay=0.9 --set train.epochs=2
run ema2 --set train.ema_decay=0.9 --resume "$tmp/ema2/m.safetensors"
cmp -s "$tmp/ema/m.ema.safetensors" "$tmp/ema2/m.ema.safetensors" || fail "ema: a resumed average differs"
# the final test's figure is eval's of the file
want=$(sed -n 's/^test accuracy [0-9.]*% loss \([0-9.]*\) (90 samples), the average of the weights (ema_decay 0.9: .*m.ema.safetensors)$/\1/p' "$tmp/ema.txt")
[ -n "$want" ] || { cat "$tmp/ema.txt"; fail "ema: no test line for the average"; }
"$train" eval "$tmp/base.ini" --checkpoint "$tmp/ema/m.ema.safetensors" --set train.ema_decay=0.9 >"$tmp/ema-eval.txt" 2>&1 ||
    { cat "$tmp/ema-eval.txt"; fail "ema: eval of the .ema file failed"; }
grep -q "^eval \[data.test\]: loss $want " "$tmp/ema-eval.txt" || { cat "$tmp/ema-eval.txt"; fail "ema: eval's loss is not the test line's $want"; }
expect_error ema_one 2 "\[train\] ema_decay = 1: expected a decay in (0, 1)" "$tmp/base.ini" \
    --set train.ema_decay=1 --set "train.checkpoint=$tmp/z/m.safetensors" --set "train.log=$tmp/z/log.csv"
echo "ema: the average of every step, evaluated, resumed exactly, tested as eval tests it"

# ---- keep_best: the final test says which model ----------------------------------------------
# lr 1.5: the validation loss is lowest before the last epoch, and the two models differ
run best --set train.keep_best=true --set optimizer.lr=1.5
grep -q "^test accuracy .* (90 samples), the best model (epoch [1-3], val_loss [0-9.]*: $tmp/best/m.best.safetensors)$" "$tmp/best.txt" ||
    { cat "$tmp/best.txt"; fail "keep_best: the first test line is not the best model's"; }
grep -q "^test accuracy .* (90 samples), the last model (epoch 4)$" "$tmp/best.txt" ||
    { cat "$tmp/best.txt"; fail "keep_best: no line for the last model"; }
for which in best last; do
    file=$tmp/best/m.safetensors
    [ $which = best ] && file=$tmp/best/m.best.safetensors
    loss=$(sed -n "s/^test accuracy [0-9.]*% loss \([0-9.]*\) .*the $which model.*/\1/p" "$tmp/best.txt")
    "$train" eval "$tmp/base.ini" --checkpoint "$file" >"$tmp/eval-$which.txt" 2>&1 || fail "eval $file failed"
    grep -q "^eval \[data.test\]: loss $loss " "$tmp/eval-$which.txt" ||
        { cat "$tmp/best.txt" "$tmp/eval-$which.txt"; fail "keep_best: the $which model's test loss $loss is not eval's"; }
done
[ "$(grep -c '^test accuracy' "$tmp/best.txt")" = 2 ] &&
    [ "$(sed -n 's/^test accuracy [0-9.]*% loss \([0-9.]*\) .*/\1/p' "$tmp/best.txt" | sort -u | wc -l)" = 2 ] ||
    { cat "$tmp/best.txt"; fail "keep_best: expected two test lines of different models"; }
echo "keep_best: $(grep '^test accuracy' "$tmp/best.txt" | head -1)"

# ---- --version ---------------------------------------------------------------------------------
for app in apps/weft-train apps/weft-generate apps/weft-info bench/weft-bench bench/weft-infer; do
    out=$("$build/$app" --version) || fail "$app --version: exit $?"
    app=${app#*/}
    echo "$out" | grep -qx "$app [0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*" || fail "$app --version printed '$out'"
done
echo "--version: $("$train" --version)"
echo "train-habits: ok"
