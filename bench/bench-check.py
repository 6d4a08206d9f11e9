#!/usr/bin/python3
"""The regression gate: weft-train's throughput, peak memory and per-step ops on the
shipped configs, and the data loader's throughput on each config's [data] alone
(weft-bench --config), the current build against a baseline build, interleaved.

    bench-check.py baseline BUILD BASELINE_DIR      (make bench-baseline)
        installs BUILD into BASELINE_DIR/tree and records its figures there
    bench-check.py check BUILD BASELINE_DIR         (make bench-check)
        runs the baseline's weft-train and BUILD's in turn, ROUNDS times each, and fails
        (exit 1) when a config's training or loader throughput (median) drops more than 3%
        beyond the run-to-run spread (half the range of the two sides' rounds, relative),
        its peak allocated bytes grow more than 5%, or a layout copy appears in a step that
        had none
    env: ROUNDS (5), CONFIGS ("mnist-mlp mnist-cnn gpt-char"), STEPS (per run, 30),
         INJECT (WEFT_BENCH_INJECT for the current build's runs only: "slow:0.2", "copy":
         the gate's self-test, tests/bench-check-self.sh)
Throughput counts the steps after the first five (warm-up). Run it on a quiet machine."""
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(train, plugins, config, steps, inject, tmp):
    env = dict(os.environ, WEFT_PLUGIN_PATH=plugins, OMP_WAIT_POLICY="PASSIVE")
    env.pop("WEFT_BENCH_INJECT", None)
    if inject:
        env["WEFT_BENCH_INJECT"] = inject
    # a fresh folder per run: weft-train refuses to write over an earlier run's files
    tmp = tempfile.mkdtemp(dir=tmp)
    prof = os.path.join(tmp, "prof")
    log = os.path.join(tmp, "log.csv")
    args = [train, os.path.join(ROOT, "configs", config + ".ini"),
            "--set", f"train.max_iters={steps}", "--set", "train.eval_interval=0",
            "--set", "train.eval_iters=1", "--set", f"train.log_interval={steps}",
            "--set", f"train.checkpoint={tmp}/m.safetensors", "--set", f"train.log={log}",
            "--set", f"train.profile={prof}", "--set", "train.profile_skip_first=5",
            "--set", "train.profile_wait=0", "--set", "train.profile_warmup=0",
            "--set", "train.profile_active=1"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"bench-check: {config}: weft-train failed:\n{out.stdout}\n{out.stderr}")
    m = re.search(r"^step \d+/\d+ .*?([0-9.]+) (?:img|tok|samples)/s", out.stdout, re.M)
    rows = open(log).read().splitlines()
    peak = int(rows[-1].split(",")[-1])
    ops, copies = {}, 0
    for line in open(os.path.join(prof, "ops.1.txt")):
        f = line.split()
        if len(f) >= 10 and "%" in line and f[-1].isdigit() and not f[0].startswith(("ProfilerStep", "data",
                                                                    "forward", "backward",
                                                                    "optimizer")):
            ops[f[0]] = int(f[-1])
        c = re.match(r"Layout copies .*: (\d+)", line)
        if c:
            copies = int(c.group(1))
    return float(m.group(1)), peak, ops, copies


