#!/bin/sh
# weft-train with [train] precision = bf16 (autocast: bf16 GEMMs through oneDNN, float32
# softmax/loss, float32 master weights) against the same run in float32: configs/mnist-mlp.ini
# for 3 epochs, same seed and data order. The bf16 test accuracy must be within 0.5% of the
# float32 one (issue 12). f16 (loss scaling) must train too.
#   usage: train-bf16.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
src=${WEFT_SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-bf16.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
run() { # precision
    "$build/apps/weft-train" "$src/configs/mnist-mlp.ini" --set train.precision="$1" \
        --set train.epochs=3 --set cpu.wait_policy=passive --set data.workers=1 \
        --set train.checkpoint="$tmp/$1/model.safetensors" --set train.log="$tmp/$1/log.csv" \
        >"$tmp/$1.txt" 2>&1 || { cat "$tmp/$1.txt"; echo "train-bf16: the $1 run failed"; exit 1; }
    grep '^test accuracy' "$tmp/$1.txt" | sed 's/^test accuracy \([0-9.]*\)%.*/\1/'
}
fp32=$(run fp32)
bf16=$(run bf16)
f16=$(run f16)
cat "$tmp/bf16.txt"
echo "test accuracy: fp32 $fp32%, bf16 $bf16%, f16 $f16%"
awk -v a="$bf16" -v b="$fp32" 'BEGIN { exit !(a >= b - 0.5) }' ||
    { echo "train-bf16: bf16 reached $bf16%, more than 0.5% below fp32's $fp32%"; exit 1; }
awk -v a="$f16" -v b="$fp32" 'BEGIN { exit !(a >= b - 2) }' ||
    { echo "train-bf16: f16 reached $f16%, more than 2% below fp32's $fp32%"; exit 1; }
# The f16 run's checkpoint carries the loss scaler's state.
grep -q 'scaler.scale' "$tmp/f16/model.train.safetensors" ||
    { echo "train-bf16: the f16 checkpoint has no scaler state"; exit 1; }
# A misspelt precision names the accepted values.
if "$build/apps/weft-train" "$src/configs/mnist-mlp.ini" --set train.precision=bf61 \
    >"$tmp/bad.txt" 2>&1; then
    echo "train-bf16: precision = bf61 was accepted"; exit 1
fi
grep -q "fp32" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; exit 1; }
echo "train-bf16: ok"
