#!/usr/bin/env python3
"""Where a GPT training step's time goes: the GEMMs against everything else, from a
`perf record` profile of weft-train, and the GEMMs' achieved GFLOP/s against weft-bench's
matmul 1024^3 (weft's, and OpenBLAS's and oneDNN's called directly) on the same machine.

    bench/gemm_share.py [--config INI] [--steps N] [--precision fp32|bf16] [--threads T]
                        [--set SECTION.KEY=VALUE ...] [--build DIR] [--keep DIR]

weft-train runs under `perf record -F 499` (software clock samples: no hardware counters
needed), with oneDNN's JIT code named for perf (DNNL_JIT_PROFILE=2 writes
/tmp/perf-PID.map), twice: 1 optimizer step, then 1 + N; the samples of the first run are
subtracted from the second's function by function, so what remains is N steady steps
(start-up, the model's initialisation, the first step and the final evaluation cancel).
Each sample is put in one class by the function it was in:
  gemm       oneDNN (its JIT kernels: gemm, brgemm, matmul copies; libdnnl), OpenBLAS
  attention  weft's attention outside its block products (att_* and, for bfloat16,
             att16_* in weft-cpu.so; the products themselves are oneDNN's, so gemm)
  omp-wait   libgomp: threads waiting at a barrier or for work
  other      everything else (elementwise, LayerNorm, softmax/loss, AdamW, copies,
             allocation, the kernel), listed by function
Shares are of the process's CPU time. The step's time is the median of weft-train's
progress lines after the first; the GEMM FLOPs of a step are counted from the config
(forward 2 x tokens x (12 x n_layer x n_embd^2 + vocab x n_embd), backward twice that),
and GEMM GFLOP/s = FLOPs / (gemm share x step time).

--torch profiles PyTorch 1.13 instead, running nanoGPT's loop on the same model, batch and
precision (bench/gpt_compare.py's worker: torch.autocast("cpu", bfloat16) for bf16), split
the same way (its GEMMs are oneDNN's and OpenBLAS's: Debian's PyTorch links the same
libdnnl as weft), so the two steps' GEMM and non-GEMM times can be set side by side.

Run from the repository root after `make`; the shares hold on a busy machine only
roughly (a descheduled thread shows as omp-wait on the other), the GFLOP/s not at all:
run it on a quiet one."""
import argparse
import configparser
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_LINE = re.compile(r"^step (\d+)/\d+ .* ([0-9.]+) ms/step")
REPORT_LINE = re.compile(r"^\s*[0-9.]+%\s+(\d+)\s+(\S+(?: tid \d+)?)\s+\[[.k]\]\s+(.*)$")


def gpt_numbers(config, sets):
    ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"),
                                    comment_prefixes=(";", "#"))
    with open(config) as f:
        ini.read_file(f)
    for kv in sets:
        key, _, value = kv.partition("=")
        section, _, name = key.rpartition(".")
        if not ini.has_section(section):
            ini.add_section(section)
        ini.set(section, name, value)
    g = lambda s, k, d: int(ini.get(s, k, fallback=str(d)))
    L, C, V = g("model", "n_layer", 12), g("model", "n_embd", 768), g("model", "vocab_size", 256)
    tokens = g("data", "batch_size", 1) * g("data", "block_size", 1) * g("train", "accumulate", 1)
    return dict(n_layer=L, n_embd=C, vocab=V, tokens=tokens,
                gemm_flops=6.0 * tokens * (12 * L * C * C + V * C))


def classify(dso, sym):
    if dso.startswith("[JIT]") or "dnnl" in dso or "openblas" in dso or "blas" in dso:
        return "gemm"
    if dso.startswith("libgomp"):
        return "omp-wait"
    if dso.startswith("weft-cpu") and sym.startswith(("att_", "att16_")):
        return "attention"
    return "other"


