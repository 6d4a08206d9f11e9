#!/usr/bin/python3
"""tests/sched/gen.py: PyTorch 1.13's OneCycleLR and ReduceLROnPlateau, each alone and
after a LinearLR warmup, for weft's schedulers (test_optim.c replays them).

Run by hand where PyTorch is installed:  /usr/bin/python3 tests/sched/gen.py
It rewrites tests/sched/fixtures/schedulers.txt; the C suite needs no PyTorch.

Format, one case per block:
  case NAME
  opt TYPE LR MOMENTUM        the optimizer over one float64 parameter [3] of zeros
                              (MOMENTUM: SGD's momentum; ignored for adam)
  ini KEY=VALUE;KEY=VALUE...  the [scheduler] section
  init LR M                   after creation: group 0's lr and momentum (adam: betas[0])
  s G0 G1 G2 LR M P0 P1 P2    .grad = G, optimizer.step(), then the schedule's step; the
                              lr, momentum and parameter after it
  m METRIC LR M               plateau: scheduler.step(METRIC) (nan allowed)
  err TEXT                    the next step fails with PyTorch's error TEXT
  end
Floats as Python's repr. The warmup is LinearLR(start_factor, total_iters=w) composed as
weft composes it: SequentialLR([LinearLR, OneCycleLR], [w]) for onecycle, and for plateau
the warmup stepped per optimizer step with metrics judged only once it is over (PyTorch
has no SequentialLR for ReduceLROnPlateau: this is the loop a user writes).
"""
import os
import warnings

import torch
from torch.optim import lr_scheduler as S

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "schedulers.txt")


def momentum_of(opt):
    g = opt.param_groups[0]
    return g["betas"][0] if "betas" in g else g["momentum"]


def grad(k):
    # exact in float64 both sides: quarters
    return [((k * 7 + i * 3) % 9 - 4) / 4.0 for i in range(3)]


def make_opt(kind, lr, momentum):
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    if kind == "sgd":
        return p, torch.optim.SGD([p], lr=lr, momentum=momentum)
    return p, torch.optim.Adam([p], lr=lr)


def fmt(x):
    return repr(float(x))


def parse_ini(ini):
    return dict(kv.split("=", 1) for kv in ini.split(";"))


def onecycle_case(out, name, kind, lr, momentum, ini, steps, warmup=0, start_factor=1.0):
    kw = parse_ini(ini)
    args = {}
    for k, v in kw.items():
        if k in ("type", "warmup_steps", "warmup_start_factor"):
            continue
        if k in ("total_steps", "epochs", "steps_per_epoch"):
            args[k] = int(v)
        elif k in ("three_phase", "cycle_momentum"):
            args[k] = v == "true"
        elif k == "anneal_strategy":
            args[k] = v
        else:
            args[k] = float(v)
    args.setdefault("max_lr", lr)
    p, opt = make_opt(kind, lr, momentum)
    if warmup:
        w = S.LinearLR(opt, start_factor=start_factor, total_iters=warmup)
        oc = S.OneCycleLR(opt, **args)
        sched = S.SequentialLR(opt, [w, oc], milestones=[warmup])
    else:
        sched = S.OneCycleLR(opt, **args)
    out.append("case " + name)
    out.append("opt %s %s %s" % (kind, fmt(lr), fmt(momentum)))
    out.append("ini " + ini)
    out.append("init %s %s" % (fmt(opt.param_groups[0]["lr"]), fmt(momentum_of(opt))))
    for k in range(steps):
        g = grad(k)
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        try:
            sched.step()
        except ValueError as e:
            out.append("err " + str(e))
            break
        out.append("s " + " ".join(fmt(x) for x in g) + " %s %s " % (
            fmt(opt.param_groups[0]["lr"]), fmt(momentum_of(opt))) +
            " ".join(fmt(x) for x in p.detach().tolist()))
    out.append("end")


