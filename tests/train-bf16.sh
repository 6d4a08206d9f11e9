#!/bin/sh
# weft-train with [train] precision = bf16 (autocast: bf16 GEMMs through oneDNN, float32
# softmax/loss, float32 master weights) against the same run in float32: configs/mnist-mlp.ini
# for 3 epochs, same seed and data order. The bf16 test accuracy must be within 0.5% of the
# float32 one (issue 12). f16 on the cpu is refused naming the key, as PyTorch 1.13's
# AutocastCPU takes bfloat16 only (issue 32; f16 with loss scaling is CUDA's).
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
cat "$tmp/bf16.txt"
echo "test accuracy: fp32 $fp32%, bf16 $bf16%"
awk -v a="$bf16" -v b="$fp32" 'BEGIN { exit !(a >= b - 0.5) }' ||
    { echo "train-bf16: bf16 reached $bf16%, more than 0.5% below fp32's $fp32%"; exit 1; }
# f16 on the cpu: refused before training, naming the key and PyTorch's reason.
if "$build/apps/weft-train" "$src/configs/mnist-mlp.ini" --set train.precision=f16 \
    >"$tmp/f16.txt" 2>&1; then
    echo "train-bf16: precision = f16 on the cpu was accepted"; exit 1
fi
grep -q "\[train\] precision = f16 on cpu: Currently, AutocastCPU only support Bfloat16" "$tmp/f16.txt" ||
    { cat "$tmp/f16.txt"; echo "train-bf16: f16 on the cpu was not refused by name"; exit 1; }
grep -q '^epoch' "$tmp/f16.txt" && { echo "train-bf16: f16 trained before it was refused"; exit 1; }
# A misspelt precision names the accepted values.
if "$build/apps/weft-train" "$src/configs/mnist-mlp.ini" --set train.precision=bf61 \
    >"$tmp/bad.txt" 2>&1; then
    echo "train-bf16: precision = bf61 was accepted"; exit 1
fi
grep -q "fp32" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; exit 1; }
echo "train-bf16: ok"
