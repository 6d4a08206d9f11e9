#!/bin/sh
# weft-train with a layer type that a plugin adds: the INI file names `type = scale`,
# whose provider (tests/fixtures/weft-fixture-layer.so) is found through its manifest on
# [runtime] plugin_path, loaded, and trained through like any built-in layer.
#   usage: train-plugin-layer.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-layer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
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
shuffle = true

[layer.fc1]
type = linear
in_features = 2
out_features = 16

[layer.act]
type = relu

[layer.halve]
type = scale           ; the plugin's layer
factor = 0.5

[layer.fc2]
type = linear
in_features = 16
out_features = 3

[loss]
type = cross_entropy

[optimizer]
type = sgd
lr = 0.5

[train]
epochs = 8
checkpoint = $tmp/model.safetensors
log = $tmp/log.csv
INI
"$build/apps/weft-train" "$tmp/blobs.ini" >"$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
cat "$tmp/out.txt"
[ -f "$tmp/model.safetensors" ] || { echo "train-plugin-layer: no checkpoint"; exit 1; }
# It learned: the last epoch's training accuracy is high on separable blobs.
acc=$(grep '^epoch 8/8' "$tmp/out.txt" | sed 's/.* acc \([0-9.]*\)%.*/\1/')
awk -v a="$acc" 'BEGIN { exit !(a >= 90) }' ||
    { echo "train-plugin-layer: accuracy $acc% after 8 epochs, expected >= 90%"; exit 1; }
# A typo in the plugin layer's own key is caught like any other, and named as the cause
# of the missing key.
sed 's/^factor = 0.5/factr = 0.5/' "$tmp/blobs.ini" >"$tmp/typo.ini"
if "$build/apps/weft-train" "$tmp/typo.ini" >"$tmp/typo.txt" 2>&1; then
    echo "train-plugin-layer: a misspelt key was accepted"; exit 1
fi
grep -q "\[layer.halve\] unknown key 'factr' (did you mean 'factor'?)" "$tmp/typo.txt" ||
    { cat "$tmp/typo.txt"; exit 1; }
echo "train-plugin-layer: ok"
