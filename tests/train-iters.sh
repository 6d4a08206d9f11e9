#!/bin/sh
# weft-train counted in optimizer steps ([train] max_iters): progress and evaluation lines
# at their intervals, the per-step CSV log, a resumed run that ends bit for bit where an
# uninterrupted one does, gradient accumulation that divides the loss (two micro-batches
# of 25 step as one batch of 50), an explicit [data.val] set, and a language model's
# loss over every position of [B, T, V] logits with tokens/s and no accuracy.
#   usage: train-iters.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-iters.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-iters: $*"; exit 1; }

. "$(dirname "$0")/blobs-model.sh"
{
    cat <<INI
[runtime]
seed = 3

INI
    blobs_model
    cat <<INI
[optimizer]
type = adamw
lr = 0.01
decay = matrices

[scheduler]
type = warmup_cosine
warmup_iters = 5
lr_decay_iters = 30
min_lr = 0.001

[train]
max_iters = 30
accumulate = 2
eval_interval = 10
log_interval = 5
grad_clip = 1.0
checkpoint = $tmp/full.safetensors
log = $tmp/full.csv
INI
} >"$tmp/blobs.ini"

# ---- the loop: lines, log, schedule --------------------------------------------------
"$train" "$tmp/blobs.ini" >"$tmp/full.txt" 2>&1 || { cat "$tmp/full.txt"; fail "training failed"; }
cat "$tmp/full.txt"
[ "$(grep -c '^step [0-9]*/30 ' "$tmp/full.txt")" = 6 ] || fail "expected 6 progress lines (every 5 of 30 steps)"
[ "$(grep -c '^step [0-9]*: train loss .*, val loss ' "$tmp/full.txt")" = 3 ] ||
    fail "expected 3 evaluations (steps 10, 20, 30)"
grep -q '^step 30/30 .* samples/s .* ms/step  elapsed [0-9hms]*  ETA 0s$' "$tmp/full.txt" || fail "no final progress line"
head -1 "$tmp/full.csv" | grep -qx 'step,epoch,train_loss,val_loss,lr,samples_per_s,seconds,peak_allocated_bytes' ||
    fail "CSV header: $(head -1 "$tmp/full.csv")"
[ "$(cut -d, -f1 "$tmp/full.csv" | tr '\n' ' ')" = "step 10 20 30 " ] || fail "CSV steps"
# 480 training samples / 25 = 20 batches (19.2, the last one short) = 10 steps an epoch.
[ "$(cut -d, -f2 "$tmp/full.csv" | tail -1)" = 3 ] || fail "30 steps of 2 micro-batches should end in epoch 3"
# nanoGPT's get_lr after the last step: it = 30 = lr_decay_iters gives min_lr.
[ "$(cut -d, -f5 "$tmp/full.csv" | tail -1)" = 0.001 ] || fail "lr at the end: $(cut -d, -f5 "$tmp/full.csv" | tail -1)"
grep -q 'val loss' "$tmp/full.txt" && grep -q '^step 30/30' "$tmp/full.txt" || fail "output"
[ -f "$tmp/full.svg" ] || fail "no SVG plot"

# ---- resume: 13 steps, then on to 30, equals 30 straight ------------------------------
"$train" "$tmp/blobs.ini" --set train.max_iters=13 --set "train.checkpoint=$tmp/part.safetensors" \
    --set "train.log=$tmp/part.csv" >"$tmp/part.txt" 2>&1 || { cat "$tmp/part.txt"; fail "part 1 failed"; }
"$train" "$tmp/blobs.ini" --set "train.checkpoint=$tmp/part.safetensors" --set "train.log=$tmp/part.csv" \
    --resume "$tmp/part.safetensors" >"$tmp/resumed.txt" 2>&1 ||
    { cat "$tmp/resumed.txt"; fail "resuming failed"; }
grep -q '^step 30/30' "$tmp/resumed.txt" || fail "the resumed run did not reach step 30"
grep -q '^step 15/30' "$tmp/resumed.txt" || fail "the resumed run did not continue at step 14"
cmp "$tmp/full.safetensors" "$tmp/part.safetensors" ||
    fail "a run resumed at step 13 differs from an uninterrupted one"

# ---- accumulation: 2 x 25 samples step as 1 x 50 (the loss is divided by 2) ------------
for a in 1 2; do
    b=$((50 / a))
    "$train" "$tmp/blobs.ini" --set data.shuffle=false --set train.max_iters=8 \
        --set "train.accumulate=$a" --set "data.batch_size=$b" --set optimizer.type=sgd \
        --set optimizer.lr=0.5 --set optimizer.decay=all --set scheduler.type=none \
        --set train.grad_clip=0 --set "train.checkpoint=$tmp/acc$a.safetensors" \
        --set "train.log=$tmp/acc$a.csv" >"$tmp/acc$a.txt" 2>&1 ||
        { cat "$tmp/acc$a.txt"; fail "accumulate=$a failed"; }
done
v1=$(tail -1 "$tmp/acc1.csv" | cut -d, -f4)
v2=$(tail -1 "$tmp/acc2.csv" | cut -d, -f4)
awk -v a="$v1" -v b="$v2" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }' ||
    fail "val loss after 8 steps: $v1 with batch 50, $v2 with 2 x 25 accumulated"

# ---- an explicit validation set and a language model -----------------------------------
awk 'BEGIN { for (i = 0; i < 400; i++) printf "the cat sat on the mat. " }' >"$tmp/text.txt"
cat >"$tmp/lm.ini" <<INI
[runtime]
seed = 1

[data]
reader = text
path = $tmp/text.txt
block_size = 8
batch_size = 4
shuffle = true

[data.val]
reader = text
path = $tmp/text.txt
block_size = 8
split = val

[model]
type = gpt
n_layer = 1
n_head = 2
n_embd = 16
block_size = 8
vocab_size = 256

[optimizer]
type = adamw
lr = 0.01
decay = matrices

[train]
max_iters = 40
eval_interval = 20
eval_iters = 5
log_interval = 20
checkpoint = $tmp/lm.safetensors
log = $tmp/lm.csv
INI
"$train" "$tmp/lm.ini" >"$tmp/lm.txt" 2>&1 || { cat "$tmp/lm.txt"; fail "the language model failed"; }
cat "$tmp/lm.txt"
grep -q '^step 40/40 .* tok/s ' "$tmp/lm.txt" || fail "no tokens/s for a language model"
grep -q ' acc ' "$tmp/lm.txt" && fail "accuracy printed for a language model"
# eval_iters = 5 batches of 4 windows
grep -q '^step 40: train loss [0-9.]*, val loss [0-9.]* (20 samples' "$tmp/lm.txt" ||
    fail "eval_iters = 5 should evaluate 20 windows"
head -1 "$tmp/lm.csv" | grep -q ',tokens_per_s,' || fail "CSV throughput column"
# A repeated sentence: the loss falls well under log(256) = 5.55 in 40 steps.
val=$(tail -1 "$tmp/lm.csv" | cut -d, -f4)
awk -v v="$val" 'BEGIN { exit !(v < 3.0) }' || fail "val loss $val after 40 steps, expected < 3"
# validation_split and [data.val] together are refused.
if "$train" "$tmp/lm.ini" --set data.validation_split=0.1 >"$tmp/both.txt" 2>&1; then
    fail "validation_split with [data.val] was accepted"
fi
grep -q 'keep one' "$tmp/both.txt" || { cat "$tmp/both.txt"; fail "message"; }
echo "train-iters: ok"
