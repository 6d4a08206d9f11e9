#!/bin/sh
# configs/lstm-char.ini (embedding -> fused LSTM -> linear over bytes) for a few dozen
# steps: it runs through weft-train, and the training loss falls clearly (from about
# ln 256 = 5.5 nats/byte towards the unigram's 3.0) - the recurrent layer learns.
#   usage: train-rnn.sh BUILD_DIR SOURCE_ROOT
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-rnn.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-rnn: $*"; exit 1; }

"$build/apps/weft-train" "$root/configs/lstm-char.ini" \
    --set train.max_iters=60 --set train.log_interval=10 --set train.eval_interval=60 \
    --set train.eval_iters=4 --set data.batch_size=16 --set data.block_size=32 \
    --set data.val.block_size=32 \
    --set train.checkpoint="$tmp/model.safetensors" --set train.log="$tmp/log.csv" \
    >"$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; fail "weft-train failed"; }
cat "$tmp/out.txt"
first=$(grep '^step [0-9]*/' "$tmp/out.txt" | head -1 | sed 's/.* loss \([0-9.]*\).*/\1/')
last=$(grep '^step [0-9]*/' "$tmp/out.txt" | tail -1 | sed 's/.* loss \([0-9.]*\).*/\1/')
[ -n "$first" ] && [ -n "$last" ] || fail "no loss lines in the output"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
    fail "the loss did not fall clearly: $first -> $last"
echo "train-rnn: loss $first -> $last"
