#!/usr/bin/env bash
# bench/gpu-check.sh: the one prepared run for a GPU machine. It builds weft with CUDA
# and checks, in this order, what can only be checked there; a step that cannot run
# (no GPU, a plugin that does not load) fails the whole check loudly, never skips.
#
# WHAT TO RUN when a GPU machine is lent (about 15 minutes of device time, once):
#   here, once:  bash bench/gpu-carry.sh      (.carry/: Criterion, inih, OpenBLAS, ...)
#                bash -n bench/gpu-check.sh && bash bench/gpu-check.sh --dry-run
#   there:       the device tool's run with carry [".carry"], timeout_s 600 and
#                command `bash bench/gpu-check.sh`
#   then:        read summary.txt (it comes back even after a timeout); unpack
#                gpu-check.tar.gz for every log.
#
# WHAT COMES BACK ($OUT; at most 8 files return from the device machine):
#   summary.txt       one line per step, written as each step ends:
#                       STEP                 STATUS  SECONDS  NOTE
#                     STATUS is ok, FAIL, skip (the reason is in NOTE) or figure (a
#                     measured number in NOTE). The last line is the verdict: the failed
#                     steps, or "all checks passed". Below it, the figures (name value
#                     unit) gathered from the benchmarks and training runs.
#   gpu-check.tar.gz  every log (build, ldd, test logs, conformance, training CSVs,
#                     benchmarks), rewritten after every step, so a timeout still returns
#                     what ran. Checkpoints are not in it.
#   build-tail.txt    only when the build fails: its last 60 lines.
# Without $OUT (a run here) the same files go to BUILD_DIR-check/out/.
#
# Usage: bash bench/gpu-check.sh [--dry-run] [BUILD_DIR]   (BUILD_DIR: build-gpu)
#   --dry-run   preflight only (what is missing here, and why), then stop.
# Environment: GPU_CHECK_BUDGET seconds for the whole run (default 540): a step that
#   would not fit is skipped with "time" in its note, so the summary is always written.
#   GPU_CHECK_NO_GPU=1 rehearses the whole run on a machine without a GPU (the preflight
#   does not stop it; every cuda step then fails): for checking this script itself; with
#   GPU_CHECK_DEVICE=cpu the training comparisons run their "cuda" side on the cpu.
# Carried: the tree (~7 MB) and .carry (~50 MB) stay under the 64 MiB that travels.
# Exit status: 0 when every step passed; 1 when a check failed; 2 when the preflight
#   failed (no GPU, no CUDA libraries, a missing build tool).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
dry_run=0
if [ "${1:-}" = "--dry-run" ]; then
    dry_run=1
    shift
