#!/usr/bin/env bash
# bench/gpu-sparse.sh: weft's cuSPARSE SpMM (weft_sparse_mm on cuda:0, through
# weft-sparse-cuda.so) next to cuSPARSE called directly (bench/cusparse_direct.c), after
# checking the CUDA sparse kernels against the CPU ones. Needs a GPU; one short call
# (about half a minute on an H200 once weft is built):
#
#   bash bench/gpu-sparse.sh [BUILD_DIR [cusparse_direct options]]
#
# BUILD_DIR defaults to build-gpu (gpu-check.sh's); it is configured with -Dcuda=enabled
# when new, and only the targets needed here are built. The program is built there with
# nvcc against that libweft, with the shared CUDA runtime (-cudart shared: nvcc's default,
# the static one, would be a second runtime next to the libcudart.so of weft-cuda.so).
# Output is also written to $OUT/gpu-sparse.txt when OUT is
# set (the device machine's return folder), else to BUILD_DIR/gpu-sparse/.
# Exit status: 0 when every check passes and weft reaches 90% of the direct call's speed;
# 1 on a build error, an error or a failed check; 2 when only the speed target is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
shift || true
out=${OUT:-$build/gpu-sparse}
export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$out"
# Packages carried to an offline GPU machine (bench/gpu-carry.sh), as gpu-check.sh does.
if [ -f .carry/env.sh ]; then
    # shellcheck disable=SC1091
    . .carry/env.sh
fi

targets="core/libweft.so plugins/weft-cpu.so plugins/weft-cuda.so plugins/weft-sparse.so
         plugins/weft-sparse-cuda.so"
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release -Dcuda=enabled \
    >"$out/setup.log" 2>&1 || { tail -n 20 "$out/setup.log"; exit 1; }
# shellcheck disable=SC2086
if ! ninja -C "$build" $targets >"$out/build.log" 2>&1; then
    tail -n 30 "$out/build.log"
    if grep -q "unknown target 'plugins/weft-sparse-cuda.so'" "$out/build.log"; then
        echo "gpu-sparse: plugins/meson.build does not build weft-sparse-cuda.so yet" \
             "(plugins/sparse/cuda/meson.build shows the shared_module call)"
    fi
    exit 1
fi

build_abs=$(cd "$build" && pwd)
nvcc -O2 -cudart shared -DWITH_WEFT -Icore/include -Iops/include -Iplugins/sparse/include \
    -I"$build_abs/core/include" bench/cusparse_direct.c -o "$build_abs/cusparse_direct" \
    -L"$build_abs/ops" -lweft-ops -L"$build_abs/core" -lweft -lcusparse \
    -Xlinker -rpath="$build_abs/ops:$build_abs/core"

set +e
WEFT_PLUGIN_PATH="$build_abs/plugins" "$build_abs/cusparse_direct" "$@" 2>&1 |
    tee "$out/gpu-sparse.txt"
exit "${PIPESTATUS[0]}"
