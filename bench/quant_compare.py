#!/usr/bin/env python3
"""int8 against float32, weft against PyTorch 1.13, interleaved: accuracy, file size and
inference throughput of the quantized MNIST MLP, CNN and CNN with BatchNorm (static) and
nanoGPT's baby GPT (dynamic).

    bench/quant_compare.py [--rounds R] [--passes P] [--model NAME ...] [--no-torch]
                           [--gpt-batches N]

Preparation (once): the float32 checkpoints are configs/*'s [train] checkpoints (runs/...;
trained here first when missing: `make train` makes the MLP's, `make train-gpt` the GPT's);
each is quantized with weft-train quantize (static per channel, static per tensor; dynamic
for the GPT), whose printout gives weft's accuracies and argmax agreement.

Rounds: for each model and batch (64 and 256 images; the GPT at its config's 12 x 64
tokens), weft-infer times the float32 and the int8 model in turns in one process, in each
setting (1 and 2 threads, with and without OMP_WAIT_POLICY=PASSIVE), then
bench/quant_torch.py does the same for PyTorch's float32 model and its own int8 model
(torch.ao's static quantization on the onednn engine, quantize_dynamic for the GPT), so a
drift of the machine lands on both. A run's figure is the median of P passes over the
evaluation set (the GPT's: its first --gpt-batches batches; its losses come from one
untimed pass over the whole set). Prints per model and batch the median (min-max) over the rounds of each
side's best setting, weft's int8 against its float32 and against PyTorch's int8. Run from
the repository root after `make`, on a quiet machine; PyTorch is Debian's python3-torch
(/usr/bin/python3)."""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "build/apps/weft-train")
INFER = os.path.join(ROOT, "build/bench/weft-infer")
MODELS = {  # name: (config, run directory, batches, torch model name)
    "mlp": ("configs/mnist-mlp.ini", "runs/mnist-mlp", (64, 256), "mlp"),
    "cnn": ("configs/mnist-cnn.ini", "runs/mnist-cnn", (64, 256), "cnn"),
    "cnn_bn": ("configs/mnist-cnn-bn.ini", "runs/mnist-cnn-bn", (64, 256), "cnn_bn"),
    "gpt": ("configs/gpt-char.ini", "runs/gpt-char", (12,), "gpt"),
}
SETTINGS = [("t1", 1, None), ("t1_passive", 1, "PASSIVE"), ("t2", 2, None),
            ("t2_passive", 2, "PASSIVE")]
LINE = re.compile(r"^(?:infer \S+|torch (\w+)) batch \d+: median (\d+) min \d+ max \d+ "
                  r"\w+/s accuracy (\S+) loss (\S+)")


def run(cmd, env=None):
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                          env=env).stdout


def env_for(policy):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    return env


def prepare(name):
    """The float32 checkpoint, its int8 forms and what quantize printed about each."""
    config, rundir, _, _ = MODELS[name]
    fp32 = os.path.join(rundir, "model.safetensors")
    if not os.path.exists(os.path.join(ROOT, fp32)):
        print("# %s: training %s first (no %s)" % (name, config, fp32))
        sys.stdout.flush()
        run([TRAIN, config])
    kinds = [("int8", ["--dynamic"])] if name == "gpt" else [("int8", []), ("int8_pt", ["--per-tensor"])]
    out = {"fp32": fp32}
    for kind, extra in kinds:
        path = os.path.join(rundir, "model.%s.safetensors" % kind.replace("_", "-"))
        text = run([TRAIN, "quantize", config, "--checkpoint", fp32, "--out", path] + extra)
        out[kind] = path
        out[kind + "_report"] = text
    return out


def report_figures(text):
    """(fp32 accuracy or loss, int8's, agreement, size ratio) from quantize's printout."""
    acc = re.findall(r"^  (fp32|int8)\s+loss (\S+)(?:\s+accuracy (\S+)%)?", text, re.M)
    agree = re.search(r"argmax agreement (\S+)%", text)
    size = re.search(r"([0-9.]+)x the float32 file", text)
    figs = {k: (float(loss), float(a) if a else None) for k, loss, a in acc}
    return figs, float(agree.group(1)), float(size.group(1))


def weft_round(name, ckpts, batch, passes, setting, max_batches=0):
    config = MODELS[name][0]
    _, threads, policy = setting
    out = run([INFER, config, ckpts["fp32"], ckpts["int8"], "--batch", str(batch), "--passes",
               str(passes), "--max-batches", str(max_batches), "--set", "cpu.threads=%d" % threads],
              env_for(policy))
    rows = [LINE.match(line) for line in out.splitlines() if line.startswith("infer ")]
    return float(rows[0].group(2)), float(rows[1].group(2))


