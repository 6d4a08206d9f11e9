#!/usr/bin/env bash
# bench/gpu-check.sh: builds weft with CUDA and runs the checks that need a GPU, on a
# machine that has one (build machines and CI have none: there the cuda suite skips).
# Meant to be one short call on a GPU machine: `bash bench/gpu-check.sh [BUILD_DIR]`.
# Logs go to $OUT when set (the device machine's return folder), else BUILD_DIR/gpu-check.
# Then the conformance suite on cuda, training on cpu and cuda (final losses compared,
# images/s against PyTorch eager on the same card) and the GPU benchmarks
# (bench/cublas_direct.c: weft next to cuBLAS/CUDA called directly), and
# bench/gpu-sparse.sh when present. About 3-5 minutes on an H200 from a clean build.
# Exit status: non-zero when a build step, a test, the conformance run, the cpu/cuda loss
# comparison or a benchmark fails, or when the cuda suite skipped (no usable GPU after
# all).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-$build/gpu-check}
mkdir -p "$out"
step() { printf '\n== %s\n' "$*"; }
export PATH="/usr/local/cuda/bin:$PATH"

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

step "conformance on cuda"
set +e
"$build/apps/weft-info" --conformance cuda 2>&1 | tee "$out/conformance-cuda.txt"
conf_rc=${PIPESTATUS[0]}
set -e

# Everything below measures; a failing figure is reported and the rest still runs.
set +e
build_abs=$(cd "$build" && pwd)
export WEFT_PLUGIN_PATH="$build_abs/plugins"

step "training: cpu against cuda (same seed and data order), weft against PyTorch eager"
# The two configs for $epochs epochs on each backend; the final losses must agree (the
# devices sum in different orders, so not to the bit), and the cuda run's best epoch
# gives weft's images/s.
epochs=3
train() { # name config backend
    "$build/apps/weft-train" "$2" --set runtime.backend="$3" --set train.epochs="$epochs" \
        --set train.checkpoint="$out/$1.safetensors" --set train.log="$out/$1.csv" \
        >"$out/$1.txt" 2>&1 && return 0
    echo "gpu-check: weft-train $2 on $3 failed:"
    tail -n 5 "$out/$1.txt"
    return 1
}
last() { tail -n 1 "$out/$1.csv" | cut -d, -f"$2"; } # name column (2 train_loss, 4 val_loss)
# Final losses within 2% (+1e-4) of each other agree, and so do identical texts ("nan"
# when there was no validation); a number never agrees with nan or inf.
agree() {
    [ "$1" = "$2" ] && return 0
    local num='^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$'
    [[ $1 =~ $num && $2 =~ $num ]] || return 1
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; m = a < 0 ? -a : a
                                     exit !((d < 0 ? -d : d) <= 0.02 * m + 1e-4) }'
}
compare_training() {
    for model in mlp cnn; do
        train "$model-cpu" "configs/mnist-$model.ini" cpu || continue
        train "$model-cuda" "configs/mnist-$model.ini" cuda || continue
        for col in 2 4; do
            a=$(last "$model-cpu" "$col") b=$(last "$model-cuda" "$col")
            what=$([ "$col" = 2 ] && echo train_loss || echo val_loss)
            verdict=$(agree "$a" "$b" && echo agree || echo DIFFER)
            echo "mnist-$model $what after $epochs epochs: cpu $a cuda $b ($verdict)"
        done
        best=$(awk -F, 'NR > 1 && $7 > b { b = $7 } END { printf "%.0f", b }' "$out/$model-cuda.csv")
        echo "weft_cuda_${model}_b64 $best images/s"
    done
}
compare_training 2>&1 | tee "$out/train.txt"
train_rc=0
grep -q "DIFFER\|failed" "$out/train.txt" && train_rc=1
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    # bench/torch_train.py's data, models and loop, on the GPU (data held there).
    python3 - "$epochs" <<'PY' 2>&1 | tee -a "$out/train.txt"
import sys
import torch
sys.path.insert(0, "bench")
import torch_train as tt
epochs = int(sys.argv[1])
dev = torch.device("cuda")
x, y = tt.mnist()
x, y = x.to(dev), y.to(dev)
for name, make, batch in [("mlp_b64", tt.mlp, 64), ("cnn_b64", tt.cnn, 64)]:
    ips = tt.train(make().to(dev), x, y, batch, epochs)
    torch.cuda.synchronize()
    print(f"torch_cuda_{name} {ips:.0f} images/s", flush=True)
PY
else
    echo "gpu-check: PyTorch with CUDA not found: no comparison" | tee -a "$out/train.txt"
fi

step "GPU benchmarks: weft against cuBLAS/CUDA called directly (bench/cublas_direct.c)"
bench_rc=0
if nvcc -O2 -DWITH_WEFT -Icore/include -I"$build_abs/core/include" bench/cublas_direct.c \
    -o "$build_abs/cublas_direct" -L"$build_abs/core" -lweft -lcublas \
    -Xlinker -rpath="$build_abs/core" >"$out/cublas_direct-build.log" 2>&1; then
    "$build_abs/cublas_direct" 2>&1 | tee "$out/bench-gpu.txt"
    bench_rc=${PIPESTATUS[0]}
else
    echo "gpu-check: bench/cublas_direct.c did not build:"
    tail -n 20 "$out/cublas_direct-build.log"
    bench_rc=1
fi

sparse_rc=0
if [ -f bench/gpu-sparse.sh ]; then
    step "sparse (bench/gpu-sparse.sh)"
    bash bench/gpu-sparse.sh "$build"
    sparse_rc=$?
fi
set -e

step "summary"
printf 'cuda suite %s, all suites %s, conformance %s, training %s, benchmarks %s, sparse %s\n' \
    "$cuda_rc" "$all_rc" "$conf_rc" "$train_rc" "$bench_rc" "$sparse_rc" | tee "$out/summary.txt"
exit $((cuda_rc != 0 || all_rc != 0 || conf_rc != 0 || train_rc != 0 || bench_rc != 0 ||
        sparse_rc == 1))
