#!/bin/sh
# Values and files that once crashed, hung or misled weft-train (issue 33), each now
# refused before the first step with exit 2 and a message naming the key:
#  - sizes from the config: a random_crop padding whose buffer size wrapped (a heap
#    overflow), a batch_size of 10^18, a bucket_mb out of a double's int64 range;
#  - special files (a FIFO, a directory) as a data path, the config or --resume: checked
#    without opening them, so a FIFO never blocks;
#  - a model too narrow for the classes (sparse_linear too), a 1-D labels file given as
#    images, a vocabulary too small for the tokens.
# And the exit-code rule of docs/config.md: 2 for what the config, the command line or the
# files they name cannot do (at resume too), 1 for a failure while running.
#   usage: train-limits.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-limits.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-limits: $*"; exit 1; }

. "$(dirname "$0")/lib.sh" # expect_error

# 20 images of 1 x 6 x 6 and their labels, as IDX files
make_idx() {
    printf '\000\000\010\003\000\000\000\024\000\000\000\006\000\000\000\006' >"$tmp/images.idx"
    head -c 720 /dev/zero | tr '\000' '\100' >>"$tmp/images.idx"
    printf '\000\000\010\001\000\000\000\024' >"$tmp/labels.idx"
    printf '\000\001\002\000\001\002\000\001\002\000\001\002\000\001\002\000\001\002\000\001' >>"$tmp/labels.idx"
}
make_idx

cat >"$tmp/img.ini" <<INI
[data]
reader = idx
images = $tmp/images.idx
labels = $tmp/labels.idx
num_classes = 3
batch_size = 10
transforms = random_crop

[data.transform.random_crop]
size = 6
padding = 1

[layer.flat]
type = flatten

[layer.fc]
type = linear
in_features = 36
out_features = 3

[train]
epochs = 1
checkpoint = $tmp/run/m.safetensors
log =
INI
"$train" "$tmp/img.ini" >"$tmp/img-ok.txt" 2>&1 || { cat "$tmp/img-ok.txt"; fail "the good config failed"; }

# ---- sizes from the config -------------------------------------------------------------
expect_error padding 2 "\[data.transform.random_crop\] padding = '1073741810': expected padding: .* each at most 65536" \
    "$tmp/img.ini" --set data.transform.random_crop.padding=1073741810
expect_error padded_image 2 "\[data.transform.random_crop\] padding = '40000': the image would be 1 x 80006 x 80006 (C x H x W) at its padding, more than 2^30 values" \
    "$tmp/img.ini" --set data.transform.random_crop.padding=40000
expect_error batch_size 2 "\[data\] batch_size = '1000000000000000000': expected a positive integer up to 2147483647" \
    "$tmp/img.ini" --set data.batch_size=1000000000000000000
expect_error bucket_mb 2 "\[distributed\] bucket_mb = '8.8e12': expected a number of MiB above 0 and at most 1048576" \
    "$tmp/img.ini" --set distributed.bucket_mb=8.8e12
expect_error timeout_s 2 "\[distributed\] timeout_s = 'inf': expected a number of seconds > 0" \
    "$tmp/img.ini" --set distributed.timeout_s=inf

# ---- models that do not fit the data ----------------------------------------------------
# sparse_linear with fewer outputs than classes ("Target 2 is out of bounds" at the first
# batch, no layer named), as dense linear already was
printf '1 1:0.5 3:1\n0 2:1\n2 1:1 4:2\n1 3:0.2\n' >"$tmp/s.svm"
cat >"$tmp/sparse.ini" <<INI
[data]
reader = libsvm
path = $tmp/s.svm
features = 4
batch_size = 2

[layer.fc]
type = sparse_linear
in_features = 4
out_features = 3

