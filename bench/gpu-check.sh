#!/usr/bin/env bash
# bench/gpu-check.sh: builds weft with CUDA and runs the checks that need a GPU, on a
# machine that has one (build machines and CI have none: there the cuda suite skips).
# Meant to be one short call on a GPU machine: `bash bench/gpu-check.sh [BUILD_DIR]`.
# Logs go to $OUT when set (the device machine's return folder), else BUILD_DIR/gpu-check.
# Exit status: non-zero when a build step or a test fails, or when the cuda suite
# skipped (no usable GPU after all).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-$build/gpu-check}
mkdir -p "$out"
step() { printf '\n== %s\n' "$*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv |
    tee "$out/gpu.txt" || echo "gpu-check: nvidia-smi failed (no driver?)"
nvcc --version | tail -n 1

step "tools"
# Packages carried from a Debian machine (bench/gpu-carry.sh, passed with carry: .carry).
if [ -f .carry/env.sh ]; then
    # shellcheck source=/dev/null
    source .carry/env.sh
    echo "gpu-check: using the carried packages in .carry/"
fi
# The GPU machine may be offline: report what is missing rather than install it.
missing=""
for tool in meson ninja pkg-config cc nvcc; do
    command -v "$tool" >/dev/null || missing="$missing $tool"
done
for pc in criterion inih; do
    pkg-config --exists "$pc" || missing="$missing lib$pc"
done
if [ -n "$missing" ]; then
    echo "gpu-check: missing:$missing (install them, or carry them with the tree)"
    exit 2
fi

step "build ($build)"
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release -Dcuda=enabled \
    ${WEFT_OPENBLAS_DIR:+-Dopenblas_dir=$WEFT_OPENBLAS_DIR}
ninja -C "$build" 2>&1 | tail -n 3

step "weft-info"
"$build/apps/weft-info" 2>&1 | tee "$out/weft-info.txt" || true

step "tests"
set +e
meson test -C "$build" --print-errorlogs caching_allocator cuda 2>&1 | tee "$out/test-cuda.log"
cuda_rc=${PIPESTATUS[0]}
if grep -q "cuda tests skipped" "$build/meson-logs/testlog.txt"; then
    echo "gpu-check: the cuda suite skipped its GPU checks:"
    grep -m 1 "cuda tests skipped" "$build/meson-logs/testlog.txt"
    cuda_rc=1
fi
meson test -C "$build" --print-errorlogs 2>&1 | tail -n 30 | tee "$out/test-all.log"
all_rc=${PIPESTATUS[0]}
cp "$build/meson-logs/testlog.txt" "$out/testlog.txt" 2>/dev/null
set -e

step "benchmarks"
# TODO(bench): elementwise bandwidth on cuda (copy, add, exp; f32 and bf16; 256 MiB,
#   contiguous and transposed) against the GPU's memory bandwidth (H200: ~4.8 TB/s).
# TODO(bench): matmul TFLOP/s through cuBLAS (f32, f16, bf16; 4096^3, batched 64x512^3,
#   transposed operands) against cuBLAS called directly.
# TODO(bench): caching allocator: alloc/free pairs per second and cache hit rate against
#   raw cudaMalloc/cudaFree; memory_summary after a training step.
# TODO(bench): host<->device bandwidth, pinned vs pageable, and non_blocking overlap of a
#   copy with a kernel.
# TODO(bench): a training step (configs/*.ini with --set runtime.backend=cuda), cpu vs cuda,
#   recorded in bench/ beside the cpu figures.
echo "gpu-check: benchmarks not written yet (see the TODO lines in $0)"

exit $((cuda_rc != 0 || all_rc != 0))
