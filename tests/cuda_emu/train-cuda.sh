#!/bin/sh
# weft-train with runtime.backend = cuda on weft's emulated device (tests/cuda_emu), against
# the same configs on the cpu: the MNIST MLP and CNN, the character LSTM and the GPT, a few
# optimizer steps each, then the MLP with pinned batches from reader threads and under bf16
# and f16 autocast (f16 against the cpu's float32: below). The losses (training,
# validation, test) must agree within
#   float32:   |cuda - cpu| <= 1e-3 |cpu| + 1e-4
#   bf16/f16:  |cuda - cpu| <= 2e-2 |cpu| + 1e-3
# Why these: both devices run the same front ends, the same initial weights (Philox, the
# same numbers on either device) and the same batches; they differ only in the order of
# their sums (the cpu's OpenBLAS/oneDNN blocks and OpenMP splits against the kernels'
# trees and the emulated cuBLAS's dot products), which in float32 moves a loss by about
# 1e-6 of itself per step, and four steps of SGD or Adam do not grow that past 1e-4: 1e-3
# leaves a tenfold margin and still fails a kernel that is wrong for one element in a
# thousand. Under autocast each matmul's output is rounded to 8 (bf16) or 11 (f16) bits,
# one ulp apart on either device as the sums' order changes: 2e-2 is two bf16 ulps on the
# loss (bench/gpu-check.sh allows 2% for whole runs).
# The test sets are cut to their first 256 samples (a test pass over 10000 images would
# take the emulator minutes); the text models evaluate 2 validation batches. The CNN, the
# LSTM and the GPT train on small batches (16, 8 and 4), the GPT with 2 of its 4 layers:
# the same kernels along the same paths (the sequence length, widths and heads are the
# configs'), at a quarter of the emulator's time (CI runs this twice, once under ASan).
#   usage: train-cuda.sh BUILD_DIR SOURCE_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-train-cuda.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-cuda: $*"; exit 1; }
cd "$src"

# The first 256 images and labels of MNIST's test set, as IDX files.
python3 - "$src/data/mnist" "$tmp" <<'PY' || fail "could not cut the MNIST test set"
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, item in (("t10k-images-idx3-ubyte", 784), ("t10k-labels-idx1-ubyte", 1)):
    with gzip.open(f"{src}/{name}.gz", "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = (magic & 0xff)
    header = bytearray(data[:4 + 4 * dims])
    struct.pack_into(">I", header, 4, 256)
    with open(f"{dst}/{name}", "wb") as f:
        f.write(header + data[4 + 4 * dims:4 + 4 * dims + 256 * item])
PY
mnist_test="--set data.test.images=$tmp/t10k-images-idx3-ubyte --set data.test.labels=$tmp/t10k-labels-idx1-ubyte"

# run NAME CONFIG BACKEND SETTINGS...: weft-train, its output in $tmp/NAME.txt.
run() {
    rname=$1 rconfig=$2 rbackend=$3
    shift 3
    "$train" "$rconfig" --set runtime.backend="$rbackend" --set train.checkpoint="$tmp/$rname.safetensors" \
        --set train.log="$tmp/$rname.csv" "$@" >"$tmp/$rname.txt" 2>&1 ||
        { cat "$tmp/$rname.txt"; fail "$rname: weft-train failed"; }
}

# col CSV COLUMN: the last row's value of the column ("" when the log has none).
col() {
    awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
                       { v = k ? $k : "" } END { print v }' "$1"
}

# agree NAME WHAT CPU CUDA RTOL ATOL
agree() {
    [ -n "$3" ] && [ -n "$4" ] || fail "$1: no $2 to compare (cpu '$3', cuda '$4')"
    awk -v a="$3" -v b="$4" -v r="$5" -v t="$6" 'BEGIN {
        d = a - b; d = d < 0 ? -d : d; m = a < 0 ? -a : a
        exit !(d <= r * m + t) }' || fail "$1: $2 differs: cpu $3, cuda $4"
    echo "train-cuda: $1: $2 cpu $3, cuda $4: agree"
}

# compare NAME CONFIG RTOL ATOL SETTINGS...: the cpu against cuda; $cuda_only: settings
# for the cuda run alone.
cuda_only=""
compare() {
    name=$1 config=$2 rtol=$3 atol=$4
    shift 4
    run "$name-cpu" "$config" cpu "$@"
    # shellcheck disable=SC2086 # the settings split on purpose
    run "$name-cuda" "$config" cuda "$@" $cuda_only
    grep -q " on cuda:0 (emulated)," "$tmp/$name-cuda.txt" ||
        fail "$name: weft-train does not name the device as emulated: $(head -1 "$tmp/$name-cuda.txt")"
    for c in train_loss val_loss; do
        a=$(col "$tmp/$name-cpu.csv" "$c") b=$(col "$tmp/$name-cuda.csv" "$c")
        [ -z "$a$b" ] && continue
        if [ "$a" = nan ]; then # no validation set: none on either side
            [ "$b" = nan ] || fail "$name: $c: cpu nan, cuda $b"
            continue
        fi
        agree "$name" "$c" "$a" "$b" "$rtol" "$atol"
    done
    a=$(sed -n 's/^test.* loss \([0-9.e+-]*\) .*/\1/p' "$tmp/$name-cpu.txt")
    b=$(sed -n 's/^test.* loss \([0-9.e+-]*\) .*/\1/p' "$tmp/$name-cuda.txt")
    [ -z "$a$b" ] || agree "$name" "test loss" "$a" "$b" "$rtol" "$atol"
}

steps="--set train.max_iters=4 --set train.eval_interval=4 --set train.log_interval=1"
# shellcheck disable=SC2086 # the settings split on purpose
compare mlp configs/mnist-mlp.ini 1e-3 1e-4 $steps $mnist_test
# shellcheck disable=SC2086
compare cnn configs/mnist-cnn.ini 1e-3 1e-4 $steps $mnist_test --set data.batch_size=16
# shellcheck disable=SC2086
compare lstm configs/lstm-char.ini 1e-3 1e-4 $steps --set train.eval_iters=2 --set data.batch_size=8
# shellcheck disable=SC2086
compare gpt configs/gpt-char.ini 1e-3 1e-4 $steps --set train.eval_iters=2 --set data.batch_size=4 \
    --set model.n_layer=2
# shellcheck disable=SC2086 # batches from 2 reader threads, pinned, copied on the side queue
compare mlp-pinned configs/mnist-mlp.ini 1e-3 1e-4 $steps $mnist_test --set data.workers=2 \
    --set data.pin_memory=true
# shellcheck disable=SC2086
compare mlp-bf16 configs/mnist-mlp.ini 2e-2 1e-3 $steps $mnist_test --set train.precision=bf16
# f16 autocast is cuda's alone (the cpu's autocast takes bf16 only, as PyTorch 1.13's
# AutocastCPU): against the cpu in float32, within the bf16 bounds, as f16 rounds to 11
# bits where bf16 rounds to 8 (bf16 moves the MLP's losses by 1e-4 of themselves).
cuda_only="--set train.precision=f16"
# shellcheck disable=SC2086
compare mlp-f16 configs/mnist-mlp.ini 2e-2 1e-3 $steps $mnist_test
cuda_only=""
echo "train-cuda: every model agrees"
