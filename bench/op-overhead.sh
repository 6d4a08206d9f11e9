#!/bin/sh
# Per-op overheads, weft against PyTorch in the same run, interleaved: each round runs
# weft-bench (and a second weft build, to compare two commits), then PyTorch 1.13 in each
# of its settings (1 and 2 threads, OMP_WAIT_POLICY unset and PASSIVE): view_16, add_16,
# autograd_chain100_fwd_bwd, transpose_contiguous_4096 and clone_4096
# (bench/overhead_torch.py does PyTorch's side the way weft-bench does its own).
#   usage: bench/op-overhead.sh [BUILD_DIR [BASE_BUILD_DIR]]
#   env:   ROUNDS (5), REPEATS (median of, 9), THREADS (weft's, 2)
# Prints each run's lines, then per figure and side the median [min-max] over the rounds,
# and PyTorch's best setting. Run it on a quiet machine.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
base=${2:+$(cd "$2" && pwd)}
rounds=${ROUNDS:-5}
repeats=${REPEATS:-9}
threads=${THREADS:-2}
python=/usr/bin/python3
filter='view_16|add_16|autograd_chain100_fwd_bwd|transpose_contiguous_4096|clone_4096|memcpy_4096'
out=$(mktemp "${TMPDIR:-/tmp}/weft-overhead.XXXXXX")
trap 'rm -f "$out"' EXIT INT TERM

weft() { # side build
    # weft-bench moved from apps/ to bench/: a base build of an older commit has it there.
    bench="$2/bench/weft-bench"
    [ -x "$bench" ] || bench="$2/apps/weft-bench"
    for f in view_16 add_16 autograd_chain100_fwd_bwd 4096; do
        WEFT_PLUGIN_PATH="$2/plugins" "$bench" --filter "$f" --repeats "$repeats" \
            --threads "$threads"
    done | grep -E "^($filter) " | sed "s/^/$1 /" | tee -a "$out"
}

torch() { # side threads [policy]
    env ${3:+OMP_WAIT_POLICY=$3} "$python" "$root/bench/overhead_torch.py" --threads "$2" \
        --repeats "$repeats" | sed "s/^/$1 /" | tee -a "$out"
}

r=0
while [ "$r" -lt "$rounds" ]; do
    weft weft "$build"
    [ -n "$base" ] && weft base "$base"
    torch torch_t1 1
    torch torch_t2 2
    torch torch_t1_passive 1 PASSIVE
    torch torch_t2_passive 2 PASSIVE
    r=$((r + 1))
done

echo "# median [min-max] over $rounds interleaved rounds (each figure the median of $repeats runs)"
"$python" - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, name, value, unit = line.split()[:4]
    runs.setdefault((name, unit), {}).setdefault(side, []).append(float(value))
for (name, unit), sides in runs.items():
    higher_better = unit == "GB/s"
    medians = {s: statistics.median(v) for s, v in sides.items()}
    torch_sides = [s for s in medians if s.startswith("torch")]
    pick = max if higher_better else min
    best = pick(torch_sides, key=lambda s: medians[s]) if torch_sides else None
    for side, v in sides.items():
        mark = "  <- PyTorch's best" if side == best else ""
        print(f"{name:28s} {side:18s} {medians[side]:9.3f} [{min(v):.3f}-{max(v):.3f}] {unit}{mark}")
    if "weft" in medians and best:
        w, t = medians["weft"], medians[best]
        ratio = w / t if higher_better else t / w
        print(f"{name:28s} weft vs PyTorch's best: {ratio:.2f}x")
PY
