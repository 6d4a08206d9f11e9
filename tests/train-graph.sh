#!/bin/sh
# weft-train on a graph model ([model] type = graph: layers that name their inputs) and
# with frozen layers ([train] freeze, [layer.*] requires_grad = false): the summary shows
# what each layer reads and the trainable count; a wiring mistake or a layer whose inputs
# do not fit is reported before the first step naming the section; a frozen parameter
# keeps its values and gets no optimizer state (optim.SGD over the parameters that require
# grad, as a PyTorch script writes it), and freezing everything is refused.
#   usage: train-graph.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-graph.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-graph: $*"; exit 1; }
py=$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 || true)
[ -n "$py" ] || { echo "train-graph: no python3 to read the checkpoints: skipped"; exit 77; }

# fc1 -> act -> fc2 -> res (fc2 + act) -> act2 -> head
cat >"$tmp/graph.ini" <<INI
[runtime]
seed = 1

[data]
reader = synthetic
kind = blobs
samples = 60
features = 2
classes = 3
batch_size = 20

[model]
type = graph

[layer.fc1]
type = linear
in_features = 2
out_features = 8

[layer.act]
type = relu

[layer.fc2]
type = linear
in_features = 8
out_features = 8

[layer.res]
type = add
inputs = fc2, act

[layer.act2]
type = relu

[layer.head]
type = linear
in_features = 8
out_features = 3

[optimizer]
type = sgd
lr = 0.1
momentum = 0.9

[train]
epochs = 2
checkpoint = $tmp/run/m.safetensors
log = $tmp/run/log.csv
INI

. "$(dirname "$0")/lib.sh" # expect_error

run() { # name [weft-train arguments...]: trains graph.ini into $tmp/NAME/
    name=$1
    shift
    "$train" "$tmp/graph.ini" --set "train.checkpoint=$tmp/$name/m.safetensors" \
        --set "train.log=$tmp/$name/log.csv" "$@" >"$tmp/$name.txt" 2>&1 ||
        { cat "$tmp/$name.txt"; fail "$name: weft-train failed"; }
}

# ---- the graph trains, and its summary shows what each layer reads --------------------
run plain
grep -q 'Connected to' "$tmp/plain.txt" || { cat "$tmp/plain.txt"; fail "no 'Connected to' column"; }
grep -q '^layer.res (Add) .* fc2, act$' "$tmp/plain.txt" ||
    { cat "$tmp/plain.txt"; fail "the add's row does not name its inputs"; }
grep -q '^Trainable params: 123$' "$tmp/plain.txt" || { cat "$tmp/plain.txt"; fail "trainable count"; }
grep -q '^test accuracy\|^epoch 2/2' "$tmp/plain.txt" || fail "plain: no epoch 2"
echo "plain: $(grep '^epoch 2/2' "$tmp/plain.txt")"

# ---- freezing -------------------------------------------------------------------------
run frozen1 --set train.freeze=fc1 --set train.epochs=1
run frozen2 --set train.freeze=fc1
grep -q '^Trainable params: 99$' "$tmp/frozen2.txt" || { cat "$tmp/frozen2.txt"; fail "freeze: trainable count"; }
grep -q '^Non-trainable params: 24$' "$tmp/frozen2.txt" || fail "freeze: non-trainable count"
tensors "$tmp/frozen1/m.safetensors" >"$tmp/f1.sum"
tensors "$tmp/frozen2/m.safetensors" >"$tmp/f2.sum"
tensors "$tmp/plain/m.safetensors" >"$tmp/p.sum"
for k in fc1.weight fc1.bias; do
    [ "$(grep "^$k " "$tmp/f1.sum")" = "$(grep "^$k " "$tmp/f2.sum")" ] ||
        fail "freeze: $k changed between epoch 1 and epoch 2"
done
[ "$(grep '^head.weight ' "$tmp/f1.sum")" != "$(grep '^head.weight ' "$tmp/f2.sum")" ] ||
    fail "freeze: head.weight did not train"
[ "$(grep '^fc1.weight ' "$tmp/f2.sum")" != "$(grep '^fc1.weight ' "$tmp/p.sum")" ] ||
    fail "freeze: fc1.weight of the unfrozen run did not train either"
# the optimizer's state: one momentum buffer per trainable parameter (4 of 6), indexed as
# PyTorch's optimizer over the trainable ones
tensors "$tmp/frozen2/m.train.safetensors" >"$tmp/f2.state"
n=$(grep -c '^state\.[0-9]*\.momentum_buffer ' "$tmp/f2.state" || true)
[ "$n" = 4 ] || { cat "$tmp/f2.state"; fail "freeze: $n momentum buffers, expected 4"; }
n=$(tensors "$tmp/plain/m.train.safetensors" | grep -c '^state\.[0-9]*\.momentum_buffer ' || true)
[ "$n" = 6 ] || fail "plain: $n momentum buffers, expected 6"
echo "freeze: fc1 unchanged, 4 momentum buffers of 6"

# requires_grad = false in the layer's section is the same freeze
run rg --set layer.fc1.requires_grad=false
tensors "$tmp/rg/m.safetensors" | cmp -s - "$tmp/f2.sum" ||
    fail "requires_grad = false trained other values than freeze = fc1"
echo "requires_grad: the same values as freeze"

# ---- mistakes, before the first step ----------------------------------------------------
expect_error bad_input 2 "set layer.res.inputs=fc2, akt (set on the command line, over .*graph.ini): \[layer.res\] inputs = 'fc2, akt': no layer named 'akt' (did you mean 'act'?)" \
    "$tmp/graph.ini" --set "layer.res.inputs=fc2, akt"
expect_fixed=1
expect_error shapes 2 "graph.ini: [layer.res] (Add) does not take its inputs, fc2 [1, 6], act [1, 8] for one sample of [data]: The size of tensor a (6) must match the size of tensor b (8)" \
    "$tmp/graph.ini" --set layer.fc2.out_features=6
expect_fixed=0
expect_error freeze_all 2 'optimizer got an empty parameter list: every parameter of the model is frozen' \
    "$tmp/graph.ini" --set "train.freeze=fc1, fc2, head"
expect_error freeze_typo 2 "\[train\] freeze = 'fc3': no layer or module named 'fc3'" \
    "$tmp/graph.ini" --set train.freeze=fc3
echo "train-graph: ok"
