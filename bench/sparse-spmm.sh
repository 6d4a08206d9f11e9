#!/usr/bin/env bash
# SpMM, SpMV and the transposed product of weft against PyTorch in one run, on the same
# machine and the same matrices: weft-bench's sparse group (bench/bench_sparse.c), then
# bench/sparse_torch.py with /usr/bin/python3 (Debian's PyTorch 1.13), both on 2 threads,
# then a table "figure  weft  torch  unit  torch/weft". Each side also prints its results'
# checksums (they agree up to float32 rounding when both multiplied the same matrices).
#   bench/sparse-spmm.sh [REPEATS]   (from the repository root after `make`;
#                                     BUILD=<dir> picks another build directory)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
repeats=${1:-7}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$build/bench/weft-bench" --filter sparse_ --repeats "$repeats" --threads 2 | tee "$out/weft.txt"
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  /usr/bin/python3 bench/sparse_torch.py --threads 2 --repeats "$repeats" | tee "$out/torch.txt"
else
  echo "# PyTorch or NumPy not installed for /usr/bin/python3 (apt-get install python3-torch):" \
       "no comparison"
  : > "$out/torch.txt"
fi

echo
awk 'FNR == 1 { side++ }
     /^#/ || NF < 3 { next }
     side == 1 { order[++n] = $1; weft[$1] = $2; unit[$1] = $3 }
     side == 2 { torch[$1] = $2 }
     END {
       printf "%-36s %12s %12s %-8s %s\n", "figure", "weft", "torch", "unit", "torch/weft"
       for (i = 1; i <= n; i++) {
         k = order[i]
         t = (k in torch) ? torch[k] : "-"
         r = (k in torch) && weft[k] > 0 && unit[k] == "ms/call" ? sprintf("%.1fx", torch[k] / weft[k]) : ""
         printf "%-36s %12s %12s %-8s %s\n", k, weft[k], t, unit[k], r
       }
     }' "$out/weft.txt" "$out/torch.txt"
