#!/usr/bin/env python3
"""The same models and data as configs/mnist-mlp.ini and configs/mnist-cnn.ini, trained
with PyTorch for comparison with weft-train. Reads the shipped IDX files with the stdlib.
Prints `name value unit` lines: images/s of the training loop (data already in memory,
as weft's loader also holds the decoded set in memory).

  python3 bench/torch_train.py [--epochs N] [--threads N] [--bf16]

--bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), the
recipe weft-train's [train] precision = bf16 follows.
"""
import argparse
import gzip
import os
import struct
import time

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return t.reshape(dims)


def mnist():
    d = os.path.join(ROOT, "data", "mnist")
    x = read_idx(os.path.join(d, "train-images-idx3-ubyte.gz")).float().div_(255)
    x = x.sub_(0.1307).div_(0.3081).unsqueeze(1)
    y = read_idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).long()
    return x, y


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))


def train(model, x, y, batch, epochs, bf16=False):
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    best = 0.0
    for epoch in range(epochs):
        perm = torch.randperm(n)
        t0 = time.perf_counter()
        for i in range(0, n - batch + 1, batch):
            idx = perm[i:i + batch]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        dt = time.perf_counter() - t0
        best = max(best, (n // batch) * batch / dt)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", choices=["mlp_b64", "mlp_b256", "cnn_b64"], action="append",
                    help="only these (repeatable); default all three")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast around forward and loss")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x, y = mnist()
    tag = f"t{args.threads}" + ("_passive" if os.environ.get("OMP_WAIT_POLICY") == "PASSIVE" else "")
    tag += "_bf16" if args.bf16 else ""
    for name, make, batch in [("mlp_b64", mlp, 64), ("mlp_b256", mlp, 256), ("cnn_b64", cnn, 64)]:
        if args.model and name not in args.model:
            continue
        ips = train(make(), x, y, batch, args.epochs, args.bf16)
        print(f"torch_{name}_{tag} {ips:.0f} images/s", flush=True)


if __name__ == "__main__":
    main()
