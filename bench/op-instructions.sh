#!/bin/sh
# Instructions per tiny op, counted (not timed), so two builds compare exactly on a busy
# machine: bench/op_instructions.c runs N calls of an op under callgrind at two N, and
# the difference of the totals over the difference of N is one call's cost, without the
# start-up (plugin load, first-use set-up) that both runs share.
#   usage: bench/op-instructions.sh [BUILD_DIR [BASE_BUILD_DIR]]
#   env:   KINDS ("add_16 view_16 mul_scalar_16 chain_fwd_bwd"), N (2000)
# Each build's driver is compiled against its own source tree's headers (found through
# its meson-info), so BASE_BUILD_DIR may be a build of an older commit. chain_fwd_bwd is
# counted per op of its chains (100 ops and their backward per chain). gelu_tanh_4096 and
# gelu_tanh_backward_4096 count the cpu kernels of tanh-GELU (KINDS="gelu_tanh_4096
# gelu_tanh_backward_4096"; under valgrind the kernels run their x86-64-v3 clones).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
base=${2:+$(cd "$2" && pwd)}
kinds=${KINDS:-add_16 view_16 mul_scalar_16 chain_fwd_bwd}
n=${N:-2000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-instr.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
command -v valgrind >/dev/null || { echo "op-instructions: valgrind is not installed"; exit 1; }

driver() { # build_dir out
    src=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['directories']['source'])" \
        "$1/meson-info/meson-info.json")
    incs="-I$src/core/include -I$1/core/include"
    libs="-L$1/core -lweft -Wl,-rpath,$1/core"
    if [ -d "$src/ops/include" ]; then
        incs="$incs -I$src/ops/include"
    fi
    # the op layer's own library where it is one (before that it builds into libweft)
    if [ -e "$1/ops/libweft-ops.so" ]; then
        libs="-L$1/ops -lweft-ops -Wl,-rpath,$1/ops $libs"
    fi
    cc -O2 -o "$2" "$root/bench/op_instructions.c" $incs $libs -lm
}

total() { # driver build_dir kind n
    OMP_NUM_THREADS=1 WEFT_PLUGIN_PATH="$2/plugins" valgrind --tool=callgrind \
        --callgrind-out-file="$tmp/out" "$1" "$3" "$4" >/dev/null 2>"$tmp/log" ||
        { cat "$tmp/log"; exit 1; }
    sed -n 's/^totals: *//p' "$tmp/out"
}

count() { # side build_dir
    driver "$2" "$tmp/driver_$1"
    for k in $kinds; do
        lo=$(total "$tmp/driver_$1" "$2" "$k" "$n")
        hi=$(total "$tmp/driver_$1" "$2" "$k" $((2 * n)))
        per=$((hi - lo))
        [ "$k" = chain_fwd_bwd ] && per=$((per / 100))
        printf '%-6s %-16s %8d instructions/op\n' "$1" "$k" $((per / n))
    done
}

count weft "$build"
[ -n "$base" ] && count base "$base"
exit 0
