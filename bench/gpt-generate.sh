#!/usr/bin/env bash
# Generation speed: weft-generate (KV cache) at batch 1 and 8 against PyTorch 1.13 on the
# same checkpoint with a KV-cache loop of its own and with nanoGPT's generate() (no
# cache), interleaved: bench/gpt_generate_compare.py.
#   bench/gpt-generate.sh [ROUNDS] [MODEL ...]     MODEL: baby (default) and/or gpt2
# Extra gpt_generate_compare.py arguments through GEN_ARGS (e.g. "--batches 1").
# Run from the repository root after `make`, on a quiet machine. Rough times on a quiet
# 2-core machine at 5 rounds: baby 3 min, gpt2 31 min (nanoGPT's uncached generate()
# at batch 8 is most of it; GEN_ARGS=--no-nanogpt leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift $(( $# > 0 ? 1 : 0 ))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(baby)
for m in "${models[@]}"; do
    # shellcheck disable=SC2086
    /usr/bin/python3 bench/gpt_generate_compare.py --rounds "$rounds" --model "$m" ${GEN_ARGS:-}
    echo
done