[train]
epochs = 1
checkpoint = $tmp/run/sparse.safetensors
log =
INI
"$train" "$tmp/sparse.ini" >"$tmp/sparse-ok.txt" 2>&1 || { cat "$tmp/sparse-ok.txt"; fail "the sparse model failed"; }
expect_error sparse_classes 2 "\[layer.fc\] out_features = 2, but field 'label' of \[data\] has 3 classes: expected out_features = 3" \
    "$tmp/sparse.ini" --set layer.fc.out_features=2
# a vocabulary too small for the tokens (PyTorch's "index out of range in self" at the
# first sample, naming nothing)
awk 'BEGIN { for (i = 0; i < 40; i++) printf "the cat sat on the mat. " }' >"$tmp/text.txt"
cat >"$tmp/lm.ini" <<INI
[data]
reader = text
path = $tmp/text.txt
block_size = 8
batch_size = 4

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

[train]
max_iters = 2
checkpoint = $tmp/run/lm.safetensors
log =
INI
"$train" "$tmp/lm.ini" >"$tmp/lm-ok.txt" 2>&1 || { cat "$tmp/lm-ok.txt"; fail "the language model failed"; }
expect_error vocab_size 2 "\[model\] vocab_size = 100, but the tokens of \[data\] (reader text) have a vocabulary of 256 (field 'y' has 256 classes): expected vocab_size = 256 or more" \
    "$tmp/lm.ini" --set model.vocab_size=100

# ---- a broken plugin in front of a good one ------------------------------------------------
# named with why it was rejected (it said "no reader 'csv' (known: none), and no plugin on
# the search path provides reader:csv"), the good copy named as not tried
mkdir "$tmp/bad"
head -c 6000 "$build/plugins/weft-io.so" >"$tmp/bad/weft-io.so"
saved_path=${WEFT_PLUGIN_PATH:-}
export WEFT_PLUGIN_PATH="$tmp/bad:$build/plugins"
expect_error shadowed_io 2 "\[data\] reader = 'idx': no reader 'idx'; $tmp/bad/weft-io.so, the first file of its name on the search path, was rejected (cannot load plugin $tmp/bad/weft-io.so: truncated ELF file: .*); it shadows $build/plugins/weft-io.so, which provides reader:idx and was not tried" \
    "$tmp/img.ini"
export WEFT_PLUGIN_PATH="$saved_path"

# ---- special files: refused by their type, never opened (a FIFO would block) -------------
mkfifo "$tmp/pipe"
mkdir "$tmp/adir"
# expect_error under a timeout: a FIFO that blocks fails the test instead of hanging it
bounded() { timeout 60 "$build/apps/weft-train" "$@"; }
train_unbounded=$train
train=bounded
expect_error fifo_images 2 "\[data\] images = $tmp/pipe: cannot open: a FIFO (named pipe), not a regular file" \
    "$tmp/img.ini" --set "data.images=$tmp/pipe"
expect_error dir_images 2 "\[data\] images = $tmp/adir: cannot open: a directory, not a regular file" \
    "$tmp/img.ini" --set "data.images=$tmp/adir"
expect_error dir_csv 2 "\[data\] path = $tmp/adir: cannot open: a directory, not a regular file" \
    "$tmp/img.ini" --set data.reader=csv --set "data.path=$tmp/adir" --set data.images= --set data.labels=
expect_error fifo_config 2 "$tmp/pipe: cannot open config file: a FIFO (named pipe), not a regular file" \
    "$tmp/pipe"
expect_error fifo_resume 2 "cannot resume from $tmp/pipe: $tmp/pipe: cannot open: a FIFO (named pipe), not a regular file" \
    "$tmp/img.ini" --resume "$tmp/pipe"
expect_error dir_resume 2 "cannot resume from $tmp/adir: $tmp/adir: cannot open: a directory, not a regular file" \
    "$tmp/img.ini" --resume "$tmp/adir"
expect_error fifo_eval 2 "$tmp/pipe: cannot open: a FIFO (named pipe), not a regular file" \
    eval "$tmp/img.ini" --checkpoint "$tmp/pipe"
train=$train_unbounded

echo "train-limits: all passed"
