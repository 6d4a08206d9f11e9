"""Loads a weft GPT checkpoint into plain PyTorch (scripts/nanogpt_torch.py) with a strict
load_state_dict and computes the validation loss weft-train printed: the mean
cross-entropy over the non-overlapping block_size windows of the last val_fraction of a
byte-level text (the `text` reader's split, plugins/io/token_stream.c).

    /usr/bin/python3 scripts/check-gpt-checkpoint.py runs/gpt-char/model.safetensors \
        data/text/kjv-genesis-2kings.txt [--val-fraction 0.1]

Needs PyTorch (Debian's python3-torch); the test suites do not use this script.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt_torch  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64}


def load_safetensors(path):
    """(tensors, metadata) of a safetensors file, read by hand (no safetensors package)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[e["dtype"]])
        tensors[name] = t.reshape(e["shape"]).clone()
    return tensors, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("text")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    tensors, meta = load_safetensors(a.checkpoint)
    if meta.get("model.type") != "gpt":
        sys.exit("%s: no GPT config in its metadata (model.type = %r)" %
                 (a.checkpoint, meta.get("model.type")))
    keys = {"n_layer": int, "n_head": int, "n_embd": int, "block_size": int,
            "vocab_size": int, "dropout": float}
    cfg = {k: conv(meta["model." + k]) for k, conv in keys.items()}
    cfg["bias"] = meta["model.bias"] in ("true", "1")
    cfg["gelu"] = meta.get("model.gelu", "none")
    model = nanogpt_torch.GPT(nanogpt_torch.Config(**cfg))
    print(model.load_state_dict(tensors, strict=True))
    model.eval()
    data = open(a.text, "rb").read()
    n = len(data)
    val = torch.tensor(list(data[int(math.floor(n * (1 - a.val_fraction))):]), dtype=torch.long)
    bs = cfg["block_size"]
    windows = (len(val) - 1) // bs
    total, count = 0.0, 0
    with torch.no_grad():
        for w0 in range(0, windows, a.batch):
            idx = torch.arange(w0, min(w0 + a.batch, windows)) * bs
            x = torch.stack([val[i:i + bs] for i in idx.tolist()])
            y = torch.stack([val[i + 1:i + 1 + bs] for i in idx.tolist()])
            logits, _ = model(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                     y.reshape(-1), reduction="sum")
            total += loss.item()
            count += y.numel()
    print("PyTorch %s: val loss %.4f over %d windows of %d bytes" %
          (torch.__version__, total / count, windows, bs))


if __name__ == "__main__":
    main()
