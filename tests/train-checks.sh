#!/bin/sh
# Mistakes weft-train reports before the first step (apps/train/train_check.c), each with
# a message naming the section and key, and runs that used to "succeed" on nothing:
# an unwritable checkpoint or log path, layer widths that do not chain, too few outputs
# for the classes, an IDX labels file given as images, a CSV with only a header, an empty
# [layer.x] section, and [train] epochs below the checkpoint's epoch.
#   usage: train-checks.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-checks.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-checks: $*"; exit 1; }

cat >"$tmp/ok.ini" <<INI
[runtime]
seed = 1

[data]
reader = synthetic
kind = blobs
samples = 60
features = 2
classes = 3
batch_size = 20

[layer.fc1]
type = linear
in_features = 2
out_features = 8

[layer.act]
type = relu

[layer.fc2]
type = linear
in_features = 8
out_features = 3

[train]
epochs = 2
checkpoint = $tmp/run/m.safetensors
log = $tmp/run/log.csv
INI

. "$(dirname "$0")/lib.sh" # expect_error

"$train" "$tmp/ok.ini" >"$tmp/ok.txt" 2>&1 || { cat "$tmp/ok.txt"; fail "the good config failed"; }

# ---- paths that cannot be written ------------------------------------------------------
expect_error proc_checkpoint 2 '\[train\] checkpoint = /proc/version/m.safetensors: ' \
    "$tmp/ok.ini" --set train.checkpoint=/proc/version/m.safetensors
expect_error proc_log 2 '\[train\] log = /proc/self/weft/log.csv: cannot create directory' \
    "$tmp/ok.ini" --set train.log=/proc/self/weft/log.csv
expect_error dir_checkpoint 2 "\[train\] checkpoint = $tmp is a directory" \
    "$tmp/ok.ini" --set "train.checkpoint=$tmp"
if [ "$(id -u)" != 0 ]; then # root writes into a read-only directory anyway
    mkdir "$tmp/ro"
    chmod a-w "$tmp/ro"
    expect_error readonly_dir 2 "\[train\] checkpoint = $tmp/ro/m.safetensors: cannot create a file in its directory: Permission denied" \
        "$tmp/ok.ini" --set "train.checkpoint=$tmp/ro/m.safetensors"
else
    echo "readonly_dir: not checked (root may write into a read-only directory)"
fi

# ---- the model against the data, on one sample ---------------------------------------
expect_error widths 2 '\[layer.fc2\] (Linear) does not take its input, of shape \[1, 8\]' \
    "$tmp/ok.ini" --set layer.fc2.in_features=16
expect_error first_width 2 '\[layer.fc1\] (Linear) does not take its input, of shape \[1, 2\]' \
    "$tmp/ok.ini" --set layer.fc1.in_features=3
expect_error classes 2 "\[layer.fc2\] out_features = 2, but field 'label' of \[data\] has 3 classes: expected out_features = 3" \
    "$tmp/ok.ini" --set layer.fc2.out_features=2
# IDX files: 4 images of 2x2 and their 4 labels
printf '\000\000\010\003\000\000\000\004\000\000\000\002\000\000\000\002' >"$tmp/images.idx"
printf '\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020' >>"$tmp/images.idx"
printf '\000\000\010\001\000\000\000\004\000\001\002\000' >"$tmp/labels.idx"
cat >"$tmp/idx.ini" <<INI
[data]
reader = idx
images = $tmp/labels.idx
labels = $tmp/labels.idx
num_classes = 3
batch_size = 2
mean = 0.5
std = 0.25

[layer.flat]
type = flatten

[layer.fc]
type = linear
in_features = 4
out_features = 3

[train]
checkpoint = $tmp/run/idx.safetensors
log =
INI
"$train" "$tmp/idx.ini" --set "data.images=$tmp/images.idx" >"$tmp/idx-ok.txt" 2>&1 ||
    { cat "$tmp/idx-ok.txt"; fail "the IDX images did not train"; }
expect_error labels_as_images 2 "\[data\] images = $tmp/labels.idx: byte 0: magic 0x00000801 says 1 dimension: a labels file, given as images" "$tmp/idx.ini"

# ---- nothing to train on -------------------------------------------------------------
printf 'x,y,label\n' >"$tmp/header.csv"
cat >"$tmp/csv.ini" <<INI
[data]
reader = csv
path = $tmp/header.csv
label_column = label
num_classes = 3

[layer.fc]
type = linear
in_features = 2
out_features = 3

[train]
checkpoint = $tmp/run/csv.safetensors
log =
INI
expect_error header_only 2 "\[data\] path = $tmp/header.csv (reader csv) has no samples" "$tmp/csv.ini"
printf '[layer.extra]\n' >>"$tmp/empty.ini"
cat "$tmp/ok.ini" "$tmp/empty.ini" >"$tmp/empty-layer.ini"
line=$(($(wc -l <"$tmp/ok.ini") + 1))
expect_error empty_layer 2 "empty-layer.ini: line $line: \[layer.extra\] is empty" "$tmp/empty-layer.ini"

# ---- epochs below the checkpoint's -------------------------------------------------------
expect_error epochs_below 2 'the checkpoint is after epoch 2; \[train\] epochs = 1 trains nothing' \
    "$tmp/ok.ini" --set train.epochs=1 --resume "$tmp/run/m.safetensors"
"$train" "$tmp/ok.ini" --set train.epochs=3 --resume "$tmp/run/m.safetensors" >"$tmp/more.txt" 2>&1 ||
    { cat "$tmp/more.txt"; fail "resuming with epochs above the checkpoint's failed"; }
grep -q '^epoch 3/3' "$tmp/more.txt" || { cat "$tmp/more.txt"; fail "the resumed run did not train epoch 3"; }
# ---- a misspelt section: the typo named, not the "missing key" it caused (issue 17 #7) --
sed 's/^\[data\]$/[dta]/' "$tmp/ok.ini" >"$tmp/typo.ini"
grep -q '^\[dta\]$' "$tmp/typo.ini" || fail "the typo config has no [dta] section"
expect_error typo_section 2 'unknown section \[dta\] (did you mean \[data\]?)' "$tmp/typo.ini"
echo "train-checks: ok"
