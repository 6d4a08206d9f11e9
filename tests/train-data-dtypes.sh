#!/bin/sh
# weft-train meets data as a PyTorch script would (issue 15, item 8): float16 and float64
# NPY features feed a float32 model (cast per batch, as x.to(model.dtype)), and
# pin_memory = true on the CPU is accepted with PyTorch's warning, printed once (not once
# per loader or epoch); TensorBoard events appear where [train] tensorboard says.
#   usage: train-data-dtypes.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-dtypes.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-data-dtypes: FAIL: $*"; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "train-data-dtypes: skipped: no python3"; exit 77; }

# Two well separated blobs, 64 samples of 4 features, written as NPY by the standard
# library alone (struct's 'e' is IEEE half).
python3 - "$tmp" <<'PY'
import random, struct, sys
out = sys.argv[1]
def npy(path, descr, fmt, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
random.seed(0)
xs, ys = [], []
for i in range(64):
    c = i % 2
    ys.append(c)
    xs += [(2.0 if c else -2.0) + random.uniform(-0.5, 0.5) for _ in range(4)]
npy(out + "/x16.npy", "<f2", "e", "(64, 4)", xs)
npy(out + "/x64.npy", "<f8", "d", "(64, 4)", xs)
npy(out + "/y.npy", "<i8", "q", "(64,)", ys)
PY

for dt in 16 64; do
    cat >"$tmp/f$dt.ini" <<INI
[runtime]
seed = 0

[data]
reader = npy
path = x$dt.npy
labels = y.npy
num_classes = 2
batch_size = 16
pin_memory = true

[data.test]
reader = npy
path = x$dt.npy
labels = y.npy
num_classes = 2

[layer.fc]
type = linear
in_features = 4
out_features = 2

[optimizer]
type = sgd
lr = 0.1

[train]
epochs = 3
checkpoint = $tmp/run$dt/model.safetensors
log = $tmp/run$dt/log.csv
tensorboard = $tmp/run$dt/tb
INI
    "$train" "$tmp/f$dt.ini" >"$tmp/out$dt.txt" 2>"$tmp/err$dt.txt" ||
        { cat "$tmp/out$dt.txt" "$tmp/err$dt.txt"; fail "float$dt features: weft-train failed"; }
    grep -q "same dtype" "$tmp/err$dt.txt" "$tmp/out$dt.txt" && fail "float$dt features not cast"
    n=$(grep -c "'pin_memory' argument is set as true but no accelerator is found" "$tmp/err$dt.txt" || true)
    [ "$n" = 1 ] || { cat "$tmp/err$dt.txt"; fail "pin_memory warning printed $n times, not once"; }
    ls "$tmp/run$dt/tb"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard events"
done
echo "train-data-dtypes: ok"
