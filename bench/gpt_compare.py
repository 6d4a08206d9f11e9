#!/usr/bin/env python3
"""weft-train against PyTorch on nanoGPT's CPU baby GPT, side by side and interleaved.

    bench/gpt_compare.py [--rounds R] [--iters N] [--warmup W] [--config INI]
                         [--build DIR] [--weft-set K=V ...] [--no-torch]

The model, batch and data are configs/gpt-char.ini's (4 layers, 4 heads, 128 wide, block
64, batch 12, byte-level text, AdamW lr 1e-3 betas 0.9/0.99 weight decay 0.1 on the
matrices only, clip_grad_norm_ 1.0, dropout 0). PyTorch runs nanoGPT's training loop on
scripts/nanogpt_torch.py, nanoGPT's model.py in plain PyTorch (PyTorch 1.13 has no
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

from torch_blas import CORETYPES, fastest_coretype, with_coretype

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
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import nanogpt_torch  # scripts/nanogpt_torch.py: the model, shared with the fixtures

    torch.set_num_threads(threads)
    torch.manual_seed(1337)

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

    model = nanogpt_torch.GPT(nanogpt_torch.Config(**GPT))
    model.train()
    optimizer = torch.optim.AdamW(nanogpt_torch.adamw_groups(model, 0.1), lr=lr,
                                  betas=(0.9, 0.99))
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


def torch_run(iters, warmup, threads, policy, coretype="detected"):
    env = with_coretype(dict(os.environ), coretype)
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
    cmd = [os.path.join(ROOT, build, "apps/weft-train"), config, "--overwrite",
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
    ap.add_argument("--torch-coretypes", default=CORETYPES, metavar="NAME[,NAME...]",
                    help="OpenBLAS core types PyTorch may run with (bench/torch_blas.py)")
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
    coretype = "detected"
    if have_torch:
        coretype, line = fastest_coretype(
            lambda c: torch_run(args.warmup, args.warmup, 2, None, c)[1], args.torch_coretypes)
        print("# %s, tokens/s" % line)
        sys.stdout.flush()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, threads in WEFT_SETTINGS:
                results.setdefault("weft_" + name, []).append(
                    weft_run(args.build, args.config, args.iters, args.warmup, threads, args.weft_set, tmp))
            if have_torch:
                for name, threads, policy in TORCH_SETTINGS:
                    results.setdefault("torch_" + name, []).append(
                        torch_run(args.iters, args.warmup, threads, policy, coretype))
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
