#!/usr/bin/env bash
# Training throughput of weft-train against PyTorch (nanoGPT's loop) on the baby GPT of
# configs/gpt-char.ini, interleaved (weft, torch, weft, torch, ...): bench/gpt_compare.py.
#   bench/gpt-throughput.sh [ROUNDS] [ITERS] [extra gpt_compare.py arguments]
# Run from the repository root after `make`, on a quiet machine. Prints tokens/s and
# ms/step per setting (weft 1 and 2 threads; PyTorch 1 and 2 threads, with and without
# OMP_WAIT_POLICY=PASSIVE) as median (min-max), and weft's best against PyTorch's best.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
iters=${2:-50}
shift $(( $# > 2 ? 2 : $# ))
exec /usr/bin/python3 bench/gpt_compare.py --rounds "$rounds" --iters "$iters" "$@"
