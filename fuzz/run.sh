#!/bin/sh
# Runs every libFuzzer target of a fuzz build for a while on its seed corpus; fails when
# any target finds a crash, a sanitizer report, a leak or a timeout.
#   usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET ...]
# What a target finds lands in BUILD_DIR/fuzz-out/<target>/ (new inputs: corpus/; the
# input that failed: crash-*, leak-*, timeout-*); its log is <target>.log there. The
# seed corpora in fuzz/corpus/ are only read. Reproduce one with
#   BUILD_DIR/fuzz/<target> BUILD_DIR/fuzz-out/<target>/crash-...
set -u
build=$1
seconds=$2
shift 2
src=$(cd "$(dirname "$0")" && pwd)
if [ $# -gt 0 ]; then
    targets=$*
else
    targets=$(for f in "$build"/fuzz/fuzz_*; do [ -f "$f" ] && [ -x "$f" ] && basename "$f"; done)
fi
[ -n "$targets" ] || { echo "fuzz: no targets in $build/fuzz (configure with -Dfuzz=true)"; exit 1; }
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:intercept_tls_get_addr=0:allocator_may_return_null=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# glibc's own block from backtrace()'s first call, which an out-of-memory error makes
# (tests/lsan-glibc.supp says why; a leak of weft's is still reported)
LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/../tests/lsan-glibc.supp}
OMP_NUM_THREADS=1
export ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS OMP_NUM_THREADS
# One target a core at a time (FUZZ_JOBS, default the online cores): each still gets its
# SECONDS, and each target is one process, so two cores halve the wall time.
jobs=${FUZZ_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
case $jobs in ''|*[!0-9]*|0) jobs=1 ;; esac

run_target() {
    t=$1
    out="$build/fuzz-out/$t"
    mkdir -p "$out/corpus"
    seeds="$src/corpus/$t"
    [ -d "$seeds" ] || seeds=""
    "$build/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/" \
        "$out/corpus" $seeds >"$out/$t.log" 2>&1
    echo $? >"$out/exit-status"
}

# What a target printed, once it has ended; a target whose status is missing failed.
report_target() {
    t=$1
    out="$build/fuzz-out/$t"
    rc=$(cat "$out/exit-status" 2>/dev/null || echo "?")
    runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' "$out/$t.log")
    cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1)
    if [ "$rc" = 0 ]; then
        echo "fuzz: $t: ok, ${runs:-? runs}, ${cov:-cov: ?}"
    else
        echo "fuzz: $t: FAILED (exit $rc), ${runs:-? runs}: see $out/$t.log"
        grep -m1 -A3 'ERROR: \|runtime error' "$out/$t.log" | head -8
        ls "$out" | grep -E '^(crash|leak|timeout|oom)-' | sed "s|^|    $out/|"
        failed="$failed $t"
    fi
}

failed=""
batch=""
n=0
for target in $targets; do
    rm -f "$build/fuzz-out/$target/exit-status"
    run_target "$target" &
    batch="$batch $target"
    n=$((n + 1))
    if [ $n -ge "$jobs" ]; then
        wait
        for b in $batch; do report_target "$b"; done
        batch=""
        n=0
    fi
done
wait
for b in $batch; do report_target "$b"; done
if [ -n "$failed" ]; then
    echo "fuzz: failures in:$failed"
    exit 1
fi
