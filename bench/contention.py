#!/usr/bin/env python3
"""weft's speed when the machine is not its own: quiet, beside one busy process, and two
weft trainings at once; against PyTorch under the same competition. bench/contention.sh
runs it.

    bench/contention.py [--rounds R] [--workloads a,b,...] [--spin N,N,...] [--quick]
                        [--no-torch] [--competitor yes|python] [--build DIR]
                        [--torch-coretype TYPE]

Workloads: the shipped configs, shortened (mlp, cnn, cnn_bn, cnn_augment, adam_cosine,
resnet, spirals, lstm, gpt, sparse when data/sparse exists) and `generate`
(weft-generate on a GPT checkpoint trained here for a few steps); `--workloads all` runs
every one (default: mlp, cnn, resnet, lstm, gpt, generate). Each round runs, for
each workload, interleaved (so a drift of the machine lands on every setting):
    quiet        weft alone
    busy         weft beside one competitor (`yes > /dev/null`, or a busy Python loop),
                 started before and killed after
    pair         two weft runs of it started together (their throughputs summed)
    torch quiet / torch busy   PyTorch (bench/contention_torch.py) at 1 and 2 threads, with
                 and without OMP_WAIT_POLICY=PASSIVE: its best setting counts
and, with --spin, the weft settings again for each GOMP_SPINCOUNT given (the environment
wins over weft's default, docs/config.md [cpu] spin_count; `passive` stands for
OMP_WAIT_POLICY=PASSIVE, `libgomp` for libgomp's own default).

A weft run's throughput is the median of its epochs' samples/s after the first (in
iteration mode, of its progress lines after the first); its CPU time (user + system,
of the whole process) is printed per 1,000 samples too: spinning shows there first, and
it is less sensitive than wall time to what else runs on the machine.

Prints per workload and setting the median (min-max) over the rounds, then the ratios
against their targets: busy / quiet (>= 0.45), weft busy / PyTorch's best busy (> 1),
and pair / quiet (>= 0.80). Run from the repository root after `make`, on an otherwise quiet
machine: the quiet figures are only quiet there.
"""
import argparse
import csv
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (config, --set overrides, mode) -- shortened so a run takes seconds on 2 cores
WORKLOADS = {
    "mlp": ("configs/mnist-mlp.ini", ["train.epochs=4"], "epochs"),
    "cnn": ("configs/mnist-cnn.ini", ["train.epochs=3"], "epochs"),
    "cnn_bn": ("configs/mnist-cnn-bn.ini", ["train.epochs=3"], "epochs"),
    "cnn_augment": ("configs/mnist-cnn-augment.ini", ["train.epochs=3"], "epochs"),
    "adam_cosine": ("configs/mnist-adam-cosine.ini", ["train.epochs=3"], "epochs"),
    "resnet": ("configs/mnist-resnet.ini", ["train.epochs=2"], "epochs"),
    "spirals": ("configs/spirals-csv.ini", ["train.epochs=6"], "epochs"),
    "lstm": ("configs/lstm-char.ini", ["train.max_iters=120", "train.log_interval=20",
                                       "train.eval_interval=0", "train.eval_iters=1"], "iters"),
    "gpt": ("configs/gpt-char.ini", ["train.max_iters=60", "train.log_interval=10",
                                     "train.eval_interval=0", "train.eval_iters=1"], "iters"),
    "sparse": ("configs/sparse-logreg.ini", ["train.epochs=2"], "epochs"),
    "generate": (None, [], "generate"),
}
DEFAULT = "mlp,cnn,resnet,lstm,gpt,generate"
TORCH = {"mlp", "cnn", "resnet", "lstm", "gpt", "generate"}
TORCH_SETTINGS = [(1, None), (1, "PASSIVE"), (2, None), (2, "PASSIVE")]
STEP_LINE = re.compile(r"^step (\d+)/\d+ .*?([0-9.]+) (tok|img|samples)/s")
GEN_LINE = re.compile(r"\(([0-9.]+) tokens/s\)")


def spin_env(spin):
    """The environment for a weft run with GOMP_SPINCOUNT spin (None: weft's default)."""
    env = dict(os.environ)
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        env.pop(k, None)
    if spin == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif spin == "libgomp":
        env["GOMP_SPINCOUNT"] = "300000"  # libgomp's own default, what PyTorch runs with
    elif spin is not None:
        env["GOMP_SPINCOUNT"] = str(spin)
    return env


