#!/usr/bin/env python3
"""weft-train against PyTorch, side by side and interleaved, on the same models and data.

    bench/train_compare.py [--rounds R] [--epochs E] [--model NAME ...] [--weft-set K=V ...]
                           [--variant NAME:K=V[,K=V...] ...] [--bf16] [--weft PATH]
                           [--base PATH]

For each model (the MLP 784-256-128-10 at batch 64 and 256, the CNN of
configs/mnist-cnn.ini at batch 64; SGD lr 0.05 momentum 0.9), each round runs weft-train
once and then PyTorch in each of its settings here (1 and 2 threads, with and without
OMP_WAIT_POLICY=PASSIVE), so a drift in the machine's speed lands on both. A run's figure
is its best epoch's images/s. --variant adds a weft-train run with those --set
overrides to every round (e.g. active:cpu.wait_policy=active), beside the default one. Prints, per model, the median, min and max over the rounds
for weft and for every PyTorch setting, and the ratio of weft's median to the best
PyTorch setting's median. --bf16 adds weft with [train] precision = bf16 and PyTorch
under bf16 autocast (1 and 2 threads), and sets the bf16 runs against each other.
weft runs with the config's own settings (its [data] workers included) unless --weft-set
or --variant says otherwise; PyTorch indexes the decoded set in its training thread.
--weft names another weft-train binary (default build/apps/weft-train); --base a second
one (another commit's build), run with the same settings right after it in every round and
set against it run by run (the paired ratio weft/base: median, min, max), so a before/after
comparison of two commits shares the machine's drift. Run from the repository root after
`make`, with nothing else running; PyTorch is Debian's python3-torch (/usr/bin/python3).

Before its rounds each model finds PyTorch's fastest OpenBLAS core type (bench/torch_blas.py):
one epoch at 2 threads under each of --torch-coretypes, and every PyTorch run of that
model uses the fastest."""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

from torch_blas import CORETYPES, fastest_coretype, with_coretype

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"mlp_b64": ("configs/mnist-mlp.ini", 64), "mlp_b256": ("configs/mnist-mlp.ini", 256),
          "cnn_b64": ("configs/mnist-cnn.ini", 64)}
TORCH_SETTINGS = [("t1", 1, None), ("t1_passive", 1, "PASSIVE"), ("t2", 2, None),
                  ("t2_passive", 2, "PASSIVE")]


WEFT_TRAIN = os.path.join(ROOT, "build/apps/weft-train")


def weft_run(model, epochs, extra, tmp, binary=None):
    config, batch = MODELS[model]
    # a folder of its own per run: no --overwrite, which a --base build from before
    # issue 36 does not know
    run_dir = tempfile.mkdtemp(dir=tmp)
    log = os.path.join(run_dir, "log.csv")
    cmd = [binary or WEFT_TRAIN, config,
           "--set", "train.epochs=%d" % epochs, "--set", "data.batch_size=%d" % batch,
           "--set", "train.checkpoint=" + os.path.join(run_dir, "m.safetensors"),
           "--set", "train.log=" + log]
    for kv in extra:
        cmd += ["--set", kv]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(log) as f:
        return max(float(r["images_per_s"]) for r in csv.DictReader(f))


def torch_run(model, epochs, threads, policy, bf16=False, coretype="detected"):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    with_coretype(env, coretype)
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench/torch_train.py"),
                          "--epochs", str(epochs), "--threads", str(threads), "--model", model]
                         + (["--bf16"] if bf16 else []),
                         env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[1])


def summary(values):
    return "median %8.0f  min %8.0f  max %8.0f" % (statistics.median(values), min(values),
                                                   max(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--model", action="append", choices=list(MODELS))
    ap.add_argument("--weft-set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:K=V[,K=V...]")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--weft", default=None, metavar="PATH")
    ap.add_argument("--base", default=None, metavar="PATH",
                    help="a second weft-train (another commit's build) run each round "
                         "right after weft's, reported as weft_base with the paired ratio")
    ap.add_argument("--torch-coretypes", default=CORETYPES,
                    metavar="NAME[,NAME...]", help="OpenBLAS core types PyTorch may run with")
    args = ap.parse_args()
    global WEFT_TRAIN
    WEFT_TRAIN = os.path.abspath(args.weft) if args.weft else WEFT_TRAIN
    settings = [(n, t, p, False) for n, t, p in TORCH_SETTINGS]
    if args.bf16:
        settings += [("t1_bf16", 1, None, True), ("t2_bf16", 2, None, True)]
    models = args.model or list(MODELS)
    variants = [("default", [])]
    for v in args.variant:
        name, _, sets = v.partition(":")
        if not name or not sets:
            ap.error("--variant %r: expected NAME:SECTION.KEY=VALUE[,...]" % v)
        variants.append((name, sets.split(",")))
    if args.bf16:
        variants.append(("bf16", ["train.precision=bf16"]))
    base = os.path.abspath(args.base) if args.base else None
    have_torch = not args.no_torch and subprocess.run(
        ["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0
    if not have_torch and not args.no_torch:
        print("# PyTorch not installed (apt-get install python3-torch): weft only")
    print("# %d rounds of %d epochs, interleaved; images/s of each run's best epoch" %
          (args.rounds, args.epochs))
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            weft = {name: [] for name, _ in variants}
            torch = {name: [] for name, _, _, _ in settings}
            coretype = "detected"
            if have_torch:
                coretype, line = fastest_coretype(lambda c: torch_run(model, 1, 2, None, False, c),
                                                  args.torch_coretypes)
                print("# %s: %s, images/s" % (model, line))
            based = []
            for _ in range(args.rounds):
                for name, sets in variants:
                    weft[name].append(weft_run(model, args.epochs, args.weft_set + sets, tmp))
                if base:
                    based.append(weft_run(model, args.epochs, args.weft_set, tmp, base))
                if have_torch:
                    for name, threads, policy, bf16 in settings:
                        torch[name].append(torch_run(model, args.epochs, threads, policy, bf16,
                                                     coretype))
            for name, values in weft.items():
                print("%s weft_%-11s %s" % (model, name, summary(values)))
            if based:
                print("%s weft_%-11s %s" % (model, "base", summary(based)))
                ratios = [w / b for w, b in zip(weft["default"], based)]
                print("%s ratio weft/base paired: %s" % (model, "median %.3f  min %.3f  max %.3f"
                      % (statistics.median(ratios), min(ratios), max(ratios))))
            if not have_torch:
                continue
            for name, values in torch.items():
                print("%s torch_%-10s %s" % (model, name, summary(values)))
            for name, values in weft.items():
                # bf16 against PyTorch's bf16 settings, everything else against fp32's
                pool = [n for n in torch if n.endswith("_bf16") == (name == "bf16")] or list(torch)
                best = max(pool, key=lambda n: statistics.median(torch[n]))
                print("%s ratio weft_%s %.2fx (median / torch_%s median)" %
                      (model, name, statistics.median(values) / statistics.median(torch[best]),
                       best))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
