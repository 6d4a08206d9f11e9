#!/usr/bin/python3
"""The worst case of a spinning wait, measured in CPU time: a weft training whose two
OpenMP threads share one core, as when the machine has more runnable threads than cores.
bench/spin-colocated.sh runs it.

    bench/spin_colocated.py CONFIG [--spin passive,5000,10000,20000,libgomp] [--rounds R]
                            [--build DIR] [--cpu N]

Each run trains CONFIG in iteration mode; after its first logged steps (libgomp has read
its settings and counted 2 CPUs, so it does not throttle its spin) every thread of the
process is pinned to one CPU, and the process's CPU time (user + system, all threads,
from /proc) is read over the next steps. With both threads on one core, a thread that
waits at a barrier spins until its spin count runs out (or the scheduler preempts it)
while the thread it waits for cannot run: the CPU time per step over that of one thread
is what the wait setting wastes. CPU time, not wall time: another process on the core
lengthens the wall time but not this process's CPU time, so the figures hold on a busy
machine. Settings: `passive` (OMP_WAIT_POLICY=PASSIVE), a GOMP_SPINCOUNT, `libgomp`
(its own 300000), `weft` (weft's default, nothing in the environment); each against the
same config at 1 thread, interleaved over the rounds; medians.
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pid):
    """User + system CPU of every thread of pid (/proc/pid/task/*/stat fields 14 and 15)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a thread that ended
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def run(args, threads, setting, first=10, last=40):
    """CPU ms per step from step `first` to step `last`, pinned to one CPU from `first` on."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)
    if setting == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif setting == "libgomp":
        env["GOMP_SPINCOUNT"] = "300000"
    elif setting != "weft":
        env["GOMP_SPINCOUNT"] = setting
    out = os.path.join(args.tmp, "run")
    cmd = [os.path.join(ROOT, args.build, "apps/weft-train"), args.config,
           "--set", "cpu.threads=%d" % threads, "--set", "train.max_iters=%d" % last,
           "--set", "train.log_interval=%d" % first, "--set", "train.eval_interval=0",
           "--set", "train.eval_iters=1", "--set", "train.checkpoint=%s.safetensors" % out,
           "--set", "train.log=%s.csv" % out]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace")
    start = end = None
    text = []
    for line in p.stdout:
        text.append(line)
        if line.startswith("step %d/" % first):
            for tid in os.listdir("/proc/%d/task" % p.pid):
                os.sched_setaffinity(int(tid), {args.cpu})
            start = cpu_seconds(p.pid)
        elif line.startswith("step %d/" % last):
            end = cpu_seconds(p.pid)
    if p.wait() != 0 or start is None or end is None:
        raise SystemExit("%s failed:\n%s" % (" ".join(cmd), "".join(text)))
    return 1e3 * (end - start) / (last - first)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--spin", default="passive,5000,10000,20000,libgomp")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default="build")
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                    help="the CPU to pin to (default: the last one this process may use)")
    args = ap.parse_args()
    args.config = os.path.abspath(args.config)
    args.tmp = os.environ.get("TMPDIR", "/tmp") + "/weft-spin-colocated.%d" % os.getpid()
    os.makedirs(args.tmp, exist_ok=True)
    settings = [(1, "weft")] + [(2, s) for s in args.spin.split(",") if s]
    res = {}
    try:
        for r in range(args.rounds):
            for threads, s in settings:
                res.setdefault((threads, s), []).append(run(args, threads, s))
            print("round %d/%d done" % (r + 1, args.rounds), file=sys.stderr, flush=True)
    finally:
        for f in os.listdir(args.tmp):
            os.remove(os.path.join(args.tmp, f))
        os.rmdir(args.tmp)
    one = statistics.median(res[(1, "weft")])
    print("%s: CPU ms per step, both threads on CPU %d; median (min-max) of %d rounds"
          % (os.path.relpath(args.config, ROOT), args.cpu, args.rounds))
    for (threads, s), v in res.items():
        label = "1 thread" if threads == 1 else "2 threads, " + s
        print("%-26s %8.1f (%.1f-%.1f)  x%.2f" % (label, statistics.median(v), min(v), max(v),
                                                statistics.median(v) / one))


if __name__ == "__main__":
    main()