def matmul_reference(build, threads):
    out = subprocess.run([os.path.join(ROOT, build, "bench/weft-bench"), "--filter",
                          "1024x1024x1024", "--threads", str(threads)], cwd=ROOT,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/gpt2-small.ini")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--build", default="build")
    ap.add_argument("--keep", metavar="DIR", help="keep perf.data and the report here")
    ap.add_argument("--top", type=int, default=12, help="other functions listed")
    ap.add_argument("--torch", action="store_true",
                    help="profile PyTorch's nanoGPT loop on the same model instead")
    ap.add_argument("--torch-coretype", default="SkylakeX",
                    help="OPENBLAS_CORETYPE for PyTorch (bench/torch_blas.py)")
    args = ap.parse_args()
    nums = gpt_numbers(args.config, args.set)
    tmp = args.keep or tempfile.mkdtemp(prefix="gemm-share.")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, DNNL_JIT_PROFILE="2", ONEDNN_JIT_PROFILE="2")

    if args.torch:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import gpt_compare
        from torch_blas import with_coretype
        params = json.dumps(gpt_compare.load_params(args.config, args.set))
        with_coretype(env, args.torch_coretype)

    def command(name, steps):
        if args.torch:  # 1 warm-up step, then steps - 1 timed (at least 1)
            return ["/usr/bin/python3", os.path.join(ROOT, "bench/gpt_compare.py"),
                    "--torch-worker", params, "--warmup", "1", "--iters", str(max(steps - 1, 1)),
                    "--threads", str(args.threads), "--precision", args.precision,
                    "--val-batches", "0"]
        cmd = [os.path.join(ROOT, args.build, "apps/weft-train"), args.config]
        for kv in args.set:
            cmd += ["--set", kv]
        return cmd + ["--set", "train.max_iters=%d" % steps, "--set", "train.log_interval=1",
                      "--set", "train.eval_interval=0", "--set", "train.eval_iters=1",
                      "--set", "train.checkpoint_interval=0",
                      "--set", "train.checkpoint=" + os.path.join(tmp, name + ".safetensors"),
                      "--set", "train.log=" + os.path.join(tmp, name + ".csv"),
                      "--set", "train.precision=" + args.precision,
                      "--set", "cpu.threads=%d" % args.threads]

    def profile(name, steps):
        """Samples per (dso, function) of the program running `steps` steps; its stdout."""
        data = os.path.join(tmp, name + ".data")
        cmd = ["perf", "record", "-F", "499", "-o", data, "--"] + command(name, steps)
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            who = "PyTorch" if args.torch else "weft-train"
            raise SystemExit("perf record / %s failed:\n%s%s" % (who, run.stdout, run.stderr))
        report = subprocess.run(["perf", "report", "-i", data, "-n", "--no-children", "--sort",
                                 "dso,sym", "--stdio"], capture_output=True, text=True).stdout
        with open(os.path.join(tmp, name + ".txt"), "w") as f:
            f.write(report)
        samples = {}
        for line in report.splitlines():
            m = REPORT_LINE.match(line)
            if m:
                key = (re.sub(r" tid \d+$", "", m.group(2)), m.group(3).strip())
                samples[key] = samples.get(key, 0) + int(m.group(1))
        return samples, run.stdout

    # PyTorch: 1 warm-up + 1 timed step against 1 + (steps + 1): the difference is `steps`
    base, _ = profile("one-step", 2 if args.torch else 1)
    full, out = profile("steps", args.steps + 2 if args.torch else args.steps + 1)
    if args.torch:
        ms = [json.loads(out.strip().splitlines()[-1])["ms"]]
    else:
        ms = [float(m.group(2)) for m in map(STEP_LINE.match, out.splitlines()) if m][1:]
    classes, others = {}, {}
    for (dso, sym), n in full.items():
        n -= base.get((dso, sym), 0)
        c = classify(dso, sym)
        classes[c] = classes.get(c, 0.0) + n
        if c == "other":
            name = re.sub(r"\.(arch_x86_64_v\d|isra\.\d+|constprop\.\d+|part\.\d+)", "", sym)
            others[name] = others.get(name, 0.0) + n
    classes = {c: max(v, 0.0) for c, v in classes.items()}
    total = sum(classes.values()) or 1.0
    busy = total - classes.get("omp-wait", 0.0)
    print("# %s%s%s, %s, %d threads: %d tokens per step, %.1f GFLOP of GEMMs per step" % (
        "PyTorch (nanoGPT's loop): " if args.torch else "", args.config,
        "".join(" --set " + kv for kv in args.set), args.precision, args.threads,
        nums["tokens"], nums["gemm_flops"] / 1e9))
    step = statistics.median(ms) if ms else float("nan")
    print("step time (%s): %.1f ms" % (
        "mean of the %d timed steps" % (args.steps + 1) if args.torch else
        "median of %d progress lines after the first" % len(ms), step))
    print("%-10s %8s %14s" % ("class", "share", "share w/o wait"))
    for c in ("gemm", "attention", "other", "omp-wait"):
        v = classes.get(c, 0.0)
        print("%-10s %7.1f%% %13s" % (c, 100 * v / total,
                                       "-" if c == "omp-wait" else "%.1f%%" % (100 * v / busy)))
    gemm_s = classes.get("gemm", 0.0) / total * step / 1e3
    if gemm_s > 0:
        print("GEMM: %.1f GFLOP/s achieved (%.1f GFLOP in %.0f ms of the step)" % (
            nums["gemm_flops"] / 1e9 / gemm_s, nums["gemm_flops"] / 1e9, gemm_s * 1e3))
    print("largest 'other' functions (share of CPU time):")
    for name, v in sorted(others.items(), key=lambda kv: -kv[1])[:args.top]:
        print("  %6.2f%%  %s" % (100 * v / total, name))
    print("reference, weft-bench on this machine (name value unit):")
    for line in matmul_reference(args.build, args.threads):
        print("  " + line)
    if args.keep:
        print("# perf data and report: %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
