#!/usr/bin/env python3
"""Where a GPT training step's instructions go, counted (not timed) under callgrind, so two
builds compare on a busy machine: the GEMMs, flash attention (its block products on the
BLAS and the rest of it) and everything else, listed by function.

    bench/step_instructions.py [--config INI] [--set SECTION.KEY=VALUE ...] [--build DIR]
                               [--steps N] [--top K] [--keep DIR]

weft-train runs on one thread under `valgrind --tool=callgrind` twice, for 1 and 1 + N
optimizer steps; the counts of the first run are subtracted function by function, so what
remains is N steady steps (start-up, initialisation, the first step and the evaluation
cancel). Classes of the self counts (instructions executed in a function itself):
  gemm       oneDNN (libdnnl and its JIT code, which valgrind shows without an object)
             and OpenBLAS; split into the attention's block products (the calls made by
             cpu_gemm_tile, which only the attention kernels use) and the rest (matmul,
             linear)
  attention  flash attention's own work: what att_forward_* and att_backward_* execute,
             their callees included, less the BLAS calls
  other      everything else, by function
Valgrind has no AVX-512: oneDNN and weft's own clones run their AVX2 code. Instruction
counts are not times (a 16-lane FMA counts one); compare them between builds, and read
the time shares from bench/gemm-share.sh (perf) on a quiet machine. A GPT-2-small-shaped
default: 2 layers, 1 x 1024 tokens, about 3 minutes a run here."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SETS = ["model.n_layer=2", "data.batch_size=1", "train.accumulate=1"]
GEMM_OBJ = re.compile(r"dnnl|openblas|blas")
UNIT = re.compile(r"^att_(forward|backward)_")


def parse(path):
    """Self counts per (object, function), and per function the inclusive counts of its
    calls by callee, from an uncompressed callgrind file (one event: Ir)."""
    selfc, calls = {}, {}
    ob = fn = cfn = None
    after_calls = False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                n = int(parts[1]) if len(parts) > 1 else 0
                if after_calls:
                    d = calls.setdefault(fn, {})
                    d[cfn] = d.get(cfn, 0) + n
                    after_calls = False
                else:
                    key = (ob, fn)
                    selfc[key] = selfc.get(key, 0) + n
            elif line.startswith("ob="):
                ob = line[3:]
            elif line.startswith("fn="):
                fn = line[3:]
            elif line.startswith("cfn="):
                cfn = line[4:]
            elif line.startswith("calls="):
                after_calls = True
    return selfc, calls


def inclusive(fn, selfc_by_fn, calls):
    """fn's self count plus its calls' (callgrind's call costs are inclusive already)."""
    return selfc_by_fn.get(fn, 0) + sum(calls.get(fn, {}).values())


def run(args, tmp, name, steps):
    out = os.path.join(tmp, name + ".out")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
           "--compress-strings=no", "--compress-pos=no", "--smc-check=all-non-file",
           os.path.join(ROOT, args.build, "apps/weft-train"), args.config]
    for kv in DEFAULT_SETS + args.set:
        cmd += ["--set", kv]
    cmd += ["--set", "train.max_iters=%d" % steps, "--set", "train.eval_interval=0",
            "--set", "train.eval_iters=1", "--set", "train.checkpoint_interval=0",
            "--set", "train.checkpoint=" + os.path.join(tmp, name + ".safetensors"),
            "--set", "train.log=" + os.path.join(tmp, name + ".csv"), "--set", "cpu.threads=1"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("callgrind / weft-train failed:\n" + r.stdout + r.stderr[-4000:])
    return parse(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/gpt2-small.ini")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--keep", metavar="DIR")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="step-instr.")
    os.makedirs(tmp, exist_ok=True)
    s1, c1 = run(args, tmp, "one-step", 1)
    s2, c2 = run(args, tmp, "steps", 1 + args.steps)
    selfc = {k: v - s1.get(k, 0) for k, v in s2.items()}
    by_fn = {}
    for (ob, fn), v in selfc.items():
        by_fn[fn] = by_fn.get(fn, 0) + v
    calls = {}
    for fn, d in c2.items():
        base = c1.get(fn, {})
        calls[fn] = {cf: v - base.get(cf, 0) for cf, v in d.items()}
    total = sum(selfc.values())
    gemm = sum(v for (ob, fn), v in selfc.items()
               if ob is not None and (GEMM_OBJ.search(os.path.basename(ob)) or "/" not in ob))
    att_blas = sum(v for cf, v in calls.get("cpu_gemm_tile", {}).items()
                   if "gemm" in cf or "guarded" in cf)
    att_total = sum(inclusive(fn, by_fn, calls) for fn in by_fn if UNIT.match(fn))
    att_own = att_total - att_blas
    other = total - gemm - att_own
    print("# %s%s, 1 thread, %d steady step(s) under callgrind" % (
        args.config, "".join(" --set " + kv for kv in DEFAULT_SETS + args.set), args.steps))
    print("instructions per step: %.3g" % (total / args.steps))
    rows = [("gemm", gemm), ("  of it attention's block products", att_blas),
            ("  of it matmul/linear", gemm - att_blas), ("attention (own work)", att_own),
            ("attention in all (own + its GEMMs)", att_total), ("other", other)]
    for name, v in rows:
        print("%-36s %6.1f%%" % (name, 100.0 * v / total if total else 0))
    print("largest 'other' functions (share of all instructions):")
    others = {}
    for (ob, fn), v in selfc.items():
        if ob is not None and (GEMM_OBJ.search(os.path.basename(ob)) or "/" not in ob):
            continue
        if fn is None or UNIT.match(fn) or fn.startswith("att_"):
            continue
        name = re.sub(r"\.(arch_x86_64_v\d|isra\.\d+|constprop\.\d+|part\.\d+)", "", fn)
        others[name] = others.get(name, 0) + v
    for name, v in sorted(others.items(), key=lambda kv: -kv[1])[:args.top]:
        print("  %6.2f%%  %s" % (100.0 * v / total, name))
    if args.keep:
        print("# callgrind files: %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
