#!/bin/sh
# weft-train's profile ([train] profile on torch.profiler's schedule): the Chrome trace is
# valid JSON whose events all have ph, ts, dur, pid and tid; each recorded step's ranges
# (data, forward, backward, optimizer) add up to within 10% of the step's wall time; the
# table has the layout copies' line; the CSV log has the peak memory column, and the run's
# peak at the end is at least each interval's. And out of
# memory, weft-train names the op and the shape it wanted and prints memory_summary.
#   usage: train-profile.sh BUILD_DIR SOURCE_ROOT
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$2" && pwd)
train="$build/apps/weft-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-profile.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "train-profile: $*"; exit 1; }

"$train" "$root/configs/mnist-mlp.ini" --set train.epochs=2 --set train.checkpoint="$tmp/m.safetensors" \
    --set train.log="$tmp/log.csv" --set train.profile="$tmp/prof" --set train.profile_wait=2 \
    --set train.profile_warmup=1 --set train.profile_active=3 >"$tmp/out.txt" 2>&1 ||
    { cat "$tmp/out.txt"; fail "training failed"; }
grep -q "^profile at step 6: $tmp/prof/trace.1.json" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "no profile line"; }
grep -q "^Layout copies (contiguous/clone into other strides): 0 " "$tmp/prof/ops.1.txt" ||
    fail "the table has no layout copies line: $(cat "$tmp/prof/ops.1.txt")"
head -1 "$tmp/log.csv" | grep -q ',peak_allocated_bytes$' || fail "no peak column in the log"
tail -1 "$tmp/log.csv" | grep -Eq ',[1-9][0-9]+$' || fail "no peak in the log's row"
grep -Eq '^epoch 2/2 .* peak [0-9.]+ [KMG]iB' "$tmp/out.txt" || fail "no peak in the epoch line"
# The run's peak at the end is the run's, not the last interval's (each epoch, or each
# log interval in iteration mode, restarts its own; the final evaluation peaks lower).
run_peak_check() { # log out
    /usr/bin/python3 - "$1" "$2" <<'PY' || fail "the run's peak is below an interval's: $2"
import csv, re, sys
rows = [int(r["peak_allocated_bytes"]) for r in csv.DictReader(open(sys.argv[1]))]
run = re.search(r"^memory: peak allocated ([0-9.]+) MiB", open(sys.argv[2]).read(), re.M)
assert run, "no memory line"
assert float(run.group(1)) >= max(rows) / 1048576 - 0.05, (run.group(1), rows)
PY
}
run_peak_check "$tmp/log.csv" "$tmp/out.txt"
"$train" "$root/configs/gpt-char.ini" --set train.max_iters=4 --set train.log_interval=2 \
    --set train.eval_interval=0 --set train.eval_iters=1 --set train.checkpoint="$tmp/g.safetensors" \
    --set train.log="$tmp/g.csv" >"$tmp/g.txt" 2>&1 || { cat "$tmp/g.txt"; fail "GPT training failed"; }
run_peak_check "$tmp/g.csv" "$tmp/g.txt"
/usr/bin/python3 - "$tmp/prof/trace.1.json" <<'PY' || fail "trace check failed"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
for e in events:
    for k in ("ph", "ts", "dur", "pid", "tid"):
        assert k in e, f"event without {k}: {e}"
steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
assert [s["name"] for s in steps] == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"], steps
names = set()
for s in steps:
    inside = [e for e in events if e["tid"] == s["tid"] and e["cat"] == "user_annotation"
              and e["ts"] >= s["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 0.01]
    names |= {e["name"] for e in inside}
    total = sum(e["dur"] for e in inside)
    assert 0.9 * s["dur"] <= total <= 1.0001 * s["dur"], f"{s['name']}: ranges {total:.1f} us of {s['dur']:.1f}"
    print(f"{s['name']}: {s['dur']:.0f} us, its ranges {100 * total / s['dur']:.1f}%")
assert names == {"data", "forward", "backward", "optimizer"}, names
ops = [e for e in events if e["cat"] == "cpu_op"]
assert ops and all("Input Dims" in e["args"] and "device" in e["args"] for e in ops)
assert any(e["args"]["phase"] == "backward" and "autograd node" in e["args"] for e in ops)
PY

# A first layer of 2^40 outputs: its weight wants 3 PiB.
if "$train" "$root/configs/mnist-mlp.ini" --set layer.fc1.out_features=1099511627776 \
    --set layer.fc2.in_features=1099511627776 --set train.checkpoint="$tmp/oom.safetensors" \
    --set train.log="$tmp/oom.csv" >"$tmp/oom.txt" 2>&1; then
    cat "$tmp/oom.txt"; fail "a 3 PiB weight was allocated"
fi
grep -q "^weft-train: .*\[layer.fc1\]: weft_[a-z0-9_]* wanted a float32 tensor of shape \[1099511627776, 784\] on cpu: DefaultCPUAllocator: not enough memory" \
    "$tmp/oom.txt" || { cat "$tmp/oom.txt"; fail "the out-of-memory error names no op and shape"; }
grep -q "weft CPU memory summary, device ID 0" "$tmp/oom.txt" && grep -q "CPU OOMs: 1 " "$tmp/oom.txt" &&
    grep -q "^| Allocated memory " "$tmp/oom.txt" || { cat "$tmp/oom.txt"; fail "no memory_summary after the error"; }
echo "train-profile: ok"
