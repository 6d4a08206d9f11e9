#!/usr/bin/env bash
# weft when the machine is not its own (bench/contention.py): quiet, beside one busy
# process (`yes > /dev/null`), two weft trainings at once, and PyTorch under the same
# competition; interleaved rounds, medians with min and max.
#   bench/contention.sh [ROUNDS] [extra contention.py arguments]
#   bench/contention.sh 5                          # the default workloads
#   bench/contention.sh 5 --workloads all          # every shipped config and weft-generate
#   bench/contention.sh 5 --spin libgomp,passive   # against libgomp's own wait and passive
#   bench/contention.sh 3 --spin 5000,10000,50000 --no-torch   # other spin counts
#   bench/contention.sh 1 --quick                  # checks the script end to end
# Run from anywhere after `make`, on an otherwise quiet machine (PyTorch: Debian's
# python3-torch, /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift $(( $# > 0 ? 1 : 0 ))
exec /usr/bin/python3 bench/contention.py --rounds "$rounds" "$@"