def torch_round(name, ckpts, batch, passes, setting, max_batches=0):
    _, threads, policy = setting
    out = run(["/usr/bin/python3", os.path.join(ROOT, "bench/quant_torch.py"), "--model",
               MODELS[name][3], "--checkpoint", ckpts["fp32"], "--batch", str(batch),
               "--passes", str(passes), "--threads", str(threads), "--max-batches",
               str(max_batches)], env_for(policy))
    rows = {m.group(1): m for m in (LINE.match(line) for line in out.splitlines()) if m}
    return (float(rows["fp32"].group(2)), float(rows["int8"].group(2)),
            rows["fp32"].group(3), rows["int8"].group(3), rows["fp32"].group(4),
            rows["int8"].group(4))


def spread(values):
    return "%8.0f (%.0f-%.0f)" % (statistics.median(values), min(values), max(values))


def best(runs):
    """The setting whose median is highest, and its figures."""
    name = max(runs, key=lambda s: statistics.median(runs[s]))
    return name, runs[name]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--model", action="append", choices=list(MODELS))
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--gpt-batches", type=int, default=40,
                    help="the GPT's timed passes cover the first N batches of its validation "
                         "windows (0: all; its 270 batches take PyTorch's dynamic int8 about a "
                         "minute a pass); the losses are the whole set's")
    args = ap.parse_args()
    have_torch = not args.no_torch and subprocess.run(
        ["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0
    models = args.model or list(MODELS)
    print("# %d rounds, each a median of %d passes over the evaluation set; per side the best "
          "of 1/2 threads x OMP_WAIT_POLICY default/PASSIVE" % (args.rounds, args.passes))
    accuracy_rows, speed_rows = [], []
    for name in models:
        ckpts = prepare(name)
        figs, agree, size = report_figures(ckpts["int8_report"])
        pt = report_figures(ckpts["int8_pt_report"])[0]["int8"] if "int8_pt_report" in ckpts else None
        torch_acc = None
        for batch in MODELS[name][2]:
            weft = {s[0]: ([], []) for s in SETTINGS}
            torch = {s[0]: ([], []) for s in SETTINGS}
            limit = args.gpt_batches if name == "gpt" else 0
            for _ in range(args.rounds):
                for s in SETTINGS:
                    f, i = weft_round(name, ckpts, batch, args.passes, s, limit)
                    weft[s[0]][0].append(f)
                    weft[s[0]][1].append(i)
                    if have_torch:
                        r = torch_round(name, ckpts, batch, args.passes, s, limit)
                        torch[s[0]][0].append(r[0])
                        torch[s[0]][1].append(r[1])
                        torch_acc = r[2:]
            if have_torch and limit:  # the losses over the whole set, one untimed run
                torch_acc = torch_round(name, ckpts, batch, 1, SETTINGS[2])[2:]
            wf = best({k: v[0] for k, v in weft.items()})
            wi = best({k: v[1] for k, v in weft.items()})
            row = "%-7s b%-4d weft fp32 %s [%s]  int8 %s [%s]  int8/fp32 %.2fx" % (
                name, batch, spread(wf[1]), wf[0], spread(wi[1]), wi[0],
                statistics.median(wi[1]) / statistics.median(wf[1]))
            if have_torch:
                tf = best({k: v[0] for k, v in torch.items()})
                ti = best({k: v[1] for k, v in torch.items()})
                row += "\n              torch fp32 %s [%s]  int8 %s [%s]  weft int8 / torch int8 %.2fx" % (
                    spread(tf[1]), tf[0], spread(ti[1]), ti[0],
                    statistics.median(wi[1]) / statistics.median(ti[1]))
            speed_rows.append(row)
            print(row)
            sys.stdout.flush()
        unit = "val loss" if name == "gpt" else "accuracy %"
        pick = (lambda f: "%.4f" % f[0]) if name == "gpt" else (lambda f: "%.2f" % f[1])
        line = "%-7s %-10s weft fp32 %s  int8 %s" % (name, unit, pick(figs["fp32"]), pick(figs["int8"]))
        if pt:
            line += "  int8 per-tensor %s" % pick(pt)
        line += "  argmax agreement %.2f%%  file %.2fx" % (agree, size)
        if torch_acc:
            if name == "gpt":
                line += "  | torch fp32 %s  int8 %s" % (torch_acc[2], torch_acc[3])
            else:
                line += "  | torch fp32 %.2f  int8 %.2f" % (100 * float(torch_acc[0]),
                                                          100 * float(torch_acc[1]))
        accuracy_rows.append(line)
    print("\n# accuracy on MNIST's 2,000 test images (GPT: loss on the validation windows)")
    for line in accuracy_rows:
        print(line)
    print("\n# images/s (GPT: tokens/s) of inference, median (min-max) over the rounds")
    for row in speed_rows:
        print(row)


main()
