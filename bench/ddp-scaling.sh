#!/usr/bin/env bash
# Data-parallel scaling of weft-train on one node (issue 14, docs/distributed.md): the same
# global batch trained by 1 process x 2 threads and by 2 processes x 1 thread under
# mpirun, interleaved in one run, on the MLP at batch 256 (configs/mnist-mlp.ini) and on
# the baby GPT (configs/gpt-char.ini, batch 12).
#   bench/ddp-scaling.sh [ROUNDS] [EPOCHS] [ITERS] [SECTION.KEY=VALUE ...]
#   (from the repository root after `make`; BUILD=<dir> picks another build directory)
# Each of ROUNDS (5) rounds runs every setting once, the order alternating from round to
# round, so a drift in the machine's speed lands on all of them:
#   1x2          1 process, [cpu] threads = 2, the config's wait_policy
#   1x2_passive  the same with wait_policy = passive (on a busy machine 2 spinning OpenMP
#                threads lose several times over; the better 1x2 is the baseline)
#   2x1          mpirun -np 2, [cpu] threads = 1, half the batch per process ([data]
#                batch_size is per process), so the global batch is the same
# The MLP trains EPOCHS (5) epochs and a run's figure is its best epoch's images/s (as
# bench/train-throughput.sh); the GPT takes 10 + ITERS (50) steps and times the last ITERS
# from its progress lines (as bench/gpt-throughput.sh), in tokens/s. Extra arguments are
# --set overrides for every run. Prints per setting the median (min-max) over the rounds;
# the scaling efficiency, 2x1 / the better 1x2 (of the medians; the per-round ratios'
# range beside it) against the issue's target of 0.9; and, from weft-train's "ddp:" line,
# the all-reduce time per step, the part of it backward waited for (exposed) and the
# fraction hidden under backward. Run on a quiet machine with 2 free cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
rounds=${1:-5}
epochs=${2:-5}
iters=${3:-50}
shift $(( $# > 3 ? 3 : $# ))
warmup=10
train=$build/apps/weft-train

if ! command -v mpirun > /dev/null; then
  echo "ddp-scaling: mpirun not found (apt-get install openmpi-bin libopenmpi-dev, or make deps)" >&2
  exit 1
fi
if [[ ! -x $train || ! -e $build/plugins/weft-dist-mpi.so ]]; then
  echo "ddp-scaling: $train or $build/plugins/weft-dist-mpi.so missing: build first (make," \
       "or ninja -C $build)" >&2
  exit 1
fi
# Open MPI refuses root unless told; --bind-to none: mpirun would pin each rank to a core
# of its choosing; --oversubscribe: a machine with fewer than 2 slots still runs both.
mpirun=(mpirun -np 2 --oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && mpirun+=(--allow-run-as-root)

cores=$(nproc)
load=$(cut -d' ' -f1 /proc/loadavg)
if (( cores < 2 )) || awk -v l="$load" 'BEGIN { exit !(l > 0.5) }'; then
  echo "# warning: load average $load on $cores cores: not a quiet machine, the figures are" \
       "indicative only"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
extra=()
for kv in "$@"; do extra+=(--set "$kv"); done

# run NAME PROCS CONFIG [--set ...]: one weft-train run; its stdout in $tmp/NAME.out, its
# CSV log in $tmp/NAME.csv. 1 process runs without mpirun: a plain process is what data
# parallelism is measured against (and what mpirun -np 1 would be: a world of one).
run() {
  local name=$1 procs=$2 config=$3
  shift 3
  local cmd=("$train" "$config" --overwrite --set "train.checkpoint=$tmp/$name.safetensors"
             --set "train.log=$tmp/$name.csv" "$@" "${extra[@]}")
  (( procs > 1 )) && cmd=("${mpirun[@]}" "${cmd[@]}")
  rm -f "$tmp/$name.csv"
  if ! "${cmd[@]}" > "$tmp/$name.out" 2> "$tmp/$name.err"; then
    echo "ddp-scaling: this run failed: ${cmd[*]}" >&2
    tail -n 20 "$tmp/$name.out" "$tmp/$name.err" >&2
    exit 1
  fi
}

# mlp NAME PROCS [--set ...]: the best epoch's images/s of the log.
mlp() {
  local name=$1 procs=$2
  shift 2
  run "$name" "$procs" configs/mnist-mlp.ini --set "train.epochs=$epochs" --set data.workers=1 "$@"
  awk -F, 'NR > 1 && $7 > best { best = $7 } END { printf "%.0f\n", best }' "$tmp/$name.csv"
}

# gpt NAME PROCS [--set ...]: tokens/s over the progress lines after the warm-up one,
# "step 20/60  loss 3.1  lr 1e-04  6014 tok/s  127.7 ms/step  ETA 4s".
gpt() {
  local name=$1 procs=$2
  shift 2
  run "$name" "$procs" configs/gpt-char.ini --set "train.max_iters=$((warmup + iters))" \
      --set "train.log_interval=$warmup" --set train.eval_interval=0 --set train.eval_iters=1 \
      --set train.checkpoint_interval=0 "$@"
  awk -v warmup="$warmup" '
    $1 == "step" && $2 ~ /\/[0-9]+$/ {
      split($2, s, "/")
      for (i = 3; i < NF; i++) {
        if ($(i + 1) == "tok/s") rate = $i
        if ($(i + 1) == "ms/step") ms = $i
      }
      if (last >= warmup) { n = s[1] - last; secs += n * ms / 1e3; tokens += rate * n * ms / 1e3 }
      last = s[1]
    }
    END { if (secs > 0) printf "%.0f\n", tokens / secs; else print "none" }' "$tmp/$name.out"
}

# From a 2-process run's "ddp: N steps, B buckets all-reduced, X MB, comm Y s, exposed Z s
# (hidden H%)": all-reduce ms per step, exposed ms per step, % hidden.
ddp_line() {
  awk '$1 == "ddp:" {
         for (i = 2; i <= NF; i++) {
           if ($i == "steps,") steps = $(i - 1)
           if ($i == "comm") comm = $(i + 1)
           if ($i == "exposed") exposed = $(i + 1)
         }
         hidden = comm > 0 ? 1 - exposed / comm : 0
         hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden
         printf "%.3f %.3f %.1f\n", 1e3 * comm / steps, 1e3 * exposed / steps, 100 * hidden
       }' "$tmp/$1.out"
}

echo "# $rounds rounds, interleaved; 1 process x 2 threads (1x2, and 1x2_passive with" \
     "[cpu] wait_policy = passive) against 2 processes x 1 thread (2x1, mpirun, half the" \
     "batch each); $cores cores, $train"
echo "# mlp_b256: configs/mnist-mlp.ini, batch 256 (2x1: 128 per process), best of $epochs" \
     "epochs; gpt: configs/gpt-char.ini, batch 12 (2x1: 6), $iters timed steps after $warmup"
settings=(1x2 1x2_passive 2x1)
declare -A fig
for ((r = 1; r <= rounds; r++)); do
  for model in mlp_b256 gpt; do
    if [[ $model == mlp_b256 ]]; then full=256 fn=mlp; else full=12 fn=gpt; fi
    for ((k = 0; k < ${#settings[@]}; k++)); do
      setting=${settings[(k + r - 1) % ${#settings[@]}]}
      name=$model.$setting
      case $setting in
        1x2) value=$($fn "$name" 1 --set cpu.threads=2 --set "data.batch_size=$full") ;;
        1x2_passive) value=$($fn "$name" 1 --set cpu.threads=2 --set "data.batch_size=$full" \
                                 --set cpu.wait_policy=passive) ;;
        2x1) value=$($fn "$name" 2 --set cpu.threads=1 --set "data.batch_size=$((full / 2))")
             fig[$model.ddp]+="$(ddp_line "$name");" ;;
      esac
      fig[$name]+="$value "
    done
  done
  echo "# round $r/$rounds done" >&2
done

# summary FORMAT VALUES...: "median (min-max)"
summary() {
  local fmt=$1
  shift
  printf '%s\n' "$@" | sort -g | awk -v fmt="$fmt" '
    { v[NR] = $1 }
    END {
      med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf fmt " (" fmt "-" fmt ")\n", med, v[1], v[NR]
    }'
}
median() { summary "%.6f" "$@" | cut -d' ' -f1; }

echo
printf '%-9s %-28s %s\n' model setting "median (min-max) over the rounds"
for model in mlp_b256 gpt; do
  unit=img/s
  [[ $model == gpt ]] && unit=tok/s
  for setting in "${settings[@]}"; do
    read -ra v <<< "${fig[$model.$setting]}"
    printf '%-9s %-28s %s %s\n' "$model" "$setting" "$(summary %.0f "${v[@]}")" "$unit"
  done
  # the baseline: the 1x2 setting with the better median
  base=1x2
  read -ra a <<< "${fig[$model.1x2]}"
  read -ra b <<< "${fig[$model.1x2_passive]}"
  awk -v a="$(median "${a[@]}")" -v b="$(median "${b[@]}")" 'BEGIN { exit !(b > a) }' &&
    base=1x2_passive
  read -ra one <<< "${fig[$model.$base]}"
  read -ra two <<< "${fig[$model.2x1]}"
  ratios=()
  for ((i = 0; i < ${#one[@]}; i++)); do
    ratios+=("$(awk -v a="${two[i]}" -v b="${one[i]}" 'BEGIN { printf "%.4f", a / b }')")
  done
  eff=$(awk -v a="$(median "${two[@]}")" -v b="$(median "${one[@]}")" \
            'BEGIN { printf "%.2f", a / b }')
  verdict=$(awk -v e="$eff" 'BEGIN { print (e >= 0.9 ? "met" : "not met") }')
  printf '%-9s %-28s %s (rounds %s), target 0.9 %s\n' "$model" "efficiency 2x1/$base" "$eff" \
         "$(summary %.2f "${ratios[@]}" | sed 's/.*(\(.*\))/\1/')" "$verdict"
  comm=() exposed=() hidden=()
  IFS=';' read -ra lines <<< "${fig[$model.ddp]}"
  for l in "${lines[@]}"; do
    read -r c e h <<< "$l"
    comm+=("$c") exposed+=("$e") hidden+=("$h")
  done
  printf '%-9s %-28s %s ms/step\n' "$model" "2x1 all-reduce" "$(summary %.2f "${comm[@]}")"
  printf '%-9s %-28s %s ms/step\n' "$model" "2x1 exposed (waited)" \
         "$(summary %.2f "${exposed[@]}")"
  printf '%-9s %-28s %s %%\n' "$model" "2x1 hidden under bwd" "$(summary %.0f "${hidden[@]}")"
done