class Run:
    """One weft process started now; .result() waits and gives (samples/s, cpu s / 1k)."""

    def __init__(self, args, name, spin, tmp, tag):
        self.name, self.tmp, self.tag = name, tmp, tag
        config, sets, self.mode = WORKLOADS[name]
        build = os.path.join(ROOT, args.build)
        self.log = os.path.join(tmp, tag + ".csv")
        if self.mode == "generate":
            cmd = [os.path.join(build, "apps/weft-generate"), args.gpt_checkpoint,
                   "--max-new-tokens", str(args.gen_tokens), "--threads", "2"]
        else:
            if args.quick:  # a few logged steps of each, in iteration mode
                sets = [s.replace("max_iters=120", "max_iters=40")
                        .replace("max_iters=60", "max_iters=20") for s in sets]
                if self.mode == "epochs":
                    self.mode = "iters"
                    sets = [s for s in sets if not s.startswith("train.epochs=")] + [
                        "train.max_iters=30", "train.log_interval=10",
                        "train.eval_interval=0", "train.eval_iters=1"]
            cmd = [os.path.join(build, "apps/weft-train"), config,
                   "--set", "train.checkpoint=" + os.path.join(tmp, tag + ".safetensors"),
                   "--set", "train.log=" + self.log, "--set", "train.checkpoint_interval=0"]
            for s in sets:
                cmd += ["--set", s]
        # errors="replace": weft-generate samples arbitrary bytes
        self.out = open(os.path.join(tmp, tag + ".out"), "w+", errors="replace")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=spin_env(spin), stdout=self.out,
                                     stderr=subprocess.STDOUT)

    def result(self):
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = status
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        if status != 0:
            raise SystemExit("%s failed:\n%s" % (" ".join(self.proc.args), text))
        cpu = usage.ru_utime + usage.ru_stime
        if self.mode == "generate":
            m = GEN_LINE.search(text)
            rate = float(m.group(1))
            return rate, 1e3 * cpu / ARGS.gen_tokens
        if self.mode == "iters":
            rates = [float(m.group(2)) for m in map(STEP_LINE.match, text.splitlines()) if m]
        else:
            with open(self.log) as f:
                rows = list(csv.DictReader(f))
            key = next(k for k in rows[0] if k.endswith("_per_s"))  # images, tokens, ...
            rates = [float(r[key]) for r in rows]
        rates = rates[1:] if len(rates) > 1 else rates
        rate = statistics.median(rates)
        # CPU seconds per 1k samples, approximately: the process's CPU time over its wall
        # time (the cores it kept busy) divided by its throughput.
        wall = time.time() - self.t0
        return rate, 1e3 * cpu / (rate * wall) if rate > 0 else float("nan")


def start(args, name, spin, tmp, tag):
    r = Run(args, name, spin, tmp, tag)
    r.t0 = time.time()
    return r


class Competitor:
    """One busy process for the duration of a `with` block."""

    def __init__(self, kind):
        self.kind = kind

    def __enter__(self):
        if self.kind == "yes":
            self.p = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
        else:
            self.p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)  # on the cores before weft starts
        return self

    def __exit__(self, *exc):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()


def torch_run(args, name, threads, policy):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    if args.torch_coretype != "detected":
        env["OPENBLAS_CORETYPE"] = args.torch_coretype
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench/contention_torch.py"),
                          name, "--threads", str(threads),
                          "--seconds", "1" if args.quick else "3"],
                         env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[1])


def summary(values, fmt="%.0f"):
    if not values:
        return "-"
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(values), min(values),
                                                   max(values))


