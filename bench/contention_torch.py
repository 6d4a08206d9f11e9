#!/usr/bin/python3
"""PyTorch's side of bench/contention.sh: the shipped configs' models trained (or sampled)
in plain PyTorch, one workload per run, printing `samples_per_s VALUE`.

    /usr/bin/python3 bench/contention_torch.py WORKLOAD [--threads N] [--seconds S]

Workloads (the same models, batches and optimizers as the configs):
    mlp      configs/mnist-mlp.ini: 784-256-128-10, batch 64, SGD 0.05 momentum 0.9
    cnn      configs/mnist-cnn.ini, batch 64, the same SGD
    resnet   configs/mnist-resnet.ini (scripts/mnist_resnet_torch.py), batch 64, same SGD
    lstm     configs/lstm-char.ini: embedding 256x32, LSTM 32->128, linear 128->256 over
             [32, 64] byte windows, Adam 3e-3, clip_grad_norm_ 1.0 (tokens/s)
    gpt      configs/gpt-char.ini through scripts/nanogpt_torch.py, batch 12 x 64, AdamW,
             clip 1.0 (tokens/s)
    generate nanoGPT's generate() with that GPT, 1 sequence, top-k none (tokens/s)

Each trains (or samples) for a warm-up of a few steps, then for about S seconds (default
3), and prints the throughput of the timed part. The data are the shipped files, read
with the standard library and held in memory as weft-train holds them.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
TEXT = os.path.join(ROOT, "data", "text", "kjv-genesis-2kings.txt")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def mnist():
    d = os.path.join(ROOT, "data", "mnist")
    x = read_idx(os.path.join(d, "train-images-idx3-ubyte.gz")).float().div_(255)
    x = x.sub_(0.1307).div_(0.3081).unsqueeze(1)
    y = read_idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).long()
    return x, y


def timed(step, samples_per_step, seconds, warmup=5):
    """Runs step() warmup times, then until `seconds` have passed; samples/s of the latter."""
    for _ in range(warmup):
        step()
    n, t0 = 0, time.perf_counter()
    while True:
        step()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n * samples_per_step / dt


def image_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    from mnist_resnet_torch import MnistResNet  # scripts/mnist_resnet_torch.py
    return MnistResNet()


def train_images(name, seconds, batch=64):
    x, y = mnist()
    model = image_model(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    state = {"perm": torch.randperm(len(x), generator=gen), "i": 0}

    def step():
        if state["i"] + batch > len(x):
            state["perm"], state["i"] = torch.randperm(len(x), generator=gen), 0
        idx = state["perm"][state["i"]:state["i"] + batch]
        state["i"] += batch
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()

    return timed(step, batch, seconds)


def text_batches(batch, T):
    with open(TEXT, "rb") as f:
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    data = data[:int(len(data) * 0.9)].long()

    def get():
        ix = torch.randint(len(data) - T, (batch,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
        return x, y

    return get


class CharLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(256, 32)
        self.lstm = nn.LSTM(32, 128, batch_first=True)
        self.head = nn.Linear(128, 256)

    def forward(self, x):
        return self.head(self.lstm(self.embed(x))[0])


def train_lstm(seconds, batch=32, T=64):
    get = text_batches(batch, T)
    model = CharLSTM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def step():
        x, y = get()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        nn.functional.cross_entropy(logits.view(-1, 256), y.view(-1)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return timed(step, batch * T, seconds)


GPT = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=256, dropout=0.0,
           bias=False)


def train_gpt(seconds, batch=12):
    import nanogpt_torch  # scripts/nanogpt_torch.py
    get = text_batches(batch, GPT["block_size"])
    model = nanogpt_torch.GPT(nanogpt_torch.Config(**GPT))
    opt = torch.optim.AdamW(nanogpt_torch.adamw_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99))

    def step():
        x, y = get()
        _, loss = model(x, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return timed(step, batch * GPT["block_size"], seconds, warmup=3)


def generate(seconds):
    """nanoGPT's generate(): the context cropped to block_size, the last position's logits,
    a multinomial draw; one token per step."""
    import nanogpt_torch
    model = nanogpt_torch.GPT(nanogpt_torch.Config(**GPT)).eval()
    idx = torch.zeros((1, 1), dtype=torch.long)

    @torch.no_grad()
    def step():
        nonlocal idx
        cond = idx[:, -GPT["block_size"]:]
        logits, _ = model(cond)
        probs = torch.softmax(logits[:, -1, :], dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, 1)), dim=1)

    return timed(step, 1, seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["mlp", "cnn", "resnet", "lstm", "gpt", "generate"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.workload in ("mlp", "cnn", "resnet"):
        v = train_images(a.workload, a.seconds)
    elif a.workload == "lstm":
        v = train_lstm(a.seconds)
    elif a.workload == "gpt":
        v = train_gpt(a.seconds)
    else:
        v = generate(a.seconds)
    print("samples_per_s %.1f" % v, flush=True)


if __name__ == "__main__":
    main()
