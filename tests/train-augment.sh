#!/bin/sh
# weft-train with data augmentation (issue 19): a run stopped at step 13 and resumed to 30
# with 0 workers ends bit for bit where an uninterrupted run with 2 workers does, so the
# augmented samples depend on (seed, epoch, sample) alone; the test set, read in the
# transforms' evaluation form, and a sample shape changed by random_crop reach the model.
#   usage: train-augment.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-augment.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-augment: $*"; exit 1; }
[ -f "$src/data/mnist/train-images-idx3-ubyte.gz" ] || { echo "train-augment: no data/mnist: skipped"; exit 77; }

cat >"$tmp/aug.ini" <<INI
[runtime]
seed = 5

[data]
reader = idx
images = $src/data/mnist/train-images-idx3-ubyte.gz
labels = $src/data/mnist/train-labels-idx1-ubyte.gz
batch_size = 400
shuffle = true
workers = 2
seed = 11
transforms = random_crop, random_horizontal_flip, random_affine, random_erasing, normalize
mean = 0.1307
std = 0.3081

[data.transform.random_crop]
size = 24
padding = 2
padding_mode = reflect

[data.transform.random_affine]
degrees = 10
translate = 0.1, 0.1
interpolation = bilinear

[data.transform.random_erasing]
p = 0.3

[data.test]
reader = idx
images = $src/data/mnist/t10k-images-idx3-ubyte.gz
labels = $src/data/mnist/t10k-labels-idx1-ubyte.gz

[layer.flatten]
type = flatten

[layer.fc]
type = linear
in_features = 576
out_features = 10

[optimizer]
type = sgd
lr = 0.1

[train]
max_iters = 30
log_interval = 10
eval_interval = 30
checkpoint = $tmp/full.safetensors
log = $tmp/full.csv
INI

"$train" "$tmp/aug.ini" >"$tmp/full.txt" 2>&1 || { cat "$tmp/full.txt"; fail "training failed"; }
grep -q '^step 30/30' "$tmp/full.txt" || { cat "$tmp/full.txt"; fail "no step 30"; }
grep -qi 'test.*acc' "$tmp/full.txt" || { cat "$tmp/full.txt"; fail "no test accuracy"; }

"$train" "$tmp/aug.ini" --set data.workers=0 --set train.max_iters=13 \
    --set "train.checkpoint=$tmp/part.safetensors" --set "train.log=$tmp/part.csv" \
    >"$tmp/part.txt" 2>&1 || { cat "$tmp/part.txt"; fail "part 1 failed"; }
"$train" "$tmp/aug.ini" --set data.workers=0 --set "train.checkpoint=$tmp/part.safetensors" \
    --set "train.log=$tmp/part.csv" --resume "$tmp/part.safetensors" >"$tmp/resumed.txt" 2>&1 ||
    { cat "$tmp/resumed.txt"; fail "resuming failed"; }
grep -q '^step 30/30' "$tmp/resumed.txt" || fail "the resumed run did not reach step 30"
cmp "$tmp/full.safetensors" "$tmp/part.safetensors" ||
    fail "a run resumed at step 13 (0 workers) differs from an uninterrupted one (2 workers)"

# A typo in a transform's key is named with the section.
if "$train" "$tmp/aug.ini" --set data.transform.random_crop.sise=3 >"$tmp/bad.txt" 2>&1; then
    fail "a misspelt transform key was accepted"
fi
grep -q "\[data.transform.random_crop\] unknown key 'sise'" "$tmp/bad.txt" ||
    { cat "$tmp/bad.txt"; fail "the misspelt key is not named with its section"; }
echo "train-augment: ok"
