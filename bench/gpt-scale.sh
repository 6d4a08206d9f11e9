#!/usr/bin/env bash
# GPT training at scale: weft-train against PyTorch 1.13 running nanoGPT's model and loop
# (AdamW with its two groups, clip_grad_norm_ 1.0, the same batch, sequence and
# accumulation) on a ladder of sizes, each rung interleaved (bench/gpt_compare.py):
#   baby       configs/gpt-char.ini: 4 layers x 4 heads x 128, block 64, batch 12
#   mid        6 layers x 6 heads x 384, block 256, batch 16 (nanoGPT's shakespeare_char
#              model on the baby's optimizer)
#   gpt2-256   configs/gpt2-small.ini (12 x 12 x 768) at block 256, batch 16
#   gpt2-1024  configs/gpt2-small.ini as shipped: block 1024, batch 4, accumulate 2
# Per rung and setting: tokens/s and ms per optimizer step, the process's peak resident
# memory and weft's allocator peak, median (min-max) over ROUNDS interleaved rounds, and
# weft's best setting against PyTorch's best; at the end one summary table.
#
#   bench/gpt-scale.sh [RUNG ...]            (default: all four, smallest first)
# Environment:
#   ROUNDS=5        interleaved rounds per rung
#   MODE=fp32       fp32: the ladder in float32; bf16: float32 and bf16 autocast
#                   interleaved ([train] precision = bf16 against torch.autocast("cpu",
#                   bfloat16)), with each side's bf16/fp32 ratio and the validation loss
#                   after the run's steps (VAL_BATCHES batches of the validation split)
#   SETTINGS=auto   auto: every setting (weft 1 and 2 threads; PyTorch 1 and 2 threads,
#                   each with and without OMP_WAIT_POLICY=PASSIVE) on baby and mid, and the
#                   2-thread ones on the GPT-2 rungs (1 thread is half as fast there and
#                   would double the time); all: every setting everywhere; fast: as auto,
#                   but on the GPT-2 rungs PyTorch at 2 threads without PASSIVE alone (at
#                   block 256 on the Zen 5 its passive setting ran 0-4% slower, within the
#                   rounds' spread, and dropping it saves a third of gpt2-1024's time)
#   ITERS, WARMUP   timed and warm-up steps per run, overriding each rung's
#   BUILD=build     the build folder holding apps/weft-train
#   SET="k=v ..."   more overrides for every rung, both sides (a smoke test:
#                   ROUNDS=1 WARMUP=1 ITERS=1 SET=model.n_layer=1 bench/gpt-scale.sh)
# PyTorch's OpenBLAS core type is calibrated once, on the mid rung (bench/torch_blas.py),
# unless TORCH_CORETYPE names one.
#
# Run from the repository root after `make`, on a quiet machine. Rough times on a quiet
# 2-core machine at ROUNDS=5: baby 3 min, mid 15 min, gpt2-256 45 min, gpt2-1024 90 min;
# MODE=bf16 about twice that (on the 2-vCPU Zen 5: mid 18 min, gpt2-256 30 min, and
# gpt2-1024 with SETTINGS=fast 58 min).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
mode=${MODE:-fp32}
settings=${SETTINGS:-auto}
build=${BUILD:-build}
val_batches=${VAL_BATCHES:-4}
rungs=("$@")
[ ${#rungs[@]} -gt 0 ] || rungs=(baby mid gpt2-256 gpt2-1024)

case "$mode" in
fp32) precision=fp32 ;;
bf16) precision=fp32,bf16 ;;
*) echo "gpt-scale.sh: MODE must be fp32 or bf16, got '$mode'" >&2; exit 2 ;;
esac
case "$settings" in auto | all | fast) ;; *) echo "gpt-scale.sh: SETTINGS must be auto, all or fast" >&2; exit 2 ;; esac

