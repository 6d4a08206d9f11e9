#!/bin/sh
# What a spinning wait costs at worst: a training whose two threads share one core, in CPU
# time per step against one thread (bench/spin_colocated.py). CPU time holds on a busy
# machine, so this runs anywhere; with bench/omp-gaps.sh (what a spin saves on a quiet
# machine) it brackets [cpu] spin_count's choice.
#   usage: bench/spin-colocated.sh [CONFIG] [extra spin_colocated.py arguments]
#   bench/spin-colocated.sh configs/mnist-cnn.ini --spin passive,5000,10000,20000,libgomp
# Run from anywhere after `make`.
set -eu
cd "$(dirname "$0")/.."
config=${1:-configs/mnist-cnn.ini}
[ $# -gt 0 ] && shift
exec /usr/bin/python3 bench/spin_colocated.py "$config" "$@"
