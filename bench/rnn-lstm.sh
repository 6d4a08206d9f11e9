#!/bin/sh
# nn.LSTM on the cpu, PyTorch against weft's fused layer (docs/recurrent.md), in the same
# run and interleaved (each size: weft, then PyTorch, ROUNDS times), forward and
# forward+backward, one layer with input_size = hidden_size, float32.
#   usage: bench/rnn-lstm.sh [BUILD_DIR]
#   env:   SIZES   "TxBxH ..." (default: sequence 64-256, batch 32-64, hidden 128-512)
#          THREADS (2), REPEATS (median of, 5), ROUNDS (5)
# Prints one line per figure: rnn_lstm_T64_B32_H128_fwd_ms (weft) beside
# torch_lstm_T64_B32_H128_fwd_ms (PyTorch), then a table of weft / PyTorch time ratios
# (below 1: weft faster). Run it on a quiet machine; figures on a shared one are noise.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
sizes=${SIZES:-"64x32x128 64x64x256 128x32x256 128x64x512 256x32x128 256x64x512"}
threads=${THREADS:-2}
repeats=${REPEATS:-5}
rounds=${ROUNDS:-5}
python=/usr/bin/python3
out=$(mktemp "${TMPDIR:-/tmp}/weft-rnn-bench.XXXXXX")
trap 'rm -f "$out"' EXIT INT TERM

export OMP_NUM_THREADS="$threads" OMP_WAIT_POLICY=passive
export WEFT_PLUGIN_PATH="$build/plugins"
r=0
while [ "$r" -lt "$rounds" ]; do
    for s in $sizes; do
        WEFT_BENCH_RNN_SIZES="$s" "$build/bench/weft-bench" --filter rnn_ \
            --repeats "$repeats" --threads "$threads" | grep '^rnn_' | tee -a "$out"
        "$python" "$root/bench/rnn_torch.py" "$threads" "$repeats" "$s" | tee -a "$out"
    done
    r=$((r + 1))
done
echo "# weft / PyTorch over $rounds interleaved rounds (each figure the median of $repeats): median [min-max]"
"$python" - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 2 or not f[0].startswith(("rnn_lstm_", "torch_lstm_")):
        continue
    side, key = f[0].split("_lstm_", 1)
    runs.setdefault(key, {}).setdefault(side, []).append(float(f[1]))
for key in sorted(runs):
    w, t = runs[key].get("rnn"), runs[key].get("torch")
    if not w or not t:
        continue
    mw, mt = statistics.median(w), statistics.median(t)
    print(f"{key:28s} weft {mw:9.3f} [{min(w):.3f}-{max(w):.3f}] ms  "
          f"torch {mt:9.3f} [{min(t):.3f}-{max(t):.3f}] ms  ratio {mw / mt:.2f}")
PY
