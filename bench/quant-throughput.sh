#!/usr/bin/env bash
# int8 against float32 and weft against PyTorch 1.13's int8, interleaved: accuracy, file
# size and inference images/s of the quantized MNIST MLP, CNN and CNN with BatchNorm at
# batch 64 and 256, and the GPT's dynamic int8 (bench/quant_compare.py says how).
#   bench/quant-throughput.sh [ROUNDS] [PASSES] [extra quant_compare.py arguments]
# Run from the repository root after `make` (and `make train`, `make train-gpt`; what is
# missing is trained first), on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
passes=${2:-7}
shift $(( $# > 2 ? 2 : $# ))
exec /usr/bin/python3 bench/quant_compare.py --rounds "$rounds" --passes "$passes" "$@"
