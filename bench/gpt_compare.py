#!/usr/bin/env python3
"""weft-train against PyTorch on nanoGPT's CPU baby GPT, side by side and interleaved.

    bench/gpt_compare.py [--rounds R] [--iters N] [--warmup W] [--config INI]
                         [--build DIR] [--weft-set K=V ...] [--no-torch]

The model, batch and data are configs/gpt-char.ini's (4 layers, 4 heads, 128 wide, block
64, batch 12, byte-level text, AdamW lr 1e-3 betas 0.9/0.99 weight decay 0.1 on the
matrices only, clip_grad_norm_ 1.0, dropout 0). PyTorch runs nanoGPT's training loop on
a plain-PyTorch GPT written here from nanoGPT's model.py (PyTorch 1.13 has no
scaled_dot_product_attention, so the math attention path, as nanoGPT takes there).

Each round runs weft-train with 1 and 2 threads, then PyTorch with 1 and 2 threads, each
with and without OMP_WAIT_POLICY=PASSIVE, so a drift in the machine's speed lands on
both. Each run takes W + N optimizer steps and times the last N (the first W warm the
allocator caches and the thread pools): weft from its progress lines (one per W steps;
the first is dropped), PyTorch with a clock around its steps. Prints tokens/s and ms/step
per setting as median (min-max) over the rounds and the ratio of weft's best setting to
PyTorch's best. Run from the repository root after `make`, on a quiet machine; PyTorch
is Debian's python3-torch (/usr/bin/python3)."""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_SETTINGS = [("t1", 1, None), ("t1_passive", 1, "PASSIVE"), ("t2", 2, None),
                  ("t2_passive", 2, "PASSIVE")]
WEFT_SETTINGS = [("t1", 1), ("t2", 2)]

# configs/gpt-char.ini, which weft reads itself; the PyTorch side gets the same numbers.
GPT = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=256, dropout=0.0,
           bias=False)
BATCH = 12
TEXT = os.path.join(ROOT, "data/text/kjv-genesis-2kings.txt")


# ---- PyTorch: nanoGPT's model.py and train.py, reduced to what this model uses ----------