fi
build=${1:-build-gpu}
budget=${GPU_CHECK_BUDGET:-540}
start=$SECONDS
work=${build%/}-check   # beside the build folder: meson sets up into an empty one
out=${OUT:-$work/out}
logs=$work/logs         # bundled into the archive
scratch=$work/scratch   # checkpoints: never bundled
mkdir -p "$out" "$logs" "$scratch" || exit 2
rm -f "$out/summary.txt" "$out/build-tail.txt" "$logs"/* 2>/dev/null
export PATH="/usr/local/cuda/bin:$PATH"
nproc=$(nproc 2>/dev/null || echo 4)
device=${GPU_CHECK_DEVICE:-cuda} # the training comparisons' device side
failed=""

# ---- the summary and the archive -------------------------------------------------------
summary() { # step status seconds note...
    local step=$1 status=$2 secs=$3
    shift 3
    printf '%-22s %-7s %5ss  %s\n' "$step" "$status" "$secs" "$*" | tee -a "$out/summary.txt"
    [ "$status" = FAIL ] && failed="$failed $step"
    return 0
}
figure() { # name value unit: a measured number, kept for the end of the summary
    printf '%s %s %s\n' "$1" "$2" "$3" >>"$logs/figures.txt"
}
bundle() { # the archive, replaced atomically so that a kill never leaves half of one
    tar -czf "$out/.gpu-check.tar.gz.tmp" -C "$logs" . 2>/dev/null &&
        mv -f "$out/.gpu-check.tar.gz.tmp" "$out/gpu-check.tar.gz"
}
finish() {
    local rc=$?
    trap - EXIT
    if [ -s "$logs/figures.txt" ]; then
        { echo "-- figures"; cat "$logs/figures.txt"; } >>"$out/summary.txt"
    fi
    if [ -n "$failed" ]; then
        echo "VERDICT: failed:$failed" >>"$out/summary.txt"
    elif [ "$rc" -eq 0 ] && [ "$completed" = 1 ]; then
        echo "VERDICT: all checks passed ($((SECONDS - start)) s)" >>"$out/summary.txt"
    else
        echo "VERDICT: stopped with status $rc before the last step" >>"$out/summary.txt"
    fi
    bundle
    printf '\n==== summary (%s) ====\n' "$out/summary.txt"
    cat "$out/summary.txt"
    exit "$rc"
}
trap finish EXIT
# Stopped from outside (timeout, Ctrl-C): the summary says so. A SIGKILL leaves no
# verdict line at all; the lines above it are what ran.
trap 'echo "gpu-check: stopped by a signal" >&2; exit 143' TERM INT
completed=0
# Runs "$@" with its output in $logs/NAME.log; fails the step on a non-zero status.
# Usage: run_step NAME SECONDS_LIMIT COMMAND...   (returns the command's status)
run_step() {
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    printf '\n== %s (%s)\n' "$name" "$*"
    timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
    rc=$?
    tail -n 15 "$logs/$name.log"
    if [ "$rc" -eq 0 ]; then
        summary "$name" ok $((SECONDS - t0))
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        summary "$name" FAIL $((SECONDS - t0)) "timed out after ${limit}s"
    else
        summary "$name" FAIL $((SECONDS - t0)) "exit $rc (log: $name.log)"
    fi
    bundle
    return "$rc"
}
# True when a step of about $1 seconds still fits the budget; else records a skip.
fits() { # seconds name
    local left=$((budget - (SECONDS - start)))
    [ "$left" -ge "$1" ] && return 0
    summary "$2" skip 0 "time: ${left}s left of ${budget}s, the step needs about $1"
    return 1
}

# ---- 1. preflight: stop with a clear message when this machine cannot run the check ----
printf '== preflight\n'
pre=""
if [ -f .carry/env.sh ]; then
    # Packages carried from a Debian machine (bench/gpu-carry.sh, passed with carry).
    # shellcheck source=/dev/null
    source .carry/env.sh
    echo "gpu-check: using the carried packages in .carry/"
fi
{ uname -a; date -u; } >"$logs/machine.txt"
if [ "${GPU_CHECK_NO_GPU:-0}" = 1 ]; then
    echo "gpu-check: GPU_CHECK_NO_GPU=1: a rehearsal without a GPU (the cuda steps will fail)"
elif ! command -v nvidia-smi >/dev/null; then
    pre="$pre; nvidia-smi not found (no NVIDIA driver on this machine)"
elif ! nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm \
        --format=csv,noheader >"$logs/gpu.txt" 2>&1; then
    pre="$pre; nvidia-smi failed: $(tail -n 1 "$logs/gpu.txt")"
fi
command -v nvcc >/dev/null && nvcc --version | tail -n 1 >>"$logs/machine.txt" ||
    pre="$pre; nvcc not found (looked on PATH and in /usr/local/cuda/bin)"
# The CUDA libraries the plugins link: found by folder, then put on LD_LIBRARY_PATH (the
# plugins' RUNPATH names the folder they were built against; this covers a moved one).
cuda_lib=""
for dir in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 \
           /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    if ls "$dir"/libcudart.so* >/dev/null 2>&1 && ls "$dir"/libcublas.so* >/dev/null 2>&1; then
        cuda_lib=$dir
        break
    fi
done
if [ -z "$cuda_lib" ]; then
    pre="$pre; libcudart/libcublas not found (CUDA_HOME/lib64, /usr/local/cuda/lib64)"
else
    ls "$cuda_lib"/libcusparse.so* >/dev/null 2>&1 ||
        pre="$pre; libcusparse not found in $cuda_lib"
    export LD_LIBRARY_PATH="$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "CUDA libraries: $cuda_lib" >>"$logs/machine.txt"
fi
for tool in meson ninja pkg-config cc tar timeout; do
    command -v "$tool" >/dev/null || pre="$pre; $tool not found"
done
if command -v pkg-config >/dev/null; then
    for pc in criterion inih zlib; do
        pkg-config --exists "$pc" || pre="$pre; lib$pc not found by pkg-config (carry it: bench/gpu-carry.sh)"
    done
fi
openblas=${WEFT_OPENBLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-openmp}
ls "$openblas"/libopenblas*.so* >/dev/null 2>&1 ||
    pre="$pre; OpenBLAS (OpenMP build) not in $openblas (carry it: bench/gpu-carry.sh)"
cat "$logs/machine.txt" "$logs/gpu.txt" 2>/dev/null
if [ -n "$pre" ]; then
    summary preflight FAIL $((SECONDS - start)) "${pre#; }"
    echo "gpu-check: this machine cannot run the GPU check:${pre#;}" >&2
    exit 2
fi
summary preflight ok $((SECONDS - start)) "$(head -n 1 "$logs/gpu.txt" 2>/dev/null | cut -c1-70)"
[ "$dry_run" = 1 ] && exit 0

# ---- 2. build: the whole log kept, its tail shown on failure ---------------------------
t0=$SECONDS
printf '\n== build (%s)\n' "$build"
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" --buildtype=release -Dcuda=enabled \
        ${WEFT_OPENBLAS_DIR:+-Dopenblas_dir=$WEFT_OPENBLAS_DIR} >"$logs/build.log" 2>&1
fi
[ -f "$build/build.ninja" ] && ninja -C "$build" -j "$nproc" >>"$logs/build.log" 2>&1
build_rc=$?
if [ "$build_rc" -ne 0 ]; then
    tail -n 60 "$logs/build.log" | tee "$out/build-tail.txt"
    summary build FAIL $((SECONDS - t0)) "exit $build_rc: build-tail.txt has the last 60 lines"
    exit 1
fi
summary build ok $((SECONDS - t0)) "$(grep -c 'Compiling' "$logs/build.log") objects"
build_abs=$(cd "$build" && pwd)
export WEFT_PLUGIN_PATH="$build_abs/plugins"

# ---- 3. every plugin and program loads: ldd, then weft-info ----------------------------
t0=$SECONDS
: >"$logs/ldd.txt"
missing=""
for so in "$build"/plugins/*.so "$build"/core/libweft.so "$build"/apps/weft-info \
          "$build"/apps/weft-train; do
    { echo "== $so"; ldd "$so"; } >>"$logs/ldd.txt" 2>&1
    if ldd "$so" 2>&1 | grep -q "not found"; then
        missing="$missing $(basename "$so"):$(ldd "$so" | awk '/not found/ { printf " %s", $1 }')"
    fi
done
for want in weft-cuda.so weft-sparse-cuda.so; do
    [ -f "$build/plugins/$want" ] || missing="$missing $want:not built"
done
if [ -n "$missing" ]; then
    grep -B 30 "not found" "$logs/ldd.txt" | tail -n 40
    summary ldd FAIL $((SECONDS - t0)) "unresolved:$missing"
    exit 1
fi
summary ldd ok $((SECONDS - t0)) "$(grep -c '^==' "$logs/ldd.txt") files, cudart: $(grep -m1 -o 'libcudart[^ ]* => [^ ]*' "$logs/ldd.txt")"
"$build/apps/weft-info" >"$logs/weft-info.txt" 2>&1
for plugin in cuda sparse-cuda; do
    # A plugin that cannot run here fails loudly: the rest would only skip.
    if ! "$build/apps/weft-info" --plugin "$build/plugins/weft-$plugin.so" \
            >"$logs/weft-info-$plugin.txt" 2>&1; then
        cat "$logs/weft-info-$plugin.txt"
        summary "load-$plugin" FAIL 0 "$(grep -m1 -i 'no cuda\|cannot\|error' "$logs/weft-info-$plugin.txt")"
        [ "${GPU_CHECK_NO_GPU:-0}" = 1 ] || exit 1 # a rehearsal goes on to the other steps
    fi
done
case "$failed" in
*load-*) ;;
*) summary load-plugins ok 0 "weft-cuda.so and weft-sparse-cuda.so usable" ;;
esac
bundle

# ---- 4. the CUDA suites (the targeted tests are in tests/test_cuda.c) --------------------
if fits 120 suites-cuda; then
    run_step suites-cuda 240 meson test -C "$build" --print-errorlogs --num-processes "$nproc" \
        --timeout-multiplier 4 cuda caching_allocator conformance
    cp "$build/meson-logs/testlog.txt" "$logs/testlog-cuda.txt" 2>/dev/null
    # Every cuda case must have run: a skip here means the GPU was not usable after all.
    if grep -q "cuda tests skipped\|cuda conformance skipped" "$logs/testlog-cuda.txt"; then
        summary suites-cuda FAIL 0 "the GPU cases skipped: $(grep -m1 -o 'cuda tests skipped.*' "$logs/testlog-cuda.txt")"
    fi
fi

# ---- 5. conformance at the larger sizes (warp, block, split reductions; long rows) ------
if fits 90 conformance-large; then
    run_step conformance-large 180 "$build/apps/weft-info" --conformance cuda --size large
fi

# ---- 6. training: cpu against cuda, weft against PyTorch eager ---------------------------
# The cpu runs twice (all threads, then 2): they differ only in summation order, and that
# spread says how far apart cpu and cuda may be. Verdict: |cuda - cpu| within
# max(2% of cpu, 3 x the spread) + 1e-4.
col() { # csv column_name: the last row's value of that column ("" when absent)
    awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
                       { v = k ? $k : "" } END { print v }' "$1"
}
best_rate() { # csv: the highest *_per_s value of any row
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /_per_s$/) k = i; next }
             k && $k > b { b = $k } END { printf "%.0f", b }' "$1"
}
verdict() { # cpu cpu1 cuda -> "agree"/"DIFFER"; a number never agrees with nan or ""
    local num='^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$'
    if ! [[ $1 =~ $num && $2 =~ $num && $3 =~ $num ]]; then
        [ -n "$1" ] && [ "$1" = "$3" ] && echo agree || echo DIFFER
        return
    fi
    awk -v a="$1" -v s="$2" -v g="$3" 'BEGIN {
        d = a - g; d = d < 0 ? -d : d; sp = a - s; sp = sp < 0 ? -sp : sp
        m = a < 0 ? -a : a; tol = 0.02 * m; if (3 * sp > tol) tol = 3 * sp
        print (d <= tol + 1e-4 ? "agree" : "DIFFER") }'
}
train_one() { # name config backend extra-set...
    local name=$1 config=$2 backend=$3
    shift 3
    local args=(--overwrite --set runtime.backend="$backend" --set train.checkpoint="$scratch/$name.safetensors"
                --set train.log="$logs/$name.csv")
    for s in "$@"; do args+=(--set "$s"); done
    timeout --kill-after=10 150 "$build/apps/weft-train" "$config" "${args[@]}" \
        >"$logs/$name.txt" 2>&1
}
compare_model() { # model config seconds_needed sets...
    local model=$1 config=$2 need=$3 t0=$SECONDS
    shift 3
    [ -f "$config" ] || { summary "train-$model" skip 0 "$config does not exist yet"; return; }
    fits "$need" "train-$model" || return
    local ok=1
    train_one "$model-cpu" "$config" cpu cpu.threads=0 "$@" || ok=0
    [ $ok = 1 ] && { train_one "$model-cpu1" "$config" cpu "$@" cpu.threads=2 || ok=0; }
    [ $ok = 1 ] && { train_one "$model-cuda" "$config" "$device" "$@" || ok=0; }
    if [ $ok = 0 ]; then
        for f in "$logs/$model"-*.txt; do echo "-- $f"; tail -n 5 "$f"; done
        summary "train-$model" FAIL $((SECONDS - t0)) "weft-train failed (logs: $model-*.txt)"
        bundle
        return
    fi
    local notes="" bad=0 c
    for c in train_loss val_loss; do
        local a s g v
        a=$(col "$logs/$model-cpu.csv" "$c") s=$(col "$logs/$model-cpu1.csv" "$c")
        g=$(col "$logs/$model-cuda.csv" "$c")
        v=$(verdict "$a" "$s" "$g")
        [ "$v" = agree ] || bad=1
        notes="$notes $c cpu $a (2 threads $s) cuda $g: $v;"
    done
    figure "weft_cuda_${model}" "$(best_rate "$logs/$model-cuda.csv")" "per_s"
    figure "weft_cpu_${model}" "$(best_rate "$logs/$model-cpu.csv")" "per_s"
    summary "train-$model" "$([ $bad = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "${notes% ;}"
    bundle
}
printf '\n== training: cpu (all threads, 2 threads) against cuda\n'
compare_model mlp configs/mnist-mlp.ini 60 train.epochs=2
compare_model cnn configs/mnist-cnn.ini 120 train.epochs=1
compare_model gpt configs/gpt-char.ini 120 train.max_iters=100 train.eval_interval=50 \
    train.eval_iters=10 train.log_interval=25
# bf16 autocast ([train] precision, where this weft has it): the cpu's bf16 against cuda's
if grep -rqs '"precision"' apps/train train; then
    compare_model mlp-bf16 configs/mnist-mlp.ini 60 train.epochs=2 train.precision=bf16
else
    summary train-mlp-bf16 skip 0 "weft-train reads no [train] precision key yet"
fi

if fits 60 torch-eager; then
    # bench/torch_train.py's data, models and loop, on the GPU (data held there).
    run_step torch-eager 120 python3 - 2 <<'PY'
import sys
import torch
sys.path.insert(0, "bench")
import torch_train as tt
assert torch.cuda.is_available(), "PyTorch sees no GPU"
epochs = int(sys.argv[1])
dev = torch.device("cuda")
x, y = tt.mnist()
x, y = x.to(dev), y.to(dev)
for name, make, batch in [("mlp_b64", tt.mlp, 64), ("cnn_b64", tt.cnn, 64)]:
    ips = tt.train(make().to(dev), x, y, batch, epochs)
    torch.cuda.synchronize()
    print(f"torch_cuda_{name} {ips:.0f} images/s", flush=True)
PY
    grep '^torch_cuda_' "$logs/torch-eager.log" >>"$logs/figures.txt"
fi

# ---- 7. weft next to cuBLAS / cuSPARSE called directly ------------------------------------
# -cudart shared: the programs use the same libcudart.so as weft-cuda.so (nvcc links the
# static runtime by default, which would put two runtimes in one process).
if fits 90 bench-cublas; then
    if nvcc -O2 -cudart shared -DWITH_WEFT -Icore/include -Iops/include \
        -I"$build_abs/core/include" bench/cublas_direct.c -o "$build_abs/cublas_direct" \
        -L"$build_abs/ops" -lweft-ops -L"$build_abs/core" -lweft -lcublas \
        -Xlinker -rpath="$build_abs/ops:$build_abs/core" >"$logs/cublas_direct-build.log" 2>&1; then
        run_step bench-cublas 150 "$build_abs/cublas_direct"
        grep -E '^[a-z0-9_]+ [0-9.e+-]+ [A-Za-z/]+' "$logs/bench-cublas.log" >>"$logs/figures.txt"
    else
        tail -n 20 "$logs/cublas_direct-build.log"
        summary bench-cublas FAIL 0 "bench/cublas_direct.c did not build (cublas_direct-build.log)"
    fi
fi
if fits 60 bench-cusparse; then
    OUT="$logs" run_step bench-cusparse 120 bash bench/gpu-sparse.sh "$build"
fi

# ---- 8. everything: the whole meson test (the new suites of other areas included) ------
if fits 90 suites-all; then
    run_step suites-all 240 meson test -C "$build" --print-errorlogs --num-processes "$nproc" \
        --timeout-multiplier 4
    cp "$build/meson-logs/testlog.txt" "$logs/testlog-all.txt" 2>/dev/null
    counts=$(grep -E '^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):' \
        "$logs/suites-all.log" | tr -s ' ' | paste -sd ' ')
    echo "meson test: $counts" >>"$out/summary.txt"
fi
completed=1
[ -z "$failed" ]
