#!/bin/sh
# A checkpoint that does not fit on the disk: weft-train ends with an error naming the
# file and "No space left on device", and the previous checkpoint (model and training
# state) is left byte for byte as it was, and resumes. The disk is a 64 KiB tmpfs, which
# needs the right to mount (root in CI); elsewhere the test is skipped (exit 77).
#   usage: checkpoint-disk-full.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-diskfull.XXXXXX")
mnt="$tmp/small"
mounted=""
cleanup() {
    [ -n "$mounted" ] && umount "$mnt" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "checkpoint-disk-full: $*"; exit 1; }

mkdir "$mnt"
if ! mount -t tmpfs -o size=64k tmpfs "$mnt" 2>"$tmp/mount.txt"; then
    echo "checkpoint-disk-full: skipped: cannot mount a 64 KiB tmpfs here ($(cat "$tmp/mount.txt"))"
    exit 77
fi
mounted=1

cat >"$tmp/run.ini" <<INI
[runtime]
seed = 5

[data]
reader = synthetic
kind = blobs
samples = 200
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

[optimizer]
type = adamw
lr = 0.01

[train]
max_iters = 4
checkpoint_interval = 4
checkpoint = $mnt/m.safetensors
log =
INI

# a run saves at step 4; the disk then fills up (another program's file), and the run,
# resumed to step 8, cannot save there. (A new run over the first one would be refused:
# train-runs.sh.)
"$train" "$tmp/run.ini" >"$tmp/small.txt" 2>&1 || { cat "$tmp/small.txt"; fail "the small checkpoint did not fit in 64 KiB"; }
cp "$mnt/m.safetensors" "$tmp/model.before"
cp "$mnt/m.train.safetensors" "$tmp/state.before"
dd if=/dev/zero of="$mnt/filler" bs=1024 count=128 2>/dev/null || true
set +e
"$train" "$tmp/run.ini" --set train.max_iters=8 --resume "$mnt/m.safetensors" >"$tmp/full.txt" 2>&1
code=$?
set -e
cat "$tmp/full.txt"
[ "$code" = 1 ] || fail "a full disk: exit $code, expected 1"
grep -q "m\..*safetensors: .* failed: No space left on device" "$tmp/full.txt" || fail "message for a full disk"
cmp -s "$mnt/m.safetensors" "$tmp/model.before" || fail "a failed save on a full disk changed the model file"
cmp -s "$mnt/m.train.safetensors" "$tmp/state.before" || fail "a failed save on a full disk changed the training state"
ls "$mnt" | grep -q '\.tmp\.' && fail "a failed save left a temporary file: $(ls "$mnt")"
rm "$mnt/filler"
"$train" "$tmp/run.ini" --set train.max_iters=8 --resume "$mnt/m.safetensors" >"$tmp/after.txt" 2>&1 ||
    { cat "$tmp/after.txt"; fail "resuming the old checkpoint after a full disk failed"; }
echo "checkpoint-disk-full: ok"
