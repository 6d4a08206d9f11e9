#!/usr/bin/python3
"""Writes tests/fixtures/gpt-tiny*.safetensors: the proof, by llm.c's method, that weft's
GPT computes what nanoGPT's does.

Run by hand where PyTorch is installed (Debian's python3-torch, 1.13 here):
    /usr/bin/python3 scripts/make-gpt-fixture.py [OUTDIR]   (default tests/fixtures)
The test suite (tests/test_gpt.c) reads the files and needs no PyTorch.

The model is nanoGPT's GPT (github.com/karpathy/nanoGPT, model.py) in plain PyTorch,
scripts/nanogpt_torch.py (shared with bench/gpt_compare.py), attention by the math path:
att = (q @ k^T) * (1/sqrt(hd)), masked_fill with the causal mask, softmax, @ v. Weights are drawn in float32 with GPT-2's
initialisation; the reference forward, loss, backward and one AdamW step (nanoGPT's
parameter groups) then run in float64, so the stored values are the exact answer for
float32 weights and weft's float32 and float64 runs are both measured against it.

Each file holds (all float64 but the int64 batch):
    model.<name>   every state_dict entry, in state_dict order (lm_head.weight included)
    x, y           one batch [4, 8] of token ids (y: the next tokens)
    logits         [4, 8, vocab]; loss (0-dim): cross_entropy, ignore_index=-1
    grad.<name>    d loss / d parameter, for every parameter (the tied one once)
    after.<name>   every parameter after one AdamW step: lr 1e-3, betas (0.9, 0.95),
                   eps 1e-8, weight decay 0.1 on dim >= 2 tensors, 0 on the others
and __metadata__: the config as weft writes it ("model.type" = "gpt", "model.n_layer",
...), "num_parameters" (the tied weight counted once) and "torch_version".

The safetensors format is written by hand (no `safetensors` package): an 8-byte
little-endian header length, the JSON header padded with spaces to a multiple of 8,
then the raw little-endian data.
"""
import json
import os
import struct
import sys

import torch

from nanogpt_torch import GPT, Config, adamw_groups  # scripts/nanogpt_torch.py

DTYPES = {torch.float64: ("F64", "<f8"), torch.float32: ("F32", "<f4"),
          torch.int64: ("I64", "<i8")}


def save_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor), written in that order."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        st_dtype, _ = DTYPES[t.dtype]
        # Little-endian raw bytes without numpy: through a byte view of the storage.
        data = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        assert sys.byteorder == "little"
        header[name] = {"dtype": st_dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def make(path, seed, **kw):
    c = Config(**kw)
    torch.manual_seed(seed)
    model = GPT(c)  # float32 weights, GPT-2 init
    x = torch.randint(0, c.vocab_size, (4, c.block_size), dtype=torch.long)
    y = torch.randint(0, c.vocab_size, (4, c.block_size), dtype=torch.long)
    y[0, 0] = -1  # nanoGPT's ignore_index: one target left out of the loss
    state = [(k, v.clone()) for k, v in model.state_dict().items()]

    model = model.double()  # the reference in float64 over the float32 values
    model.train()
    logits, loss = model(x, y)
    loss.backward()
    named = list(model.named_parameters())  # the tied weight once, as PyTorch lists it
    grads = [(n, p.grad.clone()) for n, p in named]
    opt = torch.optim.AdamW(adamw_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    opt.step()
    after = [(n, p.detach().clone()) for n, p in named]

    tensors = [("model." + k, v.double()) for k, v in state]
    tensors += [("x", x), ("y", y), ("logits", logits), ("loss", loss)]
    tensors += [("grad." + n, g) for n, g in grads]
    tensors += [("after." + n, p) for n, p in after]
    meta = {"model.type": "gpt", "model.n_layer": c.n_layer, "model.n_head": c.n_head,
            "model.n_embd": c.n_embd, "model.block_size": c.block_size,
            "model.vocab_size": c.vocab_size, "model.dropout": c.dropout,
            "model.bias": "true" if c.bias else "false", "model.gelu": c.gelu,
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "torch_version": torch.__version__}
    save_safetensors(path, tensors, meta)
    print(f"{path}: loss {loss.item():.6f}, {meta['num_parameters']} parameters")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
    tiny = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=37, dropout=0.0)
    make(os.path.join(out, "gpt-tiny.safetensors"), 1337, bias=True, gelu="none", **tiny)
    make(os.path.join(out, "gpt-tiny-nobias-tanh.safetensors"), 42, bias=False, gelu="tanh",
         **tiny)


if __name__ == "__main__":
    main()
