#!/bin/sh
# weft-train quantize end to end (docs/quantization.md), on the MNIST MLP trained for one
# epoch and the byte LSTM for a few steps: the static int8 model is at most 0.3x the
# float32 file, stays within 2 points of its accuracy, is the same file when made twice
# (calibration is deterministic), and eval and predict read it back; per-tensor weights,
# the min/max observer and dynamic quantization (MLP and LSTM) run; the argument mistakes
# and malformed int8 files (a missing scale, a weight of the wrong dtype) are refused
# naming what is wrong.
#   usage: train-quantize.sh BUILD_DIR SOURCE_ROOT
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$2" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-quantize.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-quantize: $*"; exit 1; }
. "$root/tests/lib.sh"

mlp="$root/configs/mnist-mlp.ini"
"$train" "$mlp" --set train.epochs=1 --set train.checkpoint="$tmp/mlp.safetensors" \
    --set train.log="$tmp/log.csv" >"$tmp/train.txt" 2>&1 || { cat "$tmp/train.txt"; fail "training failed"; }

# quantize: run, and the figures it prints
quantize() { # NAME ARGS...: quantize the MLP into $tmp/NAME.int8.safetensors
    name=$1
    shift
    "$train" quantize "$mlp" --checkpoint "$tmp/mlp.safetensors" --out "$tmp/$name.int8.safetensors" \
        "$@" >"$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; fail "$name: quantize failed"; }
    cat "$tmp/$name.txt"
}
quantize static
grep -q '^quantize: static int8 (weights per channel symmetric, activations uint8 per tensor, histogram observer), calibrated on 512 samples of \[data\]$' \
    "$tmp/static.txt" || fail "static: no summary line"
fp32=$(sed -n 's/^  fp32 .*accuracy \([0-9.]*\)%$/\1/p' "$tmp/static.txt")
int8=$(sed -n 's/^  int8 .*accuracy \([0-9.]*\)%$/\1/p' "$tmp/static.txt")
[ -n "$fp32" ] && [ -n "$int8" ] || fail "static: no accuracy rows"
awk -v a="$fp32" -v b="$int8" 'BEGIN { exit !(b > a - 2.0) }' || fail "static: int8 $int8% against fp32 $fp32%"
ratio=$(sed -n 's/^saved .*, \([0-9.]*\)x the float32 file.*/\1/p' "$tmp/static.txt")
awk -v r="$ratio" 'BEGIN { exit !(r > 0 && r <= 0.3) }' || fail "static: the int8 file is ${ratio}x the float32 one"

# the same calibration data gives the same file
quantize again
cmp -s "$tmp/static.int8.safetensors" "$tmp/again.int8.safetensors" || fail "two quantizations differ"

# eval and predict read the int8 model: eval's accuracy is quantize's int8 row
"$train" eval "$mlp" --checkpoint "$tmp/static.int8.safetensors" >"$tmp/eval.txt" 2>&1 ||
    { cat "$tmp/eval.txt"; fail "eval of the int8 model failed"; }
grep -q "accuracy $int8%" "$tmp/eval.txt" || { cat "$tmp/eval.txt"; fail "eval: not the int8 accuracy $int8%"; }
grep -q '^int8 model: static quantization' "$tmp/eval.txt" || fail "eval: does not say it is int8"
"$train" predict "$mlp" --checkpoint "$tmp/static.int8.safetensors" --out "$tmp/p.csv" >/dev/null 2>&1 ||
    fail "predict with the int8 model failed"
[ "$(wc -l <"$tmp/p.csv")" = 2001 ] || fail "predict: expected a header and 2000 rows"

# the other schemes
quantize per_tensor --per-tensor --calib 100
grep -q 'weights per tensor symmetric.*calibrated on 100 samples' "$tmp/per_tensor.txt" || fail "per-tensor: summary"
quantize minmax --observer minmax
grep -q 'minmax observer' "$tmp/minmax.txt" || fail "minmax: summary"
quantize dynamic --dynamic
grep -q '^quantize: dynamic int8' "$tmp/dynamic.txt" || fail "dynamic: summary"
"$train" eval "$mlp" --checkpoint "$tmp/dynamic.int8.safetensors" >/dev/null 2>&1 || fail "eval of the dynamic model failed"

