#!/usr/bin/python3
"""PyTorch's side of weft-bench's per-op figures: the same work, timed the same way
(median of REPEATS runs after a warm-up), printed as "name value unit" lines.

  view_16, add_16              200,000 calls on 16-element float32 tensors, us/call
  autograd_chain100_fwd_bwd    200 chains of 100 ops (mul, add, tanh in turn) on 16
                               elements, then backward of their sum, us/op
  transpose_contiguous_4096    x.t().contiguous() of a 4096x4096 float32, GB/s (read+write)
  clone_4096                   a contiguous 4096x4096 float32 copied, GB/s

  usage: overhead_torch.py [--threads N] [--repeats N] [--filter TEXT]
Run by bench/op-overhead.sh beside weft-bench."""
import argparse

import torch

from timing import time_median


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    def report(name, value, unit):
        print(f"{name:<32} {value:10.3f} {unit}", flush=True)

    a = torch.rand(16)
    b = torch.rand(16)
    calls = 200000
    if args.filter in "view_16":
        def views():
            for _ in range(calls):
                a.view(4, 4)
        report("view_16", time_median(views, args.repeats) / calls * 1e6, "us/call")
    if args.filter in "add_16":
        def adds():
            for _ in range(calls):
                torch.add(a, b)
        report("add_16", time_median(adds, args.repeats) / calls * 1e6, "us/call")
    if args.filter in "autograd_chain100_fwd_bwd":
        x = torch.rand(16, requires_grad=True)
        c = torch.rand(16)

        def chains():
            for _ in range(200):
                y = x
                for i in range(100):
                    y = y * c if i % 3 == 0 else (y + c if i % 3 == 1 else torch.tanh(y))
                y.sum().backward()
                x.grad = None
        report("autograd_chain100_fwd_bwd", time_median(chains, args.repeats) / 20000 * 1e6, "us/op")
    n = 4096
    x = torch.rand(n, n)
    nbytes = 2.0 * n * n * 4
    if args.filter in "transpose_contiguous_4096":
        xt = x.t()
        report("transpose_contiguous_4096", nbytes / time_median(lambda: xt.contiguous(), args.repeats) / 1e9,
               "GB/s")
    if args.filter in "clone_4096":
        report("clone_4096", nbytes / time_median(lambda: x.clone(), args.repeats) / 1e9, "GB/s")


if __name__ == "__main__":
    main()
