#!/usr/bin/env bash
# The GEMM share of a GPT training step (perf record on weft-train) and the GEMMs'
# achieved GFLOP/s against weft-bench's matmul 1024^3: bench/gemm_share.py.
#   bench/gemm-share.sh [STEPS] [extra gemm_share.py arguments]
#   e.g. bench/gemm-share.sh 3 --precision bf16
#        bench/gemm-share.sh 3 --precision bf16 --torch   (PyTorch's nanoGPT step, the same split)
#        bench/gemm-share.sh 5 --set data.block_size=256 --set model.block_size=256 \
#                              --set data.batch_size=16 --set train.accumulate=1
# Default: configs/gpt2-small.ini (batch 4 x block 1024, accumulate 2), 2 threads,
# profiled over 1 step and over 1 + 3 steps (the difference is 3 steady steps): about
# 5 minutes on a quiet 2-core machine. Needs perf
# (linux-perf) with perf_event_paranoid <= 2. Run from the repository root after `make`.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3}
shift $(( $# > 0 ? 1 : 0 ))
exec /usr/bin/python3 bench/gemm_share.py --steps "$steps" "$@"