def torch_worker(iters, warmup, threads):
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.nn import functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(1337)

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
            self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
            self.attn_dropout = nn.Dropout(c["dropout"])
            self.resid_dropout = nn.Dropout(c["dropout"])
            self.n_head, self.n_embd = c["n_head"], c["n_embd"]
            t = c["block_size"]
            self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            # the math path (no flash attention in PyTorch 1.13)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
            self.dropout = nn.Dropout(c["dropout"])

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.ln_1 = LayerNorm(c["n_embd"], bias=c["bias"])
            self.attn = CausalSelfAttention(c)
            self.ln_2 = LayerNorm(c["n_embd"], bias=c["bias"])
            self.mlp = MLP(c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPTModel(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
                wpe=nn.Embedding(c["block_size"], c["n_embd"]),
                drop=nn.Dropout(c["dropout"]),
                h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
                ln_f=LayerNorm(c["n_embd"], bias=c["bias"])))
            self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c["n_layer"]))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas):
            params = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay = [p for p in params.values() if p.dim() >= 2]
            nodecay = [p for p in params.values() if p.dim() < 2]
            groups = [{"params": decay, "weight_decay": weight_decay},
                      {"params": nodecay, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    data = np.memmap(TEXT, dtype=np.uint8, mode="r")
    train_data = data[:int(len(data) * 0.9)]
    T = GPT["block_size"]

    def get_batch():
        ix = torch.randint(len(train_data) - T, (BATCH,))
        x = torch.stack([torch.from_numpy(train_data[i:i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(train_data[i + 1:i + 1 + T].astype(np.int64))
                         for i in ix])
        return x, y

    lr, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 100, 3000

    def get_lr(it):
        if it < warmup_iters:
            return lr * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    model = GPTModel(GPT)
    model.train()
    optimizer = model.configure_optimizers(0.1, lr, (0.9, 0.99))
    X, Y = get_batch()
    start = None
    for it in range(warmup + iters):
        if it == warmup:
            start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        _, loss = model(X, Y)
        X, Y = get_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
    seconds = time.perf_counter() - start
    print("ms_per_step %.4f tokens_per_s %.1f loss %.4f" %
          (1e3 * seconds / iters, iters * BATCH * T / seconds, loss.item()))


def torch_run(iters, warmup, threads, policy):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                          "--iters", str(iters), "--warmup", str(warmup),
                          "--threads", str(threads)],
                         env=env, check=True, capture_output=True, text=True).stdout
    fields = out.split()
    return float(fields[1]), float(fields[3])


# ---- weft ---------------------------------------------------------------------------------

STEP_LINE = re.compile(r"^step (\d+)/\d+ .* ([0-9.]+) ms/step")


def weft_run(build, config, iters, warmup, threads, extra, tmp):
    cmd = [os.path.join(ROOT, build, "apps/weft-train"), config,
           "--set", "train.max_iters=%d" % (warmup + iters),
           "--set", "train.log_interval=%d" % warmup,
           "--set", "train.eval_interval=0", "--set", "train.eval_iters=1",
           "--set", "train.checkpoint_interval=0",
           "--set", "train.checkpoint=" + os.path.join(tmp, "m.safetensors"),
           "--set", "train.log=" + os.path.join(tmp, "log.csv"),
           "--set", "cpu.threads=%d" % threads]
    for kv in extra:
        cmd += ["--set", kv]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    windows = []  # (steps, ms/step) of each progress line after the warm-up one
    last = 0
    for line in out.splitlines():
        m = STEP_LINE.match(line)
        if not m:
            continue
        step, ms = int(m.group(1)), float(m.group(2))
        if last >= warmup:
            windows.append((step - last, ms))
        last = step
    if not windows:
        raise SystemExit("weft-train printed no progress line after the warm-up:\n" + out)
    steps = sum(n for n, _ in windows)
    ms = sum(n * ms for n, ms in windows) / steps
    return ms, BATCH * GPT["block_size"] * 1e3 / ms


def summary(values, fmt):
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(values), min(values),
                                                   max(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50, help="timed optimizer steps per run")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--config", default="configs/gpt-char.ini")
    ap.add_argument("--build", default="build", help="the build folder holding apps/weft-train")
    ap.add_argument("--weft-set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args.iters, args.warmup, args.threads)
        return
    if args.iters % args.warmup:
        ap.error("--iters must be a multiple of --warmup (weft's progress lines come every "
                 "--warmup steps)")
    have_torch = not args.no_torch and subprocess.run(
        ["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0
    if not have_torch and not args.no_torch:
        print("# PyTorch not installed (apt-get install python3-torch): weft only")
    print("# %s: %d rounds, interleaved; %d timed steps after %d warm-up steps per run; "
          "batch %d x block %d = %d tokens/step" % (args.config, args.rounds, args.iters,
                                                   args.warmup, BATCH, GPT["block_size"],
                                                   BATCH * GPT["block_size"]))
    sys.stdout.flush()
    results = {}  # name -> [(ms/step, tokens/s)]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, threads in WEFT_SETTINGS:
                results.setdefault("weft_" + name, []).append(
                    weft_run(args.build, args.config, args.iters, args.warmup, threads, args.weft_set, tmp))
            if have_torch:
                for name, threads, policy in TORCH_SETTINGS:
                    results.setdefault("torch_" + name, []).append(
                        torch_run(args.iters, args.warmup, threads, policy))
            print("# round %d/%d done" % (r + 1, args.rounds), file=sys.stderr)
    print("%-17s %-32s %s" % ("setting", "tokens/s median (min-max)",
                              "ms/step median (min-max)"))
    for name, runs in results.items():
        print("%-17s %-32s %s" % (name, summary([t for _, t in runs], "%.0f"),
                                  summary([m for m, _ in runs], "%.2f")))
    med = {name: statistics.median(t for _, t in runs) for name, runs in results.items()}
    weft_best = max((n for n in med if n.startswith("weft_")), key=med.get)
    if have_torch:
        torch_best = max((n for n in med if n.startswith("torch_")), key=med.get)
        print("ratio %s / %s (medians of tokens/s): %.2fx" %
              (weft_best, torch_best, med[weft_best] / med[torch_best]))


if __name__ == "__main__":
    main()
