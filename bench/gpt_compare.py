#!/usr/bin/env python3
"""weft-train against PyTorch (nanoGPT's model and training loop) on a GPT config, side by
side and interleaved.

    bench/gpt_compare.py [--rounds R] [--iters N] [--warmup W] [--config INI]
                         [--set SECTION.KEY=VALUE ...] [--precision fp32[,bf16]]
                         [--val-batches K] [--weft-threads 1,2] [--torch-settings ...]
                         [--build DIR] [--weft-set K=V ...] [--no-torch]

Both sides read the model, batch, optimizer and schedule from the same INI file (default
configs/gpt-char.ini, nanoGPT's CPU baby GPT) after the --set overrides: [model] n_layer,
n_head, n_embd, block_size, vocab_size, dropout, bias, gelu; [data] batch_size and the
text file; [train] accumulate (nanoGPT's gradient_accumulation_steps: the loss divided by
it, a step every that many micro-batches) and grad_clip; [optimizer] lr, betas,
weight_decay (AdamW with nanoGPT's two groups: decay on the matrices only); [scheduler]
warmup_cosine's keys. PyTorch runs nanoGPT's training loop on scripts/nanogpt_torch.py,
nanoGPT's model.py in plain PyTorch (PyTorch 1.13 has no scaled_dot_product_attention, so
the math attention path, as nanoGPT takes there). --set changes both sides; --weft-set
only weft-train's command line (a [cpu] or [runtime] key, say).

--precision bf16 runs weft-train with [train] precision = bf16 and PyTorch's forward and
loss under torch.autocast("cpu", dtype=torch.bfloat16); "fp32,bf16" interleaves both.

Each round runs every setting once: weft-train with each --weft-threads count, then
PyTorch with each --torch-settings entry (t1, t2: threads; _passive: with
OMP_WAIT_POLICY=PASSIVE), for each precision, so a drift in the machine's speed lands on
all of them. Each run takes W + N optimizer steps and times the last N (the first W warm
the allocator caches and the thread pools): weft from its progress lines (one per W
steps; the first is dropped), PyTorch with a clock around its steps. Each run also
reports its process's peak resident memory (getrusage's ru_maxrss: the high-water mark,
exact whatever else the machine runs) and, for weft, its allocator's peak of bytes handed
to tensors (PyTorch 1.13 keeps no such count on the CPU). With --val-batches K, both
evaluate the loss on the first K batches of non-overlapping windows of the validation
split (the last 10% of the text, as weft's [data.val]) after their W + N steps.

Prints per setting tokens/s, ms/step, peak RSS (MiB), weft's peak allocated (MiB) and the
validation loss as median (min-max) over the rounds, then weft's best setting against
PyTorch's best: tokens/s and peak RSS ratios. Run from the repository root after `make`,
on a quiet machine; PyTorch is Debian's python3-torch (/usr/bin/python3)."""
import argparse
import configparser
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from torch_blas import CORETYPES, fastest_coretype, with_coretype

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_SETTINGS = {"t1": (1, None), "t1_passive": (1, "PASSIVE"), "t2": (2, None),
                  "t2_passive": (2, "PASSIVE")}


# ---- the run's parameters, from the INI file both sides read ------------------------------

def load_params(config, overrides):
    """The numbers of `config` (an INI path) after overrides ["section.key=value", ...]."""
    ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"),
                                    comment_prefixes=(";", "#"))
    with open(config) as f:
        ini.read_file(f)
    for kv in overrides:
        key, _, value = kv.partition("=")
        section, _, name = key.rpartition(".")
        if not ini.has_section(section):
            ini.add_section(section)
        ini.set(section, name, value)

    def get(section, key, default, kind=str):
        return kind(ini.get(section, key, fallback=default))

    def flag(section, key, default):
        return get(section, key, str(default)).strip().lower() in ("1", "true", "yes", "on")

    path = get("data", "path", None)
    betas = [float(b) for b in get("optimizer", "betas", "0.9, 0.999").split(",")]
    return dict(
        model=dict(n_layer=get("model", "n_layer", 12, int), n_head=get("model", "n_head", 12, int),
                   n_embd=get("model", "n_embd", 768, int),
                   block_size=get("model", "block_size", 1024, int),
                   vocab_size=get("model", "vocab_size", 50304, int),
                   dropout=get("model", "dropout", 0.0, float), bias=flag("model", "bias", True),
                   gelu=get("model", "gelu", "none").strip()),
        text=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(config)), path)),
        batch=get("data", "batch_size", 1, int), block=get("data", "block_size", 1, int),
        accumulate=get("train", "accumulate", 1, int),
        grad_clip=get("train", "grad_clip", 0.0, float),
        lr=get("optimizer", "lr", 1e-3, float), betas=betas,
        weight_decay=get("optimizer", "weight_decay", 0.01, float),
        warmup_iters=get("scheduler", "warmup_iters", 0, int),
        lr_decay_iters=get("scheduler", "lr_decay_iters", 1, int),
        min_lr=get("scheduler", "min_lr", 0.0, float))