# mistakes, named
expect_error no_out 2 "quantize needs --out" quantize "$mlp" --checkpoint "$tmp/mlp.safetensors"
expect_error calib_zero 2 "calib 0: expected a number of samples >= 1" \
    quantize "$mlp" --checkpoint "$tmp/mlp.safetensors" --out "$tmp/x.safetensors" --calib 0
expect_error bad_observer 2 "observer kl: expected minmax, moving_average or histogram" \
    quantize "$mlp" --checkpoint "$tmp/mlp.safetensors" --out "$tmp/x.safetensors" --observer kl
expect_error dynamic_calib 2 "dynamic calibrates nothing" \
    quantize "$mlp" --checkpoint "$tmp/mlp.safetensors" --out "$tmp/x.safetensors" --dynamic --calib 9
expect_error flag_elsewhere 2 "belong to quantize" eval "$mlp" --checkpoint "$tmp/mlp.safetensors" --dynamic
expect_error twice 2 "is already an int8 checkpoint (quant.mode = static): quantize its float32 source" \
    quantize "$mlp" --checkpoint "$tmp/static.int8.safetensors" --out "$tmp/x.safetensors"

# malformed int8 files: a scale gone, a weight of another dtype
edit() { # IN OUT KEY ACTION: drop KEY, or relabel its dtype as ACTION
    /usr/bin/env python3 - "$@" <<'EOF'
import json, struct, sys
src, dst, key, action = sys.argv[1:]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, blobs, at = {"__metadata__": header.pop("__metadata__", {})}, [], 0
for name, e in header.items():
    if name == key and action == "drop":
        continue
    lo, hi = e["data_offsets"]
    blob = data[lo:hi]
    out[name] = {"dtype": action if name == key else e["dtype"], "shape": e["shape"],
                 "data_offsets": [at, at + len(blob)]}
    blobs.append(blob)
    at += len(blob)
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
EOF
}
edit "$tmp/static.int8.safetensors" "$tmp/no_scale.safetensors" 1.weight_scale drop
expect_error missing_scale 2 "missing '1.weight_scale' (float32 \[256\])" \
    eval "$mlp" --checkpoint "$tmp/no_scale.safetensors"
edit "$tmp/static.int8.safetensors" "$tmp/u8_weight.safetensors" 3.weight U8
expect_error wrong_dtype 2 "'3.weight' is uint8 \[128, 256\], expected int8 \[128, 256\]" \
    eval "$mlp" --checkpoint "$tmp/u8_weight.safetensors"

# the LSTM: input projection and head int8, dynamically
lstm="$root/configs/lstm-char.ini"
"$train" "$lstm" --set train.max_iters=20 --set train.eval_interval=20 --set train.eval_iters=2 \
    --set train.checkpoint="$tmp/lstm.safetensors" --set train.log="$tmp/lstm.csv" >"$tmp/lstm.txt" 2>&1 ||
    { cat "$tmp/lstm.txt"; fail "LSTM training failed"; }
"$train" quantize "$lstm" --checkpoint "$tmp/lstm.safetensors" --out "$tmp/lstm.int8.safetensors" \
    --dynamic >"$tmp/lstm_q.txt" 2>&1 || { cat "$tmp/lstm_q.txt"; fail "LSTM: quantize failed"; }
cat "$tmp/lstm_q.txt"
l32=$(sed -n 's/^  fp32 *loss \([0-9.]*\)$/\1/p' "$tmp/lstm_q.txt")
l8=$(sed -n 's/^  int8 *loss \([0-9.]*\)$/\1/p' "$tmp/lstm_q.txt")
awk -v a="$l32" -v b="$l8" 'BEGIN { exit !(a > 0 && b - a < 0.05 && a - b < 0.05) }' ||
    fail "LSTM: int8 loss $l8 against fp32 $l32"
"$train" eval "$lstm" --checkpoint "$tmp/lstm.int8.safetensors" >/dev/null 2>&1 || fail "eval of the int8 LSTM failed"
echo "train-quantize: ok"