def run_loader(bench, plugins, config, inject):
    """The loader's samples/s on the config's [data] alone; None when this build's
    weft-bench has no --config (a baseline older than the figure)."""
    env = dict(os.environ, WEFT_PLUGIN_PATH=plugins, OMP_WAIT_POLICY="PASSIVE")
    env.pop("WEFT_BENCH_INJECT", None)
    if inject:
        env["WEFT_BENCH_INJECT"] = inject
    if not os.path.exists(bench):
        return None
    out = subprocess.run([bench, "--config", os.path.join(ROOT, "configs", config + ".ini"),
                          "--batches", "100", "--repeats", "3"],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode == 2 and "unknown argument" in out.stderr:
        return None
    if out.returncode != 0:
        sys.exit(f"bench-check: {config}: weft-bench --config failed:\n{out.stdout}\n{out.stderr}")
    m = re.search(r"^loader_\S+ +([0-9.]+) samples/s", out.stdout, re.M)
    return float(m.group(1))


def side_paths(build):
    return (os.path.join(build, "apps", "weft-train"), os.path.join(build, "plugins"),
            os.path.join(build, "bench", "weft-bench"))


def compare(figures):
    """Medians per side, the spread (the larger side's half range, relative) and the
    current side's change against the base."""
    med = {s: statistics.median(v) for s, v in figures.items()}
    spread = max((max(v) - min(v)) / 2 / med[s] for s, v in figures.items())
    return med, spread, med["current"] / med["base"] - 1


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("baseline", "check"):
        sys.exit(__doc__)
    mode, build, base = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    configs = os.environ.get("CONFIGS", "mnist-mlp mnist-cnn gpt-char").split()
    rounds = int(os.environ.get("ROUNDS", "5"))
    steps = int(os.environ.get("STEPS", "30"))
    inject = os.environ.get("INJECT", "")
    tree = os.path.join(base, "tree")
    if mode == "baseline":
        os.makedirs(base, exist_ok=True)
        subprocess.run(["rm", "-rf", tree], check=True)
        # the build's programs, libraries and plugins as they are (rpaths point into it)
        subprocess.run(["cp", "-a", build, tree], check=True)
        print(f"bench-baseline: {build} kept as {tree}; make bench-check compares against it")
        return 0
    if not os.path.isdir(tree):
        sys.exit(f"bench-check: no baseline in {base}: run make bench-baseline first")
    sides = {"base": side_paths(tree), "current": side_paths(build)}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in configs:
            res = {"base": [], "current": []}
            loader = {"base": [], "current": []}
            for r in range(rounds):
                for side in ("base", "current"):
                    train, plugins, bench = sides[side]
                    side_inject = inject if side == "current" else ""
                    res[side].append(run(train, plugins, config, steps, side_inject, tmp))
                    loader[side].append(run_loader(bench, plugins, config, side_inject))
            tput = {s: [x[0] for x in v] for s, v in res.items()}
            med, spread, change = compare(tput)
            peak = {s: max(x[1] for x in v) for s, v in res.items()}
            ops = {s: v[0][2] for s, v in res.items()}
            copies = {s: max(x[3] for x in v) for s, v in res.items()}
            print(f"{config}: throughput {med['base']:.0f} -> {med['current']:.0f} "
                  f"({100 * change:+.1f}%, spread {100 * spread:.1f}%); peak "
                  f"{peak['base']} -> {peak['current']} bytes; layout copies per step "
                  f"{copies['base']} -> {copies['current']}")
            if change < -(0.03 + spread):
                failed.append(f"{config}: throughput down {-100 * change:.1f}% (> 3% + spread "
                              f"{100 * spread:.1f}%)")
            if None in loader["base"] + loader["current"]:
                print(f"{config}: loader throughput: n/a (a side's weft-bench has no --config)")
            else:
                lmed, lspread, lchange = compare(loader)
                print(f"{config}: loader throughput {lmed['base']:.0f} -> {lmed['current']:.0f} "
                      f"samples/s ({100 * lchange:+.1f}%, spread {100 * lspread:.1f}%)")
                if lchange < -(0.03 + lspread):
                    failed.append(f"{config}: loader throughput down {-100 * lchange:.1f}% "
                                  f"(> 3% + spread {100 * lspread:.1f}%)")
            if peak["current"] > 1.05 * peak["base"]:
                failed.append(f"{config}: peak memory up {100 * (peak['current'] / peak['base'] - 1):.1f}%")
            if copies["base"] == 0 and copies["current"] > 0:
                failed.append(f"{config}: {copies['current']} layout copies in a step that had none")
            for name in sorted(set(ops["base"]) | set(ops["current"])):
                a, b = ops["base"].get(name, 0), ops["current"].get(name, 0)
                if a != b:
                    print(f"  {config}: op {name}: {a} -> {b} calls per step")
    for f in failed:
        print("bench-check: FAIL " + f)
    print("bench-check: " + ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
