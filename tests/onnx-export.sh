#!/bin/sh
# weft-train export, one model family per run: the family's config trained a few steps,
# exported, the file checked by onnx.checker (full_check, Debian's python3-onnx) with its
# names and symbolic dims (tests/onnx_check.py), and run by ONNX Runtime (onnxruntime-node)
# on N random inputs per shape against weft's forward (weft-train export --check N): batch
# 1 and 7, and for text models sequence lengths 1, 17 and block_size, within 1e-4.
#   usage: onnx-export.sh BUILD_DIR SOURCE_ROOT FAMILY N
# FAMILY: mlp cnn cnn_bn resnet layers lstm gru rnn gpt gpt_opset20 sparse plugin.
# Exit 77 (skipped) where python3 has no onnx module or node has no onnxruntime-node
# (`make onnx-deps` installs both).
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$2" && pwd)
family=$3
n=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-onnx.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "onnx-export $family: $*"; exit 1; }

. "$root/tests/onnx-peers.sh"

train="$build/apps/weft-train"
steps="--set train.max_iters=10 --set train.eval_interval=10 --set train.eval_iters=1 --set train.log_interval=10"
ckpt="$tmp/model.safetensors"
no_op=

# run_family CONFIG "SETS" OPSET INPUTS OUTPUT [export arguments...]: trains CONFIG with
# SETS for a few steps, exports it (with the extra arguments) and checks the file.
run_family() {
    config=$1 sets=$2 opset=$3 inputs=$4 output=$5
    shift 5
    # shellcheck disable=SC2086
    "$train" "$config" --overwrite $sets $steps --set train.checkpoint="$ckpt" --set train.log="$tmp/log.csv" \
        >"$tmp/train.txt" 2>&1 || { cat "$tmp/train.txt"; fail "training failed"; }
    # shellcheck disable=SC2086
    "$train" export "$config" $sets --checkpoint "$ckpt" --out "$tmp/model.onnx" --opset "$opset" \
        --check "$n" "$@" >"$tmp/export.txt" 2>&1 || { cat "$tmp/export.txt"; fail "export failed"; }
    cat "$tmp/export.txt"
    grep -q "within the tolerance 0.0001" "$tmp/export.txt" || fail "no check within 1e-4"
    "$python" "$root/tests/onnx_check.py" "$tmp/model.onnx" "$ckpt" "$opset" "$inputs" "$output" \
        ${no_op:+--no-op "$no_op"} || fail "onnx_check found problems"
}

# The shapes --check covered: one line per batch size (and sequence length).
expect_shapes() {
    for label in "$@"; do
        grep -q "^check: $label: $n inputs, largest" "$tmp/export.txt" || fail "no check of $label"
    done
}

c="$root/configs"
rnn2="--set layer.lstm.num_layers=2 --set layer.lstm.bidirectional=true --set layer.head.in_features=256"
tokens="input:batch,sequence"
case $family in
mlp)
    run_family "$c/mnist-mlp.ini" "" 17 "input:batch,1,28,28" "output:batch,10"
    expect_shapes "batch 1" "batch 7"
    # --latency (bench/onnx-export.sh's figures): both sides timed
    "$train" export "$c/mnist-mlp.ini" --checkpoint "$ckpt" --out "$tmp/model.onnx" --latency 5 \
        >"$tmp/latency.txt" 2>&1 || { cat "$tmp/latency.txt"; fail "--latency failed"; }
    cat "$tmp/latency.txt"
    grep -q "^latency: weft batch 1: median" "$tmp/latency.txt" || fail "no weft latency"
    grep -q "^latency: onnxruntime batch 1: median" "$tmp/latency.txt" || fail "no ORT latency" ;;
cnn)
    run_family "$c/mnist-cnn.ini" "" 17 "input:batch,1,28,28" "output:batch,10"
    expect_shapes "batch 1" "batch 7" ;;
cnn_bn)
    run_family "$root/tests/onnx/mnist-cnn-bn.ini" "" 17 "input:batch,1,28,28" "output:batch,10"
    expect_shapes "batch 1" "batch 7"
    grep -q "BatchNormalization" "$tmp/model.onnx" || fail "no BatchNormalization node unfolded"
    # folded: one Conv per Conv+BatchNorm, the same outputs
    no_op=BatchNormalization
    run_family "$root/tests/onnx/mnist-cnn-bn.ini" "" 17 "input:batch,1,28,28" "output:batch,10" \
        --fold-batchnorm ;;
