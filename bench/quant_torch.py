#!/usr/bin/env python3
"""PyTorch 1.13's side of bench/quant-throughput.sh: a weft float32 checkpoint quantized
PyTorch's own way, its accuracy and inference throughput beside the float32 model's.

    quant_torch.py --model mlp|cnn|cnn_bn|gpt --checkpoint M.safetensors
                   [--batch B] [--threads T] [--passes P] [--calib N] [--max-batches N]

MNIST models: torch.ao.quantization's eager static workflow on the onednn engine (Debian's
PyTorch has no fbgemm; torch.backends.quantized.supported_engines lists qnnpack and
onednn): fuse_modules (Conv2d+BatchNorm2d+ReLU, Conv2d+ReLU, Linear+ReLU), QuantWrapper,
get_default_qconfig("onednn") (HistogramObserver without reduce_range, per-channel
symmetric int8 weights), calibration on the first N training images in order, convert.
The GPT: quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8), nanoGPT's model
(scripts/nanogpt_torch.py). Data: the shipped MNIST test set (2,000 images, normalised as
the configs do) or the text's validation windows (nanoGPT's last 10%, non-overlapping).

Prints two lines, float32 then int8:
    torch fp32 batch B: median M min L max H images/s accuracy A loss X
a pass being the model's forward over the whole set in batches of B, median of P passes
after one warm-up pass (tokens/s and accuracy nan for the GPT)."""
import argparse
import json
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from torch_train import read_idx  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
          "I8": torch.int8, "U8": torch.uint8}


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        lo, hi = e["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + lo:8 + n + hi]), dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def mnist(split):
    d = os.path.join(ROOT, "data", "mnist")
    prefix = "t10k" if split == "test" else "train"
    x = read_idx(os.path.join(d, prefix + "-images-idx3-ubyte.gz")).float().div_(255)
    x = x.sub_(0.1307).div_(0.3081).unsqueeze(1)
    y = read_idx(os.path.join(d, prefix + "-labels-idx1-ubyte.gz")).long()
    return x, y


# The configs' Sequentials, children named as weft names them ("0", "1", ...), and the
# groups torch's fuse_modules takes.
def build(name):
    if name == "mlp":
        m = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                          nn.ReLU(), nn.Linear(128, 10))
        return m, [["1", "2"], ["3", "4"]]
    if name == "cnn":
        m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
        return m, [["0", "1"], ["3", "4"], ["7", "8"]]
    m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(784, 64), nn.ReLU(),
                      nn.Linear(64, 10))
    return m, [["0", "1", "2"], ["4", "5", "6"], ["9", "10"]]


def static_int8(name, state, calib):
    torch.backends.quantized.engine = "onednn"
    m, groups = build(name)
    m.load_state_dict(state)
    m.eval()
    m = torch.ao.quantization.fuse_modules(m, groups)
    q = torch.ao.quantization.QuantWrapper(m)
    q.qconfig = torch.ao.quantization.get_default_qconfig("onednn")
    torch.ao.quantization.prepare(q, inplace=True)
    x, _ = mnist("train")
    with torch.no_grad():
        for i in range(0, calib, 64):
            q(x[i:min(i + 64, calib)])
    torch.ao.quantization.convert(q, inplace=True)
    return q


def gpt_models(state):
    import nanogpt_torch
    c = nanogpt_torch.Config(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=256,
                             dropout=0.0, bias=False)
    m = nanogpt_torch.GPT(c)
    state.setdefault("lm_head.weight", state["transformer.wte.weight"])
    m.load_state_dict(state)
    m.eval()
    q = torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
    return m, q


def text_val(block):
    data = open(os.path.join(ROOT, "data/text/kjv-genesis-2kings.txt"), "rb").read()
    val = torch.tensor(list(data[int(len(data) * 0.9):]), dtype=torch.long)
    n = (len(val) - 1) // block
    x = torch.stack([val[i * block:i * block + block] for i in range(n)])
    y = torch.stack([val[i * block + 1:i * block + block + 1] for i in range(n)])
    return x, y


def measure(model, x, y, batch, passes, gpt):
    batches = [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(x), batch)]

    def run():
        outs = []
        for xb, _ in batches:
            out = model(xb)
            outs.append(out[0] if gpt else out)
        return outs

    with torch.inference_mode():
        outs = run()
        loss = sum(F.cross_entropy(o.reshape(-1, o.shape[-1]), yb.reshape(-1), reduction="sum").item()
                   for o, (_, yb) in zip(outs, batches))
        hits = sum((o.argmax(-1) == yb).sum().item() for o, (_, yb) in zip(outs, batches))
        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    n = y.numel()
    return n, statistics.median(times), min(times), max(times), hits / n, loss / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["mlp", "cnn", "cnn_bn", "gpt"])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--calib", type=int, default=512)
    ap.add_argument("--max-batches", type=int, default=0,
                    help="time the first N batches of the evaluation set (0: all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    state = load_safetensors(args.checkpoint)
    gpt = args.model == "gpt"
    if gpt:
        fp32, int8 = gpt_models(state)
        x, y = text_val(64)
    else:
        fp32, _ = build(args.model)
        fp32.load_state_dict(state)
        fp32.eval()
        int8 = static_int8(args.model, state, args.calib)
        x, y = mnist("test")
    if args.max_batches > 0:
        x, y = x[:args.max_batches * args.batch], y[:args.max_batches * args.batch]
    for name, model in (("fp32", fp32), ("int8", int8)):
        n, med, lo, hi, acc, loss = measure(model, x, y, args.batch, args.passes, gpt)
        print("torch %s batch %d: median %.0f min %.0f max %.0f %s/s accuracy %s loss %.4f" %
              (name, args.batch, n / med, n / hi, n / lo, "tokens" if gpt else "images",
               "nan" if gpt else "%.4f" % acc, loss))
        sys.stdout.flush()


main()
