#!/usr/bin/python3
"""PyTorch's figures for weft-bench's sparse group (bench/bench_sparse.c), on the same
matrices, printed as weft-bench prints them ("name value unit", checksums as comments), so
bench/sparse-spmm.sh can put the two side by side.

The matrices come from splitmix64 exactly as in bench/bench_sparse.c: output i (from 1) of
the generator seeded s is mix(s + i * 0x9E3779B97F4A7C15); a sparse matrix takes three
outputs per drawn nonzero (row = z0 % rows, col = z1 % cols, value = (z2 >> 40) / 2^24),
sums the entries drawn twice (float32, in draw order) and keeps them sorted; a dense
operand takes one output per element, row-major, from seed 1.

    /usr/bin/python3 bench/sparse_torch.py [--threads 2] [--repeats 7] [--filter TEXT]

Needs PyTorch (Debian's python3-torch, 1.13) and NumPy.
"""
import argparse
import math
import sys
import warnings

import numpy as np
import torch

from timing import time_median

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(seed, n):
    """Outputs 1..n of splitmix64 seeded `seed` (uint64 arithmetic wraps, as in C)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def unit_float(z):
    return (z >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def matrix_draw(rows, cols, draws, seed):
    """Sorted (row, col, value) of the drawn matrix, duplicates summed."""
    z = splitmix64(seed, 3 * draws)
    r = (z[0::3] % np.uint64(rows)).astype(np.int64)
    c = (z[1::3] % np.uint64(cols)).astype(np.int64)
    v = unit_float(z[2::3])
    key = r * cols + c
    order = np.argsort(key, kind="stable")
    key, v = key[order], v[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    v = np.add.reduceat(v, starts) if len(starts) else v
    key = key[starts]
    return key // cols, key % cols, v.astype(np.float32)


def sparse_of(r, c, v, rows, cols, csr):
    if csr:
        crow = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(r, minlength=rows), out=crow[1:])
        return torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(c),
                                       torch.from_numpy(v), (rows, cols))
    idx = torch.from_numpy(np.stack([r, c]))
    return torch.sparse_coo_tensor(idx, torch.from_numpy(v), (rows, cols)).coalesce()


def dense_draw(shape, seed):
    n = math.prod(shape)
    return torch.from_numpy(unit_float(splitmix64(seed, n)).reshape(shape))



def report(name, value, unit):
    print(f"{name:<32} {value:10.3f} {unit}", flush=True)


def timed_product(name, fn, repeats, note=""):
    s = time_median(fn, repeats)
    out = fn()
    report(name, s * 1e3, "ms/call")
    print(f"#   checksum {out.double().sum().item():.6e}{note}", flush=True)


def bench_big(args):
    names = ["sparse_csr_spmm_100k_1e6nnz_x64", "sparse_coo_spmm_100k_1e6nnz_x64",
             "sparse_csr_spmv_100k_1e6nnz", "sparse_csr_spmm_t_100k_1e6nnz_x64"]
    want = [args.filter in n for n in names]
    if not any(want):
        return
    n, draws, N = 100000, 1000000, 64
    r, c, v = matrix_draw(n, n, draws, 0)
    print(f"# [{n}, {n}] with {len(v)} nonzeros (splitmix64 seed 0), dense operands seed 1")
    csr = sparse_of(r, c, v, n, n, True)
    coo = sparse_of(r, c, v, n, n, False)
    B = dense_draw((n, N), 1)
    x = dense_draw((n,), 1)
    runs = [
        (lambda: torch.sparse.mm(csr, B), ""),
        (lambda: torch.sparse.mm(coo, B), ""),
        # torch.mv on CSR needs an MKL build; the [n, 1] product is what runs here
        (lambda: torch.sparse.mm(csr, x.unsqueeze(1)), "  (torch.sparse.mm(csr, x[:, None]))"),
        # what SparseAddmmBackward0 computes for the dense operand
        (lambda: torch.sparse.mm(csr.t(), B), "  (torch.sparse.mm(csr.t(), G))"),
    ]
    for name, ok, (fn, note) in zip(names, want, runs):
        if ok:
            timed_product(name, fn, args.repeats, note)
    if want[3]:
        s = time_median(lambda: torch.sparse.mm(coo.t(), B), args.repeats)
        print(f"#   COO: torch.sparse.mm(coo.t(), G) {s * 1e3:.3f} ms/call")


def bench_crossover(args):
    name = "sparse_dense_crossover_4096_x64"
    if args.filter not in name:
        return
    densities = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0]
    n, N = 4096, 64
    B = dense_draw((n, N), 1)
    prev_d = prev_ratio = 0.0
    crossover = None
    for k, d in enumerate(densities):
        r, c, v = matrix_draw(n, n, int(d * n * n), 0)
        csr = sparse_of(r, c, v, n, n, True)
        full = torch.zeros(n * n)
        full[torch.from_numpy(r * n + c)] = torch.from_numpy(v)
        full = full.reshape(n, n)
        ts = time_median(lambda: torch.sparse.mm(csr, B), args.repeats)
        td = time_median(lambda: torch.mm(full, B), args.repeats)
        d = len(v) / (n * n)
        print(f"#   density {d:<8.4g} nnz {len(v):<9} spmm {ts * 1e3:8.3f} ms  "
              f"dense matmul {td * 1e3:8.3f} ms", flush=True)
        ratio = ts / td
        if ratio >= 1:
            crossover = d if k == 0 else prev_d * (d / prev_d) ** ((1 - prev_ratio) /
                                                                  (ratio - prev_ratio))
            break
        prev_d, prev_ratio = d, ratio
    if crossover is None:
        print("# SpMM is faster than dense matmul at every density up to 1")
        return
    print(f"# dense matmul overtakes SpMM at density {crossover:.3g}")
    report(name, crossover, "density")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--filter", default="")
    args = p.parse_args()
    warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"median of {args.repeats}")
    bench_big(args)
    bench_crossover(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
