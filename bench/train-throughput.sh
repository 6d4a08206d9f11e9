#!/usr/bin/env bash
# Training throughput of weft-train against PyTorch on the same machine, same models,
# same data: the MLP (784-256-128-10) at batch 64 and 256 and the CNN of
# configs/mnist-cnn.ini at batch 64, SGD lr 0.05 momentum 0.9. Prints `name value unit`
# lines; weft's figure is the best epoch's images/s over EPOCHS epochs, PyTorch's the same
# for each setting tried (1 and 2 threads, with and without OMP_WAIT_POLICY=PASSIVE).
#   bench/train-throughput.sh [EPOCHS]   (run from the repository root after `make`)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

weft() { # name config batch
  build/apps/weft-train "$2" --set train.epochs="$epochs" --set data.batch_size="$3" \
    --set train.checkpoint="$out/$1.safetensors" --set train.log="$out/$1.csv" \
    --set data.workers=1 > "$out/$1.txt"
  best=$(awk -F, 'NR > 1 && $7 > b { b = $7 } END { printf "%.0f", b }' "$out/$1.csv")
  echo "weft_$1 $best images/s"
}

weft mlp_b64 configs/mnist-mlp.ini 64
weft mlp_b256 configs/mnist-mlp.ini 256
weft cnn_b64 configs/mnist-cnn.ini 64

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  for threads in 1 2; do
    /usr/bin/python3 bench/torch_train.py --epochs "$epochs" --threads "$threads"
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_train.py --epochs "$epochs" --threads "$threads"
  done
else
  echo "# PyTorch not installed (apt-get install python3-torch): no comparison"
fi
