#!/bin/sh
# The smaller things a user tripped on (issue 36, item 6):
#  - a data path given with --set is relative to the current directory, one in the file
#    to the file's; a path that cannot be opened is shown where it led;
#  - an error about a value --set gave names the --set argument: a backend, an lr a
#    plugin refuses, n_embd that an error names beside n_head, a scheduler that fails in
#    the middle of training;
#  - a corrupt data file is the config's error (exit 2) naming the key and the line;
#  - a vocabulary smaller than the data's tokens names [model] vocab_size;
#  - drop_last with a batch larger than the data (no step at all) is refused;
#  - the summary: a sparse input counted as stored, samples/s for input that is neither
#    images nor tokens, a GPT's blocks; epochs numbered as the epoch lines number them;
#  - make train-gpt GPT_ARGS=... samples from the checkpoint it wrote;
#  - weft-bench warns when other programs keep the cores busy.
#   usage: train-details.sh BUILD_DIR SOURCE_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-details.XXXXXX")
busy=
trap '[ -z "$busy" ] || kill "$busy" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-details: $*"; exit 1; }
. "$(dirname "$0")/lib.sh" # expect_error

mkdir "$tmp/cfg" "$tmp/work"
# 60 points of 2 features in 3 classes
awk 'BEGIN { print "x,y,label"; for (i = 0; i < 60; i++) printf "%.3f,%.3f,%d\n", (i % 3) + 0.1 * (i % 7), (i % 3) - 0.05 * (i % 5), i % 3 }' \
    >"$tmp/cfg/points.csv"
cp "$tmp/cfg/points.csv" "$tmp/work/here.csv"
cat >"$tmp/cfg/run.ini" <<INI
[runtime]
seed = 1

[data]
reader = csv
path = points.csv
label_column = label
num_classes = 3
batch_size = 20

[layer.fc1]
type = linear
in_features = 2
out_features = 8

[layer.act]
type = relu

[layer.fc2]
type = linear
in_features = 8
out_features = 3

[optimizer]
type = sgd
lr = 0.1

[train]
epochs = 1
checkpoint = $tmp/run/m.safetensors
log = $tmp/run/log.csv
overwrite = true
INI
cd "$tmp/work"

# ---- paths -------------------------------------------------------------------------------------
"$train" ../cfg/run.ini >"$tmp/file.txt" 2>&1 || { cat "$tmp/file.txt"; fail "the file's path (beside the file) failed"; }
"$train" ../cfg/run.ini --set data.path=here.csv >"$tmp/set.txt" 2>&1 ||
    { cat "$tmp/set.txt"; fail "--set data.path=here.csv (in the current directory) failed"; }
expect_fixed=1 expect_error set_missing 2 "--set data.path=nope.csv (set on the command line, over ../cfg/run.ini): [data] path = nope.csv ($tmp/work/nope.csv): cannot open: No such file or directory" \
    ../cfg/run.ini --set data.path=nope.csv
sed 's/^path = points.csv/path = gone.csv/' "$tmp/cfg/run.ini" >"$tmp/cfg/gone.ini"
expect_fixed=1 expect_error file_missing 2 "../cfg/gone.ini: [data] path = gone.csv ($tmp/work/../cfg/gone.csv): cannot open" \
    ../cfg/gone.ini
echo "paths: --set from the current directory, the file's from the file's, shown where they led"

# ---- --set named in every error about its value ------------------------------------------------
expect_fixed=1 expect_error set_backend 2 "--set runtime.backend=nosuch (set on the command line, over ../cfg/run.ini): [runtime] backend = 'nosuch'" \
    ../cfg/run.ini --set runtime.backend=nosuch
expect_fixed=1 expect_error set_lr 2 "--set optimizer.lr=-1 (set on the command line, over ../cfg/run.ini): [optimizer] Invalid learning rate" \
    ../cfg/run.ini --set optimizer.lr=-1
expect_fixed=1 expect_error set_midway 2 "epoch 1, batch 2 of 3: --set scheduler.total_steps=1 (set on the command line, over ../cfg/run.ini): [scheduler] total_steps = 1: Tried to step 3 times" \
    ../cfg/run.ini --set scheduler.type=onecycle --set scheduler.total_steps=1 --set scheduler.pct_start=0.5
head -c 3000 "$src/data/text/kjv-genesis-2kings.txt" >"$tmp/cfg/text.txt"
cat >"$tmp/cfg/gpt.ini" <<INI
[data]
reader = text
path = text.txt
block_size = 8
batch_size = 4

[data.val]
reader = text
path = text.txt
block_size = 8
split = val

[model]
type = gpt
n_layer = 2
n_head = 2
n_embd = 16
block_size = 8
vocab_size = 256

[optimizer]
type = adamw
lr = 0.001

[train]
max_iters = 2
eval_iters = 1
log_interval = 1
checkpoint = $tmp/gpt/m.safetensors
log = $tmp/gpt/log.csv
overwrite = true
INI
expect_fixed=1 expect_error set_n_embd 2 "--set model.n_embd=15 (set on the command line, over ../cfg/gpt.ini): [model] n_head = '2': n_embd (15) must be divisible by n_head (2)" \
    ../cfg/gpt.ini --set model.n_embd=15
