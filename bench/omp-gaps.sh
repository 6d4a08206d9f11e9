#!/bin/sh
# The gaps between OpenMP parallel regions in weft's shipped workloads, and the share of
# them that a given GOMP_SPINCOUNT would sleep through (bench/omp_gaps.c, an LD_PRELOAD
# shim around GOMP_parallel): how [cpu] spin_count's default was chosen (docs/config.md).
# The gaps are measured in the opening thread's CPU time too, which a busy machine does
# not lengthen, so the "cpu" columns hold on a shared machine; the "wall" ones are what
# the threads waited there.
#   usage: bench/omp-gaps.sh [BUILD_DIR] [WORKLOAD ...]
#   workloads: mlp cnn cnn_bn resnet lstm gpt generate (default: all)
# Run from anywhere after `make`; each workload is a shortened run (seconds on 2 cores).
# Runs with the environment's OMP_WAIT_POLICY and GOMP_SPINCOUNT removed (weft's default),
# which does not change the gaps, only how the threads wait in them.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
[ $# -gt 0 ] && shift
workloads=${*:-mlp cnn cnn_bn resnet lstm gpt generate}
[ "$(uname -m)" = x86_64 ] || { echo "omp-gaps: x86-64 only (rdtsc, PAUSE)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-omp-gaps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cc -O2 -shared -fPIC -o "$tmp/omp_gaps.so" "$root/bench/omp_gaps.c" -ldl -lm
unset OMP_WAIT_POLICY GOMP_SPINCOUNT

iters="--set train.eval_interval=0 --set train.eval_iters=1"
train() { # name config sets...
    name=$1 config=$2
    shift 2
    WEFT_OMP_GAPS="$tmp/$name.gaps" LD_PRELOAD="$tmp/omp_gaps.so" \
        "$build/apps/weft-train" "$root/$config" "$@" \
        --set "train.checkpoint=$tmp/$name.safetensors" --set "train.log=$tmp/$name.csv" \
        >"$tmp/$name.out" 2>&1 || { cat "$tmp/$name.out"; exit 1; }
}

for w in $workloads; do
    case $w in
    mlp) train mlp configs/mnist-mlp.ini --set train.epochs=1 ;;
    cnn) train cnn configs/mnist-cnn.ini --set train.epochs=1 ;;
    cnn_bn) train cnn_bn configs/mnist-cnn-bn.ini --set train.epochs=1 ;;
    resnet) train resnet configs/mnist-resnet.ini --set train.epochs=1 ;;
    lstm) train lstm configs/lstm-char.ini --set train.max_iters=60 $iters ;;
    gpt) train gpt configs/gpt-char.ini --set train.max_iters=20 $iters ;;
    generate)
        [ -f "$tmp/gen.safetensors" ] || \
            "$build/apps/weft-train" "$root/configs/gpt-char.ini" --set train.max_iters=5 $iters \
                --set "train.checkpoint=$tmp/gen.safetensors" --set "train.log=$tmp/gen.csv" \
                >/dev/null
        WEFT_OMP_GAPS="$tmp/generate.gaps" LD_PRELOAD="$tmp/omp_gaps.so" \
            "$build/apps/weft-generate" "$tmp/gen.safetensors" --max-new-tokens 200 \
            --threads 2 >"$tmp/generate.out" 2>&1 || { cat "$tmp/generate.out"; exit 1; } ;;
    *) echo "omp-gaps: unknown workload $w (mlp cnn cnn_bn resnet lstm gpt generate)"; exit 2 ;;
    esac
    echo "== $w"
    cat "$tmp/$w.gaps"
done
