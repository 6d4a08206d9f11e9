#!/bin/sh
# The data loader's throughput with data augmentation on (issue 19): MNIST train, batch 64,
# random_crop (padding 4, reflect) + horizontal flip + random_affine (bilinear) +
# random_erasing + normalize, with 0 and 2 workers, and normalize alone for reference.
# Images per second, the median of REPEATS epochs (bench/bench_augment.c).
#   usage: bench/loader-augment.sh [BUILD_DIR] [REPEATS]
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
repeats=${2:-5}
WEFT_SOURCE_ROOT=$src WEFT_PLUGIN_PATH=$build/plugins OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} \
    exec "$build/bench/weft-bench" --filter augment_ --repeats "$repeats"