expect_fixed=1 expect_error vocab 2 "[model] vocab_size = 100, but the tokens of [data] (reader text) have a vocabulary of 256" \
    ../cfg/gpt.ini --set model.vocab_size=100
echo "--set: named for a backend, an lr, n_embd beside n_head, a scheduler in training"

# ---- corrupt data: the key, exit 2 ---------------------------------------------------------------
head -c 500 "$tmp/cfg/points.csv" >"$tmp/work/cut.csv"
expect_fixed=1 expect_error corrupt_csv 2 "[data] path = cut.csv ($tmp/work/cut.csv):" ../cfg/run.ini --set data.path=cut.csv
grep -q "cut.csv):[0-9]*: expected 3 columns" "$tmp/corrupt_csv.txt" || { cat "$tmp/corrupt_csv.txt"; fail "corrupt csv: no line number"; }
printf '\037\213\010\000garbage, not deflate' >"$tmp/work/bad.gz"
expect_fixed=1 expect_error corrupt_gz 2 "[data] path = bad.gz ($tmp/work/bad.gz): corrupt gzip data" ../cfg/run.ini --set data.path=bad.gz
echo "corrupt data: exit 2, the key and the line"

# ---- drop_last with no full batch ------------------------------------------------------------------
expect_fixed=1 expect_error drop_last 2 "[data] batch_size = 100 with drop_last = true: the 60 training samples make no full batch, so training would take no step" \
    ../cfg/run.ini --set data.batch_size=100 --set data.drop_last=true

# ---- the summary and the throughput's unit ------------------------------------------------------------
grep -q '^epoch 1/1 .* samples/s ' "$tmp/file.txt" || { cat "$tmp/file.txt"; fail "throughput of tabular data is not in samples/s"; }
head -1 "$tmp/run/log.csv" | grep -q ',samples_per_s,' || fail "log: no samples_per_s column"
# a million features of which a sample sets two: 8 bytes of values and indices, not 4 MB
printf '0 1:0.5 900000:1\n1 2:1 999999:2\n2 3:1 4:1\n0 5:2 6:1\n' >"$tmp/work/s.svm"
cat >"$tmp/cfg/sparse.ini" <<INI
[data]
reader = libsvm
path = s.svm
features = 1000000
batch_size = 2

[layer.fc]
type = sparse_linear
in_features = 1000000
out_features = 3

[train]
checkpoint = $tmp/sparse/m.safetensors
log = $tmp/sparse/log.csv
INI
"$train" ../cfg/sparse.ini --set data.path=s.svm >"$tmp/sparse.txt" 2>&1 || { cat "$tmp/sparse.txt"; fail "the sparse run failed"; }
grep -q '^Input size (MB): 0.00$' "$tmp/sparse.txt" || { cat "$tmp/sparse.txt"; fail "sparse input counted as dense"; }
"$train" ../cfg/gpt.ini >"$tmp/gpt.txt" 2>&1 || { cat "$tmp/gpt.txt"; fail "the GPT run failed"; }
for row in 'model (GPT) *\[4, 8, 256\]' '  transformer.wpe (Embedding) *\[8, 16\]' \
           '    transformer.h.1 (Block) *\[4, 8, 16\]' 'lm_head (Linear) *\[4, 8, 256\]'; do
    grep -q "^$row" "$tmp/gpt.txt" || { cat "$tmp/gpt.txt"; fail "GPT summary: no row '$row'"; }
done
echo "summary: sparse input as stored, samples/s, the GPT's blocks"

# ---- make train-gpt samples from the checkpoint it wrote ---------------------------------------------
if command -v make >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; then
    make -s -C "$src" -o deps -o build BUILD="$build" train-gpt GPT_PROMPT=In \
        GPT_ARGS="--set train.max_iters=2 --set train.eval_iters=1 --set train.log_interval=1 --set model.n_layer=1 --set train.checkpoint=$tmp/tg/x-{step}.safetensors --set train.log=$tmp/tg/log.csv" \
        >"$tmp/make.txt" 2>&1 || { cat "$tmp/make.txt"; fail "make train-gpt failed"; }
    grep -aq "^sample from $tmp/tg/x-2.safetensors:$" "$tmp/make.txt" || { cat "$tmp/make.txt"; fail "make train-gpt: not sampled from the checkpoint it wrote"; }
    echo "make train-gpt: $(grep -a '^sample from' "$tmp/make.txt")"
else
    echo "make train-gpt: not checked (no make or dpkg-query)"
fi

# ---- weft-bench on a busy machine ---------------------------------------------------------------
if [ -x "$build/bench/weft-bench" ]; then
    sh -c 'while :; do :; done' &
    busy=$!
    "$build/bench/weft-bench" --filter memcpy_4096 --repeats 1 >"$tmp/bench.txt" 2>&1 || { cat "$tmp/bench.txt"; fail "weft-bench failed"; }
    kill "$busy"
    busy=
    grep -q '^# weft-bench: warning: other programs kept [0-9.]* cores busy .*: these figures are not meaningful' "$tmp/bench.txt" ||
        { cat "$tmp/bench.txt"; fail "weft-bench did not warn of a busy machine"; }
    echo "weft-bench: $(grep -m1 'warning' "$tmp/bench.txt")"
fi
echo "train-details: ok"
