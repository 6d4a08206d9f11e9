#!/bin/sh
# weft-train end to end with one allocation of weft's refused at a time, as SQLite's malloc
# tests do (tests/alloc_train.c, tests/alloc_inject.h): a 1-epoch MLP run (config, plugins,
# data, model, optimizer, the epoch, evaluation, the checkpoint, the log) is counted, then
# run again with allocation N refused, for N in a sample spread over the run or for every
# N. Each run must end in an out-of-memory error (exit 1, a message that says memory,
# naming what was being allocated) or in a correct recovery (exit 0 and the uninterrupted
# run's model, byte for byte); never in a crash, a hang, a leak (LeakSanitizer in the
# sanitizer build) or an error that blames the configuration (exit 2) or something else.
#   usage: alloc-train.sh BUILD_DIR [--sample K | --all | --only N...]
set -eu
build=$(cd "$1" && pwd)
shift
mode=sample
k=40
only=""
case "${1:-}" in
    --all) mode=all ;;
    --sample) k=${2:?--sample needs a count} ;;
    --only) mode=only; shift; only="$*" ;;
    "") ;;
    *) echo "usage: alloc-train.sh BUILD_DIR [--sample K | --all | --only N...]"; exit 2 ;;
esac
bin="$build/tests/weft-train-allocfail"
[ -x "$bin" ] || { echo "alloc-train: $bin is not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-alloc-train.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
# one thread: the count must be the same in every run
export OMP_NUM_THREADS=1

cat >"$tmp/run.ini" <<INI
[runtime]
seed = 3

[cpu]
threads = 1

[data]
reader = synthetic
kind = blobs
samples = 60
features = 4
classes = 3
batch_size = 20
shuffle = true

[data.test]
reader = synthetic
kind = blobs
samples = 20
features = 4
classes = 3

[layer.fc1]
type = linear
in_features = 4
out_features = 16

[layer.act]
type = relu

[layer.fc2]
type = linear
in_features = 16
out_features = 3

[optimizer]
type = adamw
lr = 0.01

[train]
epochs = 1
INI

# run DIR [N]: weft-train into DIR with allocation N refused (none without N)
run() {
    mkdir -p "$1"
    set +e
    WEFT_ALLOC_FAIL_AT=${2:-0} timeout 120 "$bin" "$tmp/run.ini" \
        --set "train.checkpoint=$1/m.safetensors" --set "train.log=$1/log.csv" >"$1/out.txt" 2>&1
    code=$?
    set -e
}

run "$tmp/ref"
[ "$code" = 0 ] || { cat "$tmp/ref/out.txt"; echo "alloc-train: the run fails without a fault"; exit 1; }
total=$(sed -n 's/^alloc-train: \([0-9]*\) allocations of weft.s$/\1/p' "$tmp/ref/out.txt")
[ -n "$total" ] && [ "$total" -gt 0 ] || { cat "$tmp/ref/out.txt"; echo "alloc-train: no count"; exit 1; }
run "$tmp/ref2"
again=$(sed -n 's/^alloc-train: \([0-9]*\) allocations of weft.s$/\1/p' "$tmp/ref2/out.txt")
[ "$again" = "$total" ] || { echo "alloc-train: $total allocations, then $again: not deterministic"; exit 1; }

case $mode in
    all) list=$(seq 1 "$total") ;;
    only) list=$only ;;
    sample) # k points spread evenly over 1..total, the first and the last included
        list=$(awk -v k="$k" -v n="$total" 'BEGIN { if (k > n) k = n;
            for (i = 0; i < k; i++) print (k == 1 ? 1 : 1 + int(i * (n - 1) / (k - 1))) }' | uniq) ;;
esac

tried=0 oom=0 recovered=0 bad=0
for n in $list; do
    d="$tmp/r"
    rm -rf "$d"
    run "$d" "$n"
    tried=$((tried + 1))
    refused=$(grep '^alloc-train: allocation' "$d/out.txt" | tail -1 || true)
    said=$(grep '^weft-train: ' "$d/out.txt" | grep -v '^weft-train: .* on cpu, ' | tail -1 || true)
    verdict=""
    if [ "$code" -ge 124 ]; then
        verdict="died (exit $code: a crash, a sanitizer report or a hang)"
    elif [ "$code" = 0 ]; then
        if cmp -s "$tmp/ref/m.safetensors" "$d/m.safetensors"; then
            recovered=$((recovered + 1))
        else
            verdict="exit 0, but the model differs from the uninterrupted run's"
        fi
    elif [ "$code" = 1 ] && printf '%s' "$said" | grep -qi 'memory'; then
        oom=$((oom + 1))
    elif [ "$code" = 2 ]; then
        verdict="exit 2: blames the configuration"
    else
        verdict="exit $code without naming memory"
    fi
    if [ -n "$verdict" ]; then
        bad=$((bad + 1))
        echo "alloc-train: allocation $n: $verdict"
        echo "    $refused"
        echo "    ${said:-(no message)}"
        [ "$code" -ge 124 ] && tail -20 "$d/out.txt" | sed 's/^/    | /'
    fi
done
echo "alloc-train: $total allocations of weft's in a 1-epoch MLP run; $tried refused in turn" \
     "($mode): $oom out-of-memory errors, $recovered recovered, $bad bad"
[ "$bad" = 0 ]