def tokens_per_step(p):
    return p["batch"] * p["block"] * p["accumulate"]


# ---- PyTorch: nanoGPT's model.py and train.py, reduced to what this model uses ----------

def torch_worker(p, iters, warmup, threads, precision, val_batches):
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import nanogpt_torch  # scripts/nanogpt_torch.py: the model, shared with the fixtures

    torch.set_num_threads(threads)
    torch.manual_seed(1337)
    bf16 = precision == "bf16"

    data = np.memmap(p["text"], dtype=np.uint8, mode="r")
    cut = int(len(data) * 0.9)
    train_data = data[:cut]
    B, T = p["batch"], p["block"]

    def get_batch():
        ix = torch.randint(len(train_data) - T, (B,))
        x = torch.stack([torch.from_numpy(train_data[i:i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(train_data[i + 1:i + 1 + T].astype(np.int64))
                         for i in ix])
        return x, y

    lr, min_lr = p["lr"], p["min_lr"]
    warmup_iters, lr_decay_iters = p["warmup_iters"], p["lr_decay_iters"]

    def get_lr(it):
        if it < warmup_iters:
            return lr * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    model = nanogpt_torch.GPT(nanogpt_torch.Config(**p["model"]))
    model.train()
    optimizer = torch.optim.AdamW(nanogpt_torch.adamw_groups(model, p["weight_decay"]), lr=lr,
                                  betas=tuple(p["betas"]))
    accumulate = p["accumulate"]
    X, Y = get_batch()
    start = None
    for it in range(warmup + iters):
        if it == warmup:
            start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        for _ in range(accumulate):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                _, loss = model(X, Y)
                loss = loss / accumulate
            X, Y = get_batch()
            loss.backward()
        if p["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), p["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
    seconds = time.perf_counter() - start
    val = float("nan")
    if val_batches > 0:  # weft's [data.val]: non-overlapping windows from the cut
        model.eval()
        losses = []
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for b in range(val_batches):
                starts = [cut + (b * B + i) * T for i in range(B)]
                x = torch.stack([torch.from_numpy(data[s:s + T].astype(np.int64))
                                 for s in starts])
                y = torch.stack([torch.from_numpy(data[s + 1:s + 1 + T].astype(np.int64))
                                 for s in starts])
                losses.append(model(x, y)[1].float().item())
        val = sum(losses) / len(losses)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(dict(ms=1e3 * seconds / iters, tps=iters * tokens_per_step(p) / seconds,
                          rss=rss, alloc=None, val=val)))


def torch_run(p, iters, warmup, threads, policy, precision, val_batches, coretype="detected"):
    env = with_coretype(dict(os.environ), coretype)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                          json.dumps(p), "--iters", str(iters), "--warmup", str(warmup),
                          "--threads", str(threads), "--precision", precision,
                          "--val-batches", str(val_batches)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---- weft ---------------------------------------------------------------------------------

STEP_LINE = re.compile(r"^step (\d+)/\d+ .* ([0-9.]+) ms/step")
VAL_LINE = re.compile(r"^step \d+: train loss \S+, val loss ([0-9.naif]+)")
MEMORY_LINE = re.compile(r"^memory: peak allocated ([0-9.]+) MiB.* peak resident ([0-9.]+) MiB")


def weft_run(args, p, threads, precision, tmp):
    cmd = [os.path.join(ROOT, args.build, "apps/weft-train"), args.config, "--overwrite"]
    for kv in args.set:
        cmd += ["--set", kv]
    cmd += ["--set", "train.max_iters=%d" % (args.warmup + args.iters),
            "--set", "train.log_interval=%d" % args.warmup,
            "--set", "train.eval_interval=0",
            "--set", "train.eval_iters=%d" % max(args.val_batches, 1),
            "--set", "train.checkpoint_interval=0",
            "--set", "train.checkpoint=" + os.path.join(tmp, "m.safetensors"),
            "--set", "train.log=" + os.path.join(tmp, "log.csv"),
            "--set", "train.precision=" + precision,
            "--set", "cpu.threads=%d" % threads]
    for kv in args.weft_set:
        cmd += ["--set", kv]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    windows = []  # (steps, ms/step) of each progress line after the warm-up one
    last = 0
    val, rss, alloc = float("nan"), None, None
    for line in out.splitlines():
        m = STEP_LINE.match(line)
        if m:
            step, ms = int(m.group(1)), float(m.group(2))
            if last >= args.warmup:
                windows.append((step - last, ms))
            last = step
        m = VAL_LINE.match(line)
        if m and args.val_batches > 0:
            val = float(m.group(1))
        m = MEMORY_LINE.match(line)
        if m:
            alloc, rss = float(m.group(1)), float(m.group(2))
    if not windows:
        raise SystemExit("weft-train printed no progress line after the warm-up:\n" + out)
    steps = sum(n for n, _ in windows)
    ms = sum(n * ms for n, ms in windows) / steps
    return dict(ms=ms, tps=tokens_per_step(p) * 1e3 / ms, rss=rss, alloc=alloc, val=val)


def summary(values, fmt):
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "-"
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(values), min(values),
                                                   max(values))


def median_of(runs, key):
    values = [r[key] for r in runs if r[key] is not None and not math.isnan(r[key])]
    return statistics.median(values) if values else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50, help="timed optimizer steps per run")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--config", default="configs/gpt-char.ini")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a config override for both sides")
    ap.add_argument("--precision", default="fp32", help="fp32, bf16 or fp32,bf16 (interleaved)")
    ap.add_argument("--val-batches", type=int, default=0,
                    help="validation loss over this many batches after the run (0: none)")
    ap.add_argument("--weft-threads", default="1,2")
    ap.add_argument("--torch-settings", default="t1,t1_passive,t2,t2_passive")
    ap.add_argument("--build", default="build", help="the build folder holding apps/weft-train")
    ap.add_argument("--weft-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a weft-train override only")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-coretypes", default=CORETYPES, metavar="NAME[,NAME...]",
                    help="OpenBLAS core types PyTorch may run with (bench/torch_blas.py); "
                         "one name: no calibration")
    ap.add_argument("--calibrate-only", action="store_true",
                    help="print PyTorch's fastest OpenBLAS core type on this config and stop")
    ap.add_argument("--label", default="", help="the name of this run in --summary-json")
    ap.add_argument("--summary-json", metavar="FILE",
                    help="append one JSON line per precision: the best settings' medians")
    ap.add_argument("--torch-worker", metavar="PARAMS", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(json.loads(args.torch_worker), args.iters, args.warmup, args.threads,
                     args.precision, args.val_batches)
        return
    if args.iters % args.warmup:
        ap.error("--iters must be a multiple of --warmup (weft's progress lines come every "
                 "--warmup steps)")
    precisions = args.precision.split(",")
    for prec in precisions:
        if prec not in ("fp32", "bf16"):
            ap.error("--precision: expected fp32, bf16 or both, got %r" % prec)
    torch_settings = [s for s in args.torch_settings.split(",") if s]
    for s in torch_settings:
        if s not in TORCH_SETTINGS:
            ap.error("--torch-settings: expected some of %s, got %r" %
                     (",".join(TORCH_SETTINGS), s))
    weft_threads = [int(n) for n in args.weft_threads.split(",") if n]
    p = load_params(args.config, args.set)
    have_torch = not args.no_torch and subprocess.run(
        ["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0
    if not have_torch and not args.no_torch:
        print("# PyTorch not installed (apt-get install python3-torch): weft only")
    m = p["model"]
    print("# %s%s: %d layers x %d heads x %d wide, block %d, vocabulary %d; %d rounds, "
          "interleaved; %d timed steps after %d warm-up steps per run; batch %d x block %d"
          " x accumulate %d = %d tokens/step" %
          (args.config, "".join(" --set " + kv for kv in args.set), m["n_layer"], m["n_head"],
           m["n_embd"], m["block_size"], m["vocab_size"], args.rounds, args.iters, args.warmup,
           p["batch"], p["block"], p["accumulate"], tokens_per_step(p)))
    sys.stdout.flush()
    results = {}  # name -> [run dicts]
    coretype = "detected"
    if args.calibrate_only and not (have_torch and torch_settings):
        ap.error("--calibrate-only needs PyTorch and a --torch-settings entry")
    if have_torch and torch_settings:
        candidates = args.torch_coretypes.split(",")
        if len(candidates) == 1:
            coretype = candidates[0]
        else:
            coretype, line = fastest_coretype(
                lambda c: torch_run(p, args.warmup, args.warmup, 2, None, precisions[0], 0, c)["tps"],
                args.torch_coretypes)
            print("# %s, tokens/s" % line)
    print("# pytorch_coretype %s" % coretype)
    sys.stdout.flush()
    if args.calibrate_only:
        return
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for prec in precisions:
                tag = "" if precisions == ["fp32"] else "_" + prec
                for threads in weft_threads:
                    results.setdefault("weft_t%d%s" % (threads, tag), []).append(
                        weft_run(args, p, threads, prec, tmp))
                if have_torch:
                    for name in torch_settings:
                        threads, policy = TORCH_SETTINGS[name]
                        results.setdefault("torch_%s%s" % (name, tag), []).append(
                            torch_run(p, args.iters, args.warmup, threads, policy, prec,
                                      args.val_batches, coretype))
            print("# round %d/%d done" % (r + 1, args.rounds), file=sys.stderr)
    print("%-22s %-24s %-28s %-24s %-24s %s" % (
        "setting", "tokens/s med (min-max)", "ms/step med (min-max)", "peak RSS MiB",
        "peak allocated MiB", "val loss"))
    for name, runs in results.items():
        print("%-22s %-24s %-28s %-24s %-24s %s" % (
            name, summary([r["tps"] for r in runs], "%.0f"),
            summary([r["ms"] for r in runs], "%.1f"), summary([r["rss"] for r in runs], "%.0f"),
            summary([r["alloc"] for r in runs], "%.0f"),
            summary([r["val"] for r in runs], "%.4f")))
    for prec in precisions:
        tag = "" if precisions == ["fp32"] else "_" + prec
        names = [n for n in results if n.endswith(tag)] if tag else list(results)
        med = {n: median_of(results[n], "tps") for n in names}
        weft = [n for n in names if n.startswith("weft_")]
        torch = [n for n in names if n.startswith("torch_")]
        if not weft or not torch:
            continue
        wb, tb = max(weft, key=med.get), max(torch, key=med.get)
        print("ratio %s / %s: tokens/s %.2fx, peak RSS %.2fx" % (
            wb, tb, med[wb] / med[tb],
            median_of(results[wb], "rss") / median_of(results[tb], "rss")))
        if args.summary_json:
            row = dict(label=args.label, precision=prec, tokens_per_step=tokens_per_step(p),
                       weft=wb, torch=tb)
            for side, name in (("weft", wb), ("torch", tb)):
                for key in ("tps", "ms", "rss", "alloc", "val"):
                    row["%s_%s" % (side, key)] = median_of(results[name], key)
            with open(args.summary_json, "a") as f:
                f.write(json.dumps(row) + "\n")
    if len(precisions) == 2:  # bf16 against fp32 on each side
        for side in ("weft", "torch"):
            med = {n: median_of(runs, "tps") for n, runs in results.items()
                   if n.startswith(side + "_")}
            best = {prec: max((n for n in med if n.endswith("_" + prec)), key=med.get, default=None)
                    for prec in precisions}
            if best["fp32"] and best["bf16"]:
                print("ratio %s / %s: tokens/s %.2fx, val loss %+.4f" % (
                    best["bf16"], best["fp32"], med[best["bf16"]] / med[best["fp32"]],
                    median_of(results[best["bf16"]], "val") -
                    median_of(results[best["fp32"]], "val")))


if __name__ == "__main__":
    main()
