#!/usr/bin/python3
"""Loads a checkpoint weft-train wrote for configs/mnist-resnet.ini into plain PyTorch
(scripts/mnist_resnet_torch.py's MnistResNet) with a strict load_state_dict, and computes
the test accuracy and loss weft-train printed, in evaluation mode (BatchNorm's running
statistics) on the shipped test set, normalised as the config says (mean 0.1307, std
0.3081).

    /usr/bin/python3 scripts/check-resnet-checkpoint.py runs/mnist-resnet/model.safetensors

Needs PyTorch (Debian's python3-torch); the test suites do not use this script.
"""
import gzip
import importlib.util
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from mnist_resnet_torch import MnistResNet  # noqa: E402

spec = importlib.util.spec_from_file_location("gptcheck",
                                              os.path.join(HERE, "check-gpt-checkpoint.py"))
gptcheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gptcheck)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    tensors, meta = gptcheck.load_safetensors(sys.argv[1])
    model = MnistResNet()
    model.load_state_dict(tensors, strict=True)
    model.eval()
    d = os.path.join(ROOT, "data", "mnist")
    x = read_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz")).float().div_(255)
    x = x.sub_(0.1307).div_(0.3081).unsqueeze(1)
    y = read_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz")).long()
    with torch.no_grad():
        logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    print("%s (%s): strict load_state_dict of %d entries into MnistResNet; test accuracy "
          "%.2f%% loss %.4f (%d samples)" % (sys.argv[1], meta.get("weft.checkpoint", "?"),
                                            len(tensors), 100 * acc, loss, len(y)))


if __name__ == "__main__":
    main()