def train_gpt_checkpoint(args, tmp):
    """A GPT checkpoint for weft-generate: configs/gpt-char.ini after a few steps."""
    path = os.path.join(tmp, "gpt.safetensors")
    subprocess.run([os.path.join(ROOT, args.build, "apps/weft-train"), "configs/gpt-char.ini",
                    "--set", "train.max_iters=10", "--set", "train.eval_interval=0",
                    "--set", "train.eval_iters=1", "--set", "train.checkpoint=" + path,
                    "--set", "train.log=" + os.path.join(tmp, "gpt-log.csv")],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return path


ARGS = None


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workloads", default=DEFAULT,
                    help="comma-separated, of: " + ", ".join(WORKLOADS) + "; or all")
    ap.add_argument("--spin", default="",
                    help="also run weft with these GOMP_SPINCOUNT values (and/or passive, "
                         "libgomp), comma-separated")
    ap.add_argument("--no-default", action="store_true",
                    help="with --spin: only the --spin settings, not weft's default")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-pair", action="store_true")
    ap.add_argument("--competitor", choices=["yes", "python"], default="yes")
    ap.add_argument("--quick", action="store_true", help="short runs: checks the script")
    ap.add_argument("--build", default="build")
    ap.add_argument("--torch-coretype", default="detected",
                    help="OPENBLAS_CORETYPE for PyTorch (bench/torch_blas.py: its detected "
                         "one is not always its fastest)")
    ap.add_argument("--gen-tokens", type=int, default=400)
    args = ARGS = ap.parse_args()
    if args.quick:
        args.gen_tokens = min(args.gen_tokens, 100)
    names = [w for w in args.workloads.split(",") if w]
    if names == ["all"]:  # every shipped config, and weft-generate
        names = [w for w in WORKLOADS
                 if w != "sparse" or os.path.exists(os.path.join(ROOT, "data/sparse/train.svm"))]
    for w in names:
        if w not in WORKLOADS:
            raise SystemExit("unknown workload %s (expected one of %s)" % (w, ", ".join(WORKLOADS)))
    if "sparse" in names and not os.path.exists(os.path.join(ROOT, "data/sparse/train.svm")):
        raise SystemExit("workload sparse: run `make sparse-data` first")
    spins = ([] if args.no_default else [None]) + [
        s if s in ("passive", "libgomp") else int(s) for s in args.spin.split(",") if s]
    label = lambda s: "default" if s is None else ("spin=%s" % s)
    res = {}  # (workload, setting label, condition) -> [values]

    def add(key, v):
        res.setdefault(key, []).append(v)

    with tempfile.TemporaryDirectory(prefix="weft-contention.") as tmp:
        if "generate" in names:
            args.gpt_checkpoint = train_gpt_checkpoint(args, tmp)
        for rnd in range(args.rounds):
            for name in names:
                for s in spins:
                    tag = "%s-%s-%d" % (name, label(s), rnd)
                    rate, cpu = start(args, name, s, tmp, tag + "-q").result()
                    add((name, label(s), "quiet"), rate)
                    add((name, label(s), "quiet cpu"), cpu)
                    with Competitor(args.competitor):
                        rate, cpu = start(args, name, s, tmp, tag + "-b").result()
                    add((name, label(s), "busy"), rate)
                    add((name, label(s), "busy cpu"), cpu)
                    if not args.no_pair:
                        a = start(args, name, s, tmp, tag + "-p1")
                        b = start(args, name, s, tmp, tag + "-p2")
                        ra, _ = a.result()
                        rb, _ = b.result()
                        add((name, label(s), "pair"), ra + rb)
                if name in TORCH and not args.no_torch:
                    for threads, policy in TORCH_SETTINGS:
                        t = "torch t%d%s" % (threads, " passive" if policy else "")
                        add((name, t, "quiet"), torch_run(args, name, threads, policy))
                        with Competitor(args.competitor):
                            add((name, t, "busy"), torch_run(args, name, threads, policy))
            print("round %d/%d done" % (rnd + 1, args.rounds), file=sys.stderr, flush=True)

    print("samples/s: median (min-max) over %d rounds; cpu: CPU seconds per 1k samples "
          "(the process's CPU over its wall time, over its samples/s)" % args.rounds)
    print("%-12s %-18s %-22s %-22s %-22s %-14s %-14s" % ("workload", "setting", "quiet", "busy",
                                                         "pair", "quiet cpu", "busy cpu"))
    for name in names:
        settings = [label(s) for s in spins]
        if name in TORCH and not args.no_torch:
            settings += ["torch t%d%s" % (t, " passive" if p else "") for t, p in TORCH_SETTINGS]
        for st in settings:
            g = lambda c, fmt="%.0f": summary(res.get((name, st, c), []), fmt)
            print("%-12s %-18s %-22s %-22s %-22s %-14s %-14s" % (
                name, st, g("quiet"), g("busy"), g("pair"), g("quiet cpu", "%.2f"),
                g("busy cpu", "%.2f")))
    print()
    print("ratios of medians (targets: busy/quiet >= 0.45, weft busy / best torch busy > 1, "
          "pair/quiet >= 0.80)")
    med = lambda k: statistics.median(res[k]) if res.get(k) else float("nan")
    for name in names:
        best_torch = max([med((name, "torch t%d%s" % (t, " passive" if p else ""), "busy"))
                          for t, p in TORCH_SETTINGS] or [float("nan")]) \
            if name in TORCH and not args.no_torch else float("nan")
        for s in spins:
            st = label(s)
            q, b, p = med((name, st, "quiet")), med((name, st, "busy")), med((name, st, "pair"))
            print("%-12s %-18s busy/quiet %.2f  busy/torch %.2f  pair/quiet %.2f" % (
                name, st, b / q, b / best_torch, p / q))


if __name__ == "__main__":
    main()
