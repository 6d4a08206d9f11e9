#!/bin/sh
# weft-train export given requests it cannot honour: a layer without an ONNX form (a
# plugin's, an LSTM's proj_size), options out of range, paths that cannot be written, a
# checkpoint of another model, a sequence beyond the GPT's block_size. Each is a clear
# error naming what is wrong, exit 2, and leaves no file behind (an existing one is kept
# as it was). Needs neither onnx nor ONNX Runtime.
#   usage: onnx-errors.sh BUILD_DIR SOURCE_ROOT
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$2" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-onnx-errors.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
fail() { echo "onnx-errors: $*"; exit 1; }
. "$root/tests/lib.sh"
expect_fixed=1
steps="--set train.max_iters=2 --set train.eval_interval=2 --set train.eval_iters=1 --set train.log_interval=2"
c="$root/configs"

# trained CONFIG NAME [sets...]: a checkpoint $tmp/NAME.safetensors of CONFIG after 2 steps.
trained() {
    config=$1 name=$2
    shift 2
    "$train" "$config" "$@" $steps --set train.checkpoint="$tmp/$name.safetensors" \
        --set train.log="$tmp/$name.csv" >"$tmp/$name-train.txt" 2>&1 ||
        { cat "$tmp/$name-train.txt"; fail "training $name failed"; }
}

# no_files: the failed export left nothing in $tmp/out (no model, no data, no temporary).
no_files() {
    left=$(ls -A "$tmp/out")
    [ -z "$left" ] || fail "$1: files left behind: $left"
}

mkdir "$tmp/out"
trained "$c/mnist-mlp.ini" mlp
mlp="$c/mnist-mlp.ini --checkpoint $tmp/mlp.safetensors"
out="--out $tmp/out/model.onnx"

# shellcheck disable=SC2086
{
expect_error opset_low 2 "--opset 9: weft writes opsets 17 to 21" export $mlp $out --opset 9
expect_error opset_text 2 "--opset latest: expected a positive whole number" export $mlp $out --opset latest
expect_error batch_zero 2 "--batch 0: expected dynamic or a positive whole number" export $mlp $out --batch 0
expect_error seq_dense 2 "--seq 17: the model's input is not a sequence of token ids" export $mlp $out --seq 17
expect_error check_zero 2 "--check -1: expected a positive whole number" export $mlp $out --check -1
expect_error atol_alone 2 "--atol belongs to --check N" export $mlp $out --atol 1e-3
expect_error unknown_flag 2 "unexpected argument '--dynamo'" export $mlp $out --dynamo
expect_error no_out 2 "export needs --out MODEL.onnx" export $mlp
no_files options
}

# Paths: a parent that is a file, a folder in the file's place. The temporary file is
# removed when the rename fails.
touch "$tmp/afile"
# shellcheck disable=SC2086
expect_error parent_file 2 "cannot write '$tmp/afile/model.onnx' (creating the temporary file" \
    export $mlp --out "$tmp/afile/model.onnx"
mkdir "$tmp/out/model.onnx"
# shellcheck disable=SC2086
expect_error out_is_dir 2 "cannot write '$tmp/out/model.onnx' (renaming" export $mlp $out
rmdir "$tmp/out/model.onnx"
no_files paths

# A checkpoint of another model: load_state_dict's error, naming the file.
# shellcheck disable=SC2086
expect_error wrong_checkpoint 2 "Error(s) in loading state_dict for Sequential" \
    export "$c/lstm-char.ini" --checkpoint "$tmp/mlp.safetensors" $out
no_files checkpoint

# An existing model is kept as it was when an export fails.
echo "the previous model" >"$tmp/out/model.onnx"
# shellcheck disable=SC2086
expect_error keeps_old 2 "Error(s) in loading state_dict" \
    export "$c/lstm-char.ini" --checkpoint "$tmp/mlp.safetensors" $out
[ "$(cat "$tmp/out/model.onnx")" = "the previous model" ] || fail "the existing model was changed"
rm "$tmp/out/model.onnx"

# A plugin's layer type without an onnx_export method, named with its place.
cat >"$tmp/blobs.ini" <<INI
[runtime]
seed = 1
plugin_path = $build/tests/fixtures

[data]
reader = synthetic
kind = blobs
samples = 200
features = 2
classes = 3
batch_size = 50

[layer.fc1]
type = linear
in_features = 2
out_features = 8

[layer.halve]
type = scale
factor = 0.5

[layer.fc2]
type = linear
in_features = 8
out_features = 3

[loss]
type = cross_entropy

[optimizer]
type = sgd
lr = 0.5
INI
trained "$tmp/blobs.ini" blobs
# shellcheck disable=SC2086
expect_error plugin_layer 2 "ONNX export: layer 1 (Scale): Scale has no ONNX export (its module type 'scale' has no onnx_export method)" \
    export "$tmp/blobs.ini" --checkpoint "$tmp/blobs.safetensors" $out
no_files plugin_layer

# An LSTM with proj_size: ONNX's LSTM has none.
proj="--set layer.lstm.proj_size=32 --set layer.head.in_features=32"
# shellcheck disable=SC2086
trained "$c/lstm-char.ini" proj $proj
# shellcheck disable=SC2086
expect_error proj_size 2 "ONNX export: layer 1 (LSTM): LSTM(proj_size=32) cannot be exported: ONNX's LSTM has no projection of the hidden state (proj_size)" \
    export "$c/lstm-char.ini" $proj --checkpoint "$tmp/proj.safetensors" $out
no_files proj_size

# A fixed sequence longer than the GPT's block_size.
trained "$c/gpt-char.ini" gpt --set model.n_layer=1
# shellcheck disable=SC2086
expect_error seq_too_long 2 "Cannot forward sequence of length 65, block size is only 64" \
    export "$c/gpt-char.ini" --set model.n_layer=1 --checkpoint "$tmp/gpt.safetensors" $out --seq 65
no_files seq_too_long
echo "onnx-errors: ok"
