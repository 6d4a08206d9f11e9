#!/usr/bin/python3
"""bench/rnn_torch.py: PyTorch's side of bench/rnn-lstm.sh, nn.LSTM on the cpu.

usage: rnn_torch.py THREADS REPEATS TxBxH...
For each size: one nn.LSTM(H, H) layer over a [T, B, H] float32 input, the median of
REPEATS runs of the forward under no_grad and of forward + backward of sum(output),
printed as weft-bench prints its figures:
  torch_lstm_T64_B32_H128_fwd_ms      12.345 ms
"""
import sys

import torch

from timing import time_median


def main():
    threads, repeats = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    for size in sys.argv[3:]:
        T, B, H = (int(v) for v in size.split("x"))
        m = torch.nn.LSTM(H, H)
        x = torch.rand(T, B, H) * 2 - 1

        def fwd():
            with torch.no_grad():
                m(x)

        def fwdbwd():
            out, _ = m(x)
            out.sum().backward()

        for name, fn in (("fwd", fwd), ("fwdbwd", fwdbwd)):
            print("torch_lstm_T%d_B%d_H%d_%s_ms %12.3f ms" % (T, B, H, name,
                                                               time_median(fn, repeats) * 1e3))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