resnet)
    # a graph model: the residual adds as Add nodes over two branches, BatchNorm unfolded,
    # then folded into the convolutions
    run_family "$c/mnist-resnet.ini" "" 17 "input:batch,1,28,28" "output:batch,10"
    expect_shapes "batch 1" "batch 7"
    grep -q "b1_add" "$tmp/model.onnx" || fail "no node named after the residual add"
    no_op=BatchNormalization
    run_family "$c/mnist-resnet.ini" "" 17 "input:batch,1,28,28" "output:batch,10" \
        --fold-batchnorm ;;
layers)
    run_family "$root/tests/onnx/layers.ini" "" 17 "input:batch,1,28,28" "output:batch,10"
    expect_shapes "batch 1" "batch 7" ;;
lstm)
    run_family "$c/lstm-char.ini" "$rnn2" 17 "$tokens" "logits:batch,sequence,256"
    expect_shapes "batch 1, sequence 1" "batch 1, sequence 17" "batch 1, sequence 64" \
        "batch 7, sequence 1" "batch 7, sequence 17" "batch 7, sequence 64" ;;
gru)
    run_family "$c/lstm-char.ini" "$rnn2 --set layer.lstm.type=gru" 17 "$tokens" \
        "logits:batch,sequence,256"
    expect_shapes "batch 1, sequence 1" "batch 7, sequence 17" "batch 7, sequence 64" ;;
rnn)
    run_family "$c/lstm-char.ini" "$rnn2 --set layer.lstm.type=rnn --set layer.lstm.nonlinearity=relu" \
        17 "$tokens" "logits:batch,sequence,256"
    expect_shapes "batch 1, sequence 1" "batch 7, sequence 64" ;;
gpt)
    run_family "$c/gpt-char.ini" "" 17 "$tokens" "logits:batch,sequence,256"
    expect_shapes "batch 1, sequence 1" "batch 1, sequence 17" "batch 1, sequence 64" \
        "batch 7, sequence 1" "batch 7, sequence 17" "batch 7, sequence 64"
    # fixed sizes: static dims, one shape checked
    run_family "$c/gpt-char.ini" "" 17 "input:3,17" "logits:3,17,256" --batch 3 --seq 17
    expect_shapes "batch 3, sequence 17" ;;
gpt_opset20)
    # ONNX's own Gelu op, and the weights as external data next to the model
    run_family "$c/gpt-char.ini" "--set model.gelu=tanh" 20 "$tokens" "logits:batch,sequence,256" \
        --external-data
    [ -s "$tmp/model.onnx.data" ] || fail "no external data file"
    grep -q "model.onnx.data" "$tmp/model.onnx" || fail "the model does not name its data file" ;;
sparse)
    # a small libsvm set of the sparse example's kind
    "$python" "$root/scripts/make-sparse-libsvm.py" --out "$tmp/svm" --rows 2000 --test-rows 200 \
        --features 5000 --informative 500 >/dev/null
    svm="--set data.path=$tmp/svm/train.svm --set data.test.path=$tmp/svm/test.svm"
    svm="$svm --set data.features=5000 --set data.test.features=5000 --set layer.fc.in_features=5000"
    run_family "$c/sparse-logreg.ini" "$svm" 17 "indices:batch,nnz+values:batch,nnz" "output:batch,2"
    expect_shapes "batch 1" "batch 7" ;;
plugin)
    # a plugin's layer type that exports itself (tests/fixtures/fixture_layer.c: shift)
    cat >"$tmp/blobs.ini" <<INI
[runtime]
seed = 1
plugin_path = $build/tests/fixtures

[data]
reader = synthetic
kind = blobs
samples = 600
features = 2
classes = 3
batch_size = 50

[layer.fc1]
type = linear
in_features = 2
out_features = 16

[layer.shift]
type = shift
offset = 0.25

[layer.act]
type = relu

[layer.fc2]
type = linear
in_features = 16
out_features = 3

[loss]
type = cross_entropy

[optimizer]
type = sgd
lr = 0.5
INI
    run_family "$tmp/blobs.ini" "" 17 "input:batch,2" "output:batch,3"
    grep -q "Add" "$tmp/model.onnx" || fail "no Add node from the plugin's layer" ;;
*)
    fail "unknown family" ;;
esac
echo "onnx-export $family: ok"
