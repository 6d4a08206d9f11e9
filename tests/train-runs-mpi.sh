#!/bin/sh
# weft-train under mpirun -np 2 (issue 36, item 3; apps/train/train_signals.c,
# train_progress_style.c): Ctrl-C on mpirun's terminal saves a checkpoint, rank 0 alone
# says so and how to resume, on whole lines, and the printed command resumes; mpirun's
# output in a file gets whole lines and no progress bar (each rank has a pseudo-terminal
# of its own: the style follows mpirun's stdout).
#   usage: train-runs-mpi.sh BUILD_DIR   (exit 77, skipped, where mpirun is missing)
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
here=$(cd "$(dirname "$0")" && pwd)
command -v mpirun >/dev/null 2>&1 || { echo "train-runs-mpi: no mpirun (make deps installs openmpi-bin): skipped"; exit 77; }
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "train-runs-mpi: no python3 for a pseudo-terminal (make deps installs it): skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-runs-mpi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-runs-mpi: $*"; exit 1; }

cat >"$tmp/ok.ini" <<INI
[runtime]
seed = 1

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
type = sgd
lr = 0.1

[train]
epochs = 2
checkpoint = $tmp/run/m.safetensors
log = $tmp/run/log.csv
INI

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader
ddp="--set data.samples=400000 --set data.batch_size=2"
# mpirun's output in a file: whole lines, no bar
mpirun --oversubscribe --bind-to none -np 2 "$train" "$tmp/ok.ini" --set data.samples=4000 \
    --set "train.checkpoint=$tmp/mf/m.safetensors" --set "train.log=$tmp/mf/log.csv" >"$tmp/mf.txt" 2>&1 ||
    { cat "$tmp/mf.txt"; fail "mpirun: the run failed"; }
grep -q "$(printf '\r')" "$tmp/mf.txt" && fail "mpirun to a file: progress bar codes in the file"
grep -q '^epoch 2/2  loss ' "$tmp/mf.txt" || { cat "$tmp/mf.txt"; fail "mpirun to a file: no epoch lines"; }
# Ctrl-C on mpirun's terminal
set +e
# shellcheck disable=SC2086
"$py" "$here/run-on-pty.py" "$tmp/mc.raw" "epoch 1/2 [" mpirun --oversubscribe --bind-to none -np 2 "$train" "$tmp/ok.ini" $ddp \
    --set "train.checkpoint=$tmp/mc/m.safetensors" --set "train.log=$tmp/mc/log.csv"
code=$?
set -e
tr -d '\r' <"$tmp/mc.raw" >"$tmp/mc.txt"
[ "$code" != 0 ] || fail "mpirun: exit 0 after Ctrl-C"
[ "$(grep -c 'interrupted (mpirun was interrupted) at epoch 1, batch [0-9]* of 100000: checkpoint saved to' "$tmp/mc.txt")" = 1 ] ||
    { cat "$tmp/mc.txt"; fail "mpirun: Ctrl-C did not save (once, by rank 0)"; }
grep -q "^resume with: mpirun -np 2 $train $tmp/ok.ini .*--resume $tmp/mc/m.safetensors$" "$tmp/mc.txt" ||
    { cat "$tmp/mc.txt"; fail "mpirun: no resume command on a line of its own"; }
# nothing after the last newline: no line cut short
[ -z "$(tail -c 1 "$tmp/mc.raw" | tr -d '\n')" ] || fail "mpirun: the output ends mid-line"
# the printed command resumes (here as one process: a checkpoint of any world size does)
resume=$(sed -n 's/^resume with: mpirun -np 2 //p' "$tmp/mc.txt")
sh -c "exec $resume" >"$tmp/mr.txt" 2>&1 &
rpid=$!
for _ in $(seq 1 600); do grep -q '^resumed from' "$tmp/mr.txt" 2>/dev/null && break; sleep 0.1; done
kill -INT $rpid 2>/dev/null || true
wait $rpid 2>/dev/null || true
grep -q "^resumed from $tmp/mc/m.safetensors at epoch 1, after batch [0-9]* of 200000" "$tmp/mr.txt" ||
    { cat "$tmp/mr.txt"; fail "mpirun: the printed command did not resume"; }
echo "mpirun: exit $code after Ctrl-C (Open MPI's own status; the ranks exit 130), rank 0 said how to resume"
echo "train-runs-mpi: ok"