# rung -> config, overrides (both sides), warm-up and timed steps, whether it is large
rung_args() {
    case "$1" in
    baby) echo "configs/gpt-char.ini|10|50|small" ;;
    mid) echo "configs/gpt-char.ini|2|6|small|model.n_layer=6 model.n_head=6 model.n_embd=384 model.block_size=256 data.block_size=256 data.val.block_size=256 data.batch_size=16" ;;
    gpt2-256) echo "configs/gpt2-small.ini|1|2|large|model.block_size=256 data.block_size=256 data.val.block_size=256 data.batch_size=16 train.accumulate=1" ;;
    gpt2-1024) echo "configs/gpt2-small.ini|1|2|large|" ;;
    *) return 1 ;;
    esac
}
for r in "${rungs[@]}"; do
    rung_args "$r" >/dev/null || { echo "gpt-scale.sh: unknown rung '$r' (baby, mid, gpt2-256, gpt2-1024)" >&2; exit 2; }
done

compare_args() { # rung -> the gpt_compare.py arguments of its model and steps
    local spec config warmup iters size sets
    spec=$(rung_args "$1")
    IFS='|' read -r config warmup iters size sets <<<"$spec"
    warmup=${WARMUP:-$warmup}
    iters=${ITERS:-$iters}
    # weft prints a progress line every WARMUP steps: ITERS must be a multiple of it
    iters=$(( (iters + warmup - 1) / warmup * warmup ))
    printf '%s\n' --config "$config" --warmup "$warmup" --iters "$iters" --build "$build"
    for kv in $sets ${SET:-}; do printf '%s\n' --set "$kv"; done
    if [ "$settings" != all ] && [ "$size" = large ]; then
        printf '%s\n' --weft-threads 2 --torch-settings "$([ "$settings" = fast ] && echo t2 || echo t2,t2_passive)"
    fi
}

summary=$(mktemp "${TMPDIR:-/tmp}/gpt-scale.XXXXXX")
trap 'rm -f "$summary"' EXIT

coretype=${TORCH_CORETYPE:-}
if [ -z "$coretype" ]; then
    mapfile -t args < <(compare_args mid)
    coretype=$(/usr/bin/python3 bench/gpt_compare.py "${args[@]}" --calibrate-only |
        sed -n 's/^# pytorch_coretype //p')
    [ -n "$coretype" ] || coretype=detected
fi
echo "# PyTorch's OpenBLAS core type: $coretype; MODE=$mode ROUNDS=$rounds SETTINGS=$settings"

for r in "${rungs[@]}"; do
    echo
    echo "## $r"
    mapfile -t args < <(compare_args "$r")
    /usr/bin/python3 bench/gpt_compare.py "${args[@]}" --rounds "$rounds" \
        --precision "$precision" --val-batches "$([ "$mode" = bf16 ] && echo "$val_batches" || echo 0)" \
        --torch-coretypes "$coretype" --label "$r" --summary-json "$summary"
done

echo
echo "## summary (medians; ratios weft / PyTorch, each side's best setting)"
/usr/bin/python3 - "$summary" <<'EOF'
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("%-10s %-5s %7s %10s %10s %7s %9s %9s %7s %11s" % (
    "rung", "prec", "tok/step", "weft tok/s", "torch tok/s", "ratio", "weft RSS", "torch RSS",
    "ratio", "weft alloc"))
for r in rows:
    print("%-10s %-5s %7d %10.0f %10.0f %6.2fx %8.0fM %8.0fM %6.2fx %10.0fM" % (
        r["label"], r["precision"], r["tokens_per_step"], r["weft_tps"], r["torch_tps"],
        r["weft_tps"] / r["torch_tps"], r["weft_rss"], r["torch_rss"],
        r["weft_rss"] / r["torch_rss"], r["weft_alloc"]))
bf = {(r["label"], r["precision"]): r for r in rows}
for (label, prec), r in bf.items():
    f = bf.get((label, "fp32"))
    if prec == "bf16" and f:
        print("%-10s bf16/fp32 tokens/s: weft %.2fx, PyTorch %.2fx; weft bf16 / PyTorch bf16 %.2fx;"
              " val loss bf16 - fp32: weft %+.4f, PyTorch %+.4f" % (
                  label, r["weft_tps"] / f["weft_tps"], r["torch_tps"] / f["torch_tps"],
                  r["weft_tps"] / r["torch_tps"], r["weft_val"] - f["weft_val"],
                  r["torch_val"] - f["torch_val"]))
EOF
