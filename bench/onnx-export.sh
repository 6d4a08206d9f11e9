#!/bin/sh
# The ONNX export of the GPT config (configs/gpt-char.ini, docs/export.md): the export's
# time and the file's size, and the batch-1 latency (sequence = block_size) of ONNX
# Runtime (onnxruntime-node) against weft's own forward, in the same run, interleaved:
# each round runs weft-train export --latency for every thread count and wait policy.
#   usage: bench/onnx-export.sh [BUILD_DIR]
#   env:   ROUNDS (5), RUNS (timed forwards per side and round, 200), THREADS ("1 2"),
#          CKPT (a gpt-char checkpoint; default: one trained 20 steps here)
# Prints each round's lines, then medians [min-max] over the rounds. Needs make onnx-deps.
# Run it on a quiet machine; figures on a shared one are noise.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
rounds=${ROUNDS:-5}
runs=${RUNS:-200}
threads=${THREADS:-"1 2"}
train="$build/apps/weft-train"
config="$root/configs/gpt-char.ini"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-onnx-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
export WEFT_PLUGIN_PATH="$build/plugins"
ckpt=${CKPT:-}
if [ -z "$ckpt" ]; then
    ckpt="$tmp/gpt.safetensors"
    "$train" "$config" --set train.max_iters=20 --set train.eval_interval=20 \
        --set train.eval_iters=1 --set train.log_interval=20 --set train.checkpoint="$ckpt" \
        --set train.log="$tmp/log.csv" >"$tmp/train.txt" 2>&1 || { cat "$tmp/train.txt"; exit 1; }
fi
out="$tmp/lines.txt"
r=0
while [ "$r" -lt "$rounds" ]; do
    for t in $threads; do
        for policy in active passive; do
            tag="threads=$t wait=$policy"
            if [ "$policy" = passive ]; then wait_env="OMP_WAIT_POLICY=passive"; else wait_env="OMP_WAIT_POLICY="; fi
            env OMP_NUM_THREADS="$t" $wait_env "$train" export "$config" --set cpu.threads="$t" \
                --checkpoint "$ckpt" --out "$tmp/gpt.onnx" --latency "$runs" --ort-threads "$t" \
                >"$tmp/run.txt" 2>&1 || { cat "$tmp/run.txt"; exit 1; }
            sed "s/^/$tag: /" "$tmp/run.txt" | grep -E "exported|latency" | tee -a "$out"
        done
    done
    r=$((r + 1))
done
echo "# over $rounds interleaved rounds: median [min-max]"
/usr/bin/python3 - "$out" <<'PY'
import re, statistics, sys
fig = {}
for line in open(sys.argv[1]):
    tag, rest = line.split(": ", 1)
    m = re.search(r"\(ONNX opset \d+, ([0-9.]+) MiB\) in ([0-9.]+) s", rest)
    if m:
        fig.setdefault("file size MiB", []).append(float(m.group(1)))
        fig.setdefault("export s", []).append(float(m.group(2)))
        continue
    m = re.match(r"latency: (weft|onnxruntime) .*: median ([0-9.]+) ms", rest)
    if m:
        fig.setdefault("%s %s ms" % (tag, m.group(1)), []).append(float(m.group(2)))
for key in sorted(fig):
    v = fig[key]
    print("%-45s %9.3f [%.3f-%.3f]" % (key, statistics.median(v), min(v), max(v)))
for key in sorted(k for k in fig if k.endswith("weft ms")):
    w, o = fig[key], fig.get(key.replace("weft", "onnxruntime"))
    if o:
        print("%-45s %9.2f" % (key.replace("weft ms", "weft / onnxruntime"),
                               statistics.median(w) / statistics.median(o)))
PY
