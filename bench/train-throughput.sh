#!/usr/bin/env bash
# Training throughput of weft-train against PyTorch on the same machine, same models,
# same data, interleaved (weft, torch, weft, torch, ...): bench/train_compare.py.
#   bench/train-throughput.sh [ROUNDS] [EPOCHS] [extra train_compare.py arguments]
#   (--base OTHER_BUILD/apps/weft-train adds another commit's weft-train to every round)
# Run from the repository root after `make`, on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
epochs=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
exec /usr/bin/python3 bench/train_compare.py --rounds "$rounds" --epochs "$epochs" "$@"
