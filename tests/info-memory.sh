#!/bin/sh
# weft-info --memory CONFIG: the GPT config's memory with and without checkpointing every
# block (what the forward keeps and the step's peak both lower with it), a sequential
# model's segments, the errors of a bad option; and WEFT_PROFILE=DIR, read by the op
# layer when it loads, profiling that whole program (its trace and table written at exit).
#   usage: info-memory.sh BUILD_DIR SOURCE_ROOT
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$2" && pwd)
info="$build/apps/weft-info"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-info-memory.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "info-memory: $*"; exit 1; }

WEFT_PROFILE="$tmp/prof" "$info" --memory "$root/configs/gpt-char.ini" --checkpoint 1 \
    --set data.batch_size=4 >"$tmp/gpt.txt" 2>"$tmp/err.txt" ||
    { cat "$tmp/gpt.txt" "$tmp/err.txt"; fail "weft-info --memory failed"; }
cat "$tmp/gpt.txt"
grep -q "model gpt on cpu; one batch: input \[4, 64\] int64, target \[4, 64\] int64; loss cross_entropy" \
    "$tmp/gpt.txt" || fail "no header line"
grep -Eq "^ +checkpointing off +every block$" "$tmp/gpt.txt" || fail "no column heads"
# Bytes of a row's two columns.
bytes() {
    grep "^$1 " "$tmp/gpt.txt" | awk '{
        n = 0
        for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/ && ($(i+1) == "MiB" || $(i+1) == "KiB" || $(i+1) == "B")) {
            m = $(i+1) == "MiB" ? 1048576 : $(i+1) == "KiB" ? 1024 : 1
            printf "%d ", $i * m
        }
    }'
}
set -- $(bytes "parameters")
[ "$1" = "$2" ] && [ "$1" -gt 1000000 ] || fail "parameters: $*"
set -- $(bytes "kept by the forward for backward")
[ $(($2 * 3)) -lt "$1" ] || fail "checkpointed, the forward should keep under a third: $*"
set -- $(bytes "forward+backward peak")
[ "$2" -lt "$1" ] || fail "checkpointed, the step's peak should be lower: $*"
grep -q "^weft profiler: wrote $tmp/prof/trace.1.json" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "WEFT_PROFILE wrote no report"; }
grep -q "^Layout copies" "$tmp/prof/ops.1.txt" || fail "WEFT_PROFILE: no table"
grep -q "EmbeddingBackward0\|MmBackward0" "$tmp/prof/trace.1.json" || fail "WEFT_PROFILE: no backward nodes in the trace"

"$info" --memory "$root/configs/mnist-cnn.ini" --checkpoint 2 --set data.batch_size=8 >"$tmp/cnn.txt" 2>&1 ||
    { cat "$tmp/cnn.txt"; fail "the CNN's --memory failed"; }
grep -Eq "^ +checkpointing off +2 segments$" "$tmp/cnn.txt" || { cat "$tmp/cnn.txt"; fail "no segments column"; }

if "$info" --memory "$root/configs/mnist-cnn.ini" --checkpoint -1 >"$tmp/bad.txt" 2>&1; then fail "--checkpoint -1 accepted"; fi
grep -q "\-\-checkpoint -1: expected a number of segments >= 0" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "no message"; }
echo "info-memory: ok"
