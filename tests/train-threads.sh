#!/bin/sh
# The cpu plugin's threads (issue 36, item 1; plugins/cpu/threads.c):
#  - [cpu] threads splits the work, [cpu] run_threads says how many threads run it: a run
#    with one of two threads running ends with the same bits as one with both (the CNN with
#    BatchNorm: conv weight gradients in pieces, BatchNorm's reductions in chunks; a batch
#    that does not split evenly; the LSTM);
#  - run_threads = auto (the default) drops to one thread while other programs keep the
#    cores busy (WEFT_CPU_THREADS_TRACE shows it), and the run still ends with the bits of a
#    quiet one;
#  - a bad run_threads names the --set that gave it and what was expected.
#   usage: train-threads.sh BUILD_DIR SOURCE_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-threads.XXXXXX")
busy=
trap '[ -z "$busy" ] || kill $busy 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-threads: $*"; exit 1; }
py=$(command -v python3 || true)
[ -n "$py" ] || fail "no python3 (make deps installs it)"
. "$(dirname "$0")/lib.sh" # expect_error, tensors

# same_tensors A B: the two checkpoints hold the same tensors, bit for bit (lib.sh's tensors).
same_tensors() {
    tensors "$1" >"$tmp/a.sum" && tensors "$2" >"$tmp/b.sum" && [ -s "$tmp/a.sum" ] ||
        fail "cannot read $1 or $2"
    cmp -s "$tmp/a.sum" "$tmp/b.sum" || { diff "$tmp/a.sum" "$tmp/b.sum" || true; fail "$1 and $2 differ"; }
}

# run NAME CONFIG [sets...]: trains CONFIG into $tmp/NAME.safetensors.
run() {
    out=$1 config=$2
    shift 2
    "$train" "$config" --set "train.checkpoint=$tmp/$out.safetensors" \
        --set "train.log=$tmp/$out.csv" --set cpu.threads=2 "$@" \
        >"$tmp/$out.txt" 2>&1 || { cat "$tmp/$out.txt"; fail "$out: training failed"; }
}

# ---- one running thread of two gives both threads' bits ------------------------------------
for case in "cnn_bn $src/configs/mnist-cnn-bn.ini --set train.max_iters=3" \
            "cnn_bn_odd $src/configs/mnist-cnn-bn.ini --set train.max_iters=2 --set data.batch_size=63" \
            "lstm $src/configs/lstm-char.ini --set train.max_iters=2 --set train.eval_interval=0"; do
    set -- $case
    model=$1
    shift
    run "${model}_1" "$@" --set cpu.run_threads=1
    run "${model}_2" "$@" --set cpu.run_threads=2
    same_tensors "$tmp/${model}_1.safetensors" "$tmp/${model}_2.safetensors"
    echo "$model: the same bits with 1 and with 2 of 2 threads running"
done

# ---- auto: one thread beside busy programs, and still the same bits ------------------------
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if [ "$cores" -ge 2 ]; then
    i=0
    while [ "$i" -lt "$cores" ]; do
        sh -c 'while :; do :; done' &
        busy="$busy $!"
        i=$((i + 1))
    done
    WEFT_CPU_THREADS_TRACE=1 run cnn_bn_busy "$src/configs/mnist-cnn-bn.ini" \
        --set train.max_iters=120 --set train.log_interval=40
    kill $busy
    busy=
    grep -q '^weft cpu: 2 -> 1 threads ([0-9.]* of [0-9]* cores free)$' "$tmp/cnn_bn_busy.txt" ||
        { cat "$tmp/cnn_bn_busy.txt"; fail "with every core busy the run kept 2 threads"; }
    echo "auto, every core busy: $(grep -m1 '^weft cpu:' "$tmp/cnn_bn_busy.txt")"
    run cnn_bn_quiet "$src/configs/mnist-cnn-bn.ini" --set train.max_iters=120 \
        --set train.log_interval=40 --set cpu.run_threads=2
    same_tensors "$tmp/cnn_bn_busy.safetensors" "$tmp/cnn_bn_quiet.safetensors"
    echo "auto, every core busy: the bits of 2 running threads"
else
    echo "auto beside busy programs: skipped (one core)"
fi

# ---- a bad run_threads -----------------------------------------------------------------------
expect_fixed=1 expect_error run_threads_high 2 \
    "--set cpu.run_threads=3 (set on the command line, over $src/configs/mnist-cnn.ini): [cpu] run_threads = '3': expected auto or an integer from 1 to threads (2)" \
    "$src/configs/mnist-cnn.ini" --set cpu.threads=2 --set cpu.run_threads=3
expect_fixed=1 expect_error run_threads_word 2 \
    "[cpu] run_threads = 'fast': expected auto or an integer from 1 to threads (2)" \
    "$src/configs/mnist-cnn.ini" --set cpu.threads=2 --set cpu.run_threads=fast
echo "train-threads: ok"
