#!/bin/sh
# DistributedDataParallel on cuda through the NCCL transport, on weft's emulated devices
# (one per rank): weft-train under mpirun -np 2 with batch 25 a rank trains as one
# process with batch 50 (the same 50 samples a step: rank r reads order[r::2]), to within
# float32 summation order: the gradient all-reduce averages two halves that one process
# sums at once (tests/train-ddp.sh checks the same over MPI on the cpu).
#   usage: train-ddp-cuda.sh BUILD_DIR      (exit 77, skipped, where mpirun is missing)
set -eu
build=$(cd "$1" && pwd)
train="$build/apps/weft-train"
command -v mpirun >/dev/null 2>&1 || { echo "train-ddp-cuda: no mpirun: skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-ddp-cuda.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-ddp-cuda: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none

. "$(dirname "$0")/../blobs-model.sh"
{
    cat <<INI
[runtime]
backend = cuda
seed = 3

INI
    blobs_model
    cat <<INI
[optimizer]
type = sgd
lr = 0.5
momentum = 0.9

[train]
max_iters = 10
eval_interval = 10
log_interval = 5
INI
} >"$tmp/blobs.ini"

mpirun --oversubscribe --bind-to none -np 2 "$train" "$tmp/blobs.ini" \
    --set "train.checkpoint=$tmp/ddp.safetensors" --set "train.log=$tmp/ddp.csv" \
    >"$tmp/ddp.txt" 2>&1 || { cat "$tmp/ddp.txt"; fail "2 processes failed"; }
cat "$tmp/ddp.txt"
grep -q '^data parallel: 2 processes (nccl), batch_size 25 per process' "$tmp/ddp.txt" ||
    fail "no data-parallel line naming nccl"
"$train" "$tmp/blobs.ini" --set data.batch_size=50 --set "train.checkpoint=$tmp/one.safetensors" \
    --set "train.log=$tmp/one.csv" >"$tmp/one.txt" 2>&1 || { cat "$tmp/one.txt"; fail "1 process failed"; }
v2=$(tail -1 "$tmp/ddp.csv" | cut -d, -f4)
v1=$(tail -1 "$tmp/one.csv" | cut -d, -f4)
awk -v a="$v1" -v b="$v2" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }' ||
    fail "val loss after 10 steps: $v1 with 1 x 50, $v2 with 2 x 25 over NCCL"
echo "train-ddp-cuda: 2 x 25 over NCCL: val loss $v2, 1 x 50: $v1"