def plateau_case(out, name, lr, ini, events, warmup=0, start_factor=1.0):
    kw = parse_ini(ini)
    args = {}
    for k, v in kw.items():
        if k in ("type", "warmup_steps", "warmup_start_factor"):
            continue
        if k in ("mode", "threshold_mode"):
            args[k] = v
        elif k in ("patience", "cooldown"):
            args[k] = int(v)
        else:
            args[k] = float(v)
    p, opt = make_opt("sgd", lr, 0.0)
    w = S.LinearLR(opt, start_factor=start_factor, total_iters=warmup) if warmup else None
    plat = S.ReduceLROnPlateau(opt, **args)
    out.append("case " + name)
    out.append("opt sgd %s 0.0" % fmt(lr))
    out.append("ini " + ini)
    out.append("init %s %s" % (fmt(opt.param_groups[0]["lr"]), fmt(momentum_of(opt))))
    steps = 0
    for ev in events:
        if ev == "s":
            g = grad(steps)
            p.grad = torch.tensor(g, dtype=torch.float64)
            opt.step()
            steps += 1
            if w is not None and steps <= warmup:
                w.step()
            out.append("s " + " ".join(fmt(x) for x in g) + " %s %s " % (
                fmt(opt.param_groups[0]["lr"]), fmt(momentum_of(opt))) +
                " ".join(fmt(x) for x in p.detach().tolist()))
        else:
            if steps >= warmup:
                plat.step(ev)
            out.append("m %s %s %s" % (fmt(ev), fmt(opt.param_groups[0]["lr"]),
                                       fmt(momentum_of(opt))))
    out.append("end")


def main():
    warnings.filterwarnings("ignore")  # SequentialLR steps OneCycleLR with an epoch
    out = ["# tests/sched/fixtures/schedulers.txt: written by tests/sched/gen.py with PyTorch "
           + torch.__version__ + " (the format is described there)"]
    onecycle_case(out, "onecycle_sgd_cos", "sgd", 0.1, 0.9,
                  "type=onecycle;max_lr=1.0;total_steps=20", 20)
    onecycle_case(out, "onecycle_sgd_max_lr_is_the_optimizers", "sgd", 0.5, 0.0,
                  "type=onecycle;total_steps=12", 12)
    onecycle_case(out, "onecycle_linear_three_phase", "sgd", 0.1, 0.9,
                  "type=onecycle;max_lr=0.4;total_steps=17;pct_start=0.25;anneal_strategy=linear;"
                  "three_phase=true;div_factor=10;final_div_factor=100;base_momentum=0.8;"
                  "max_momentum=0.9", 17)
    onecycle_case(out, "onecycle_adam_by_epochs", "adam", 0.001, 0.0,
                  "type=onecycle;max_lr=0.01;epochs=3;steps_per_epoch=5", 15)
    onecycle_case(out, "onecycle_without_momentum", "sgd", 0.1, 0.5,
                  "type=onecycle;max_lr=0.3;total_steps=8;cycle_momentum=false", 8)
    onecycle_case(out, "onecycle_past_total_steps", "sgd", 0.1, 0.9,
                  "type=onecycle;max_lr=1.0;total_steps=10", 12)
    onecycle_case(out, "onecycle_after_warmup", "sgd", 0.1, 0.9,
                  "type=onecycle;max_lr=1.0;total_steps=10;warmup_steps=3;warmup_start_factor=0.5",
                  13, warmup=3, start_factor=0.5)
    metrics = [1.0, 0.9, 0.95, 0.91, 0.92, 0.89999, 0.95, 0.96, 0.97, 0.5, float("nan"),
               0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 0.4, 0.45, 0.46, 0.47, 0.48]
    plateau_case(out, "plateau_min_rel", 0.1, "type=plateau;patience=2;factor=0.5", metrics)
    plateau_case(out, "plateau_min_abs_cooldown", 0.1,
                 "type=plateau;patience=1;factor=0.2;threshold=0.05;threshold_mode=abs;"
                 "cooldown=2;min_lr=0.001", metrics)
    plateau_case(out, "plateau_max_rel", 1.0,
                 "type=plateau;mode=max;patience=0;factor=0.9;threshold=0.01", metrics)
    plateau_case(out, "plateau_eps_keeps_lr", 1e-7,
                 "type=plateau;patience=0;factor=0.5;min_lr=0;eps=1e-7", metrics[:8])
    events = []
    for m in metrics[:10]:
        events += ["s", "s", m]  # two optimizer steps per evaluation
    plateau_case(out, "plateau_after_warmup", 0.1,
                 "type=plateau;patience=1;factor=0.5;warmup_steps=5;warmup_start_factor=0.25",
                 events, warmup=5, start_factor=0.25)
    with open(OUT, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", OUT, len(out), "lines")


if __name__ == "__main__":
    main()
