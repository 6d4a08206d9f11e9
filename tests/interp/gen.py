#!/usr/bin/python3
"""tests/interp/gen.py: PyTorch 1.13's answers for F.interpolate and torch.cdist, replayed
by tests/test_interpolate.c without PyTorch.

Run by hand where PyTorch is installed:  /usr/bin/python3 tests/interp/gen.py
It rewrites tests/interp/fixtures/{interpolate,cdist}.txt.

Inputs are not stored: both sides compute them from value(seed, i, levels), integer
arithmetic whose results (quarters) are exact in every floating dtype. A tensor marked
"t" (transposed) is the row-major buffer of the shape with its last two dims swapped,
seen through transpose(-1, -2): non-contiguous. One case per line, tokens separated by
single spaces:

  interp NAME MODE ALIGN NSIZE S.. NSCALE F.. RECOMPUTE DTYPE LAYOUT NDIM SHAPE..
         then  R NDIM SHAPE.. VALUES..  G VALUES..  N GRAD_FN   or  E TYPE MESSAGE..
    MODE as F.interpolate's; ALIGN / RECOMPUTE: -1 None, 0 False, 1 True; NSIZE 0 for
    None, -1 for a single int (one S follows), else the length of the list that follows;
    NSCALE likewise. G: the input's gradient for the grad_output
    value(777, i, 23) (float64 cases only; "G -" otherwise).
  cdist NAME P MODE DTYPE LAYOUT1 NDIM1 SHAPE1.. LAYOUT2 NDIM2 SHAPE2.. LEVELS
         then  R ...  G1 VALUES..  G2 VALUES..  N GRAD_FN   or  E TYPE MESSAGE..
    MODE: 0 use_mm_for_euclid_dist_if_necessary, 1 use_mm_for_euclid_dist,
    2 donot_use_mm_for_euclid_dist; LEVELS: how many distinct values the inputs take
    (few levels make ties and zero distances).
Floats are written as Python's repr (nan, inf, -inf).
"""
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
DT = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
      "int64": torch.int64}
CDIST_MODES = ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
               "donot_use_mm_for_euclid_dist"]


def value(seed, i, levels):
    k = ((seed * 1000003 + i * 7919 + 12345) * 2654435761) & 0xFFFFFFFF
    k >>= 7
    return (k % levels) / 4.0 - levels / 8.0


def make(shape, layout, seed, levels, dtype):
    base = list(shape)
    if layout == "t":
        base[-1], base[-2] = base[-2], base[-1]
    n = 1
    for s in base:
        n *= s
    t = torch.tensor([value(seed, i, levels) for i in range(n)], dtype=torch.float64)
    t = t.reshape(base)
    if layout == "t":
        t = t.transpose(-1, -2)
    return t.to(DT[dtype])


def fmt(x):
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2 ** 53 else repr(x)


def tensor_tokens(t):
    t = t.detach().to(torch.float64)
    return [str(t.dim())] + [str(s) for s in t.shape] + [fmt(v) for v in t.reshape(-1).tolist()]


def error_tokens(e):
    return ["E", type(e).__name__, str(e).split("\n")[0]]


def opt(v):
    return None if v == -1 else bool(v)


def arg_tokens(v, f):
    """None: 0; a single number: -1 and it; a list: its length and its values."""
    if v is None:
        return ["0"]
    if isinstance(v, (list, tuple)):
        return [str(len(v))] + [f(e) for e in v]
    return ["-1", f(v)]


def interp_case(name, mode, shape, size=None, scale=None, align=-1, recompute=-1,
                dtype="float64", layout="c", grad=True):
    x = make(shape, layout, 11, 40, dtype)
    head = ["interp", name, mode, str(align)] + arg_tokens(size, str) + arg_tokens(scale, lambda v: repr(float(v)))
    head += [str(recompute), dtype, layout, str(len(shape))] + [str(s) for s in shape]
    if dtype == "float64" and grad:
        x.requires_grad_(True)
    # bfloat16: the float64 result rounded to bfloat16. PyTorch 1.13's own bfloat16 kernels
    # compute weights in bfloat16 (its bicubic strays by 0.1 on these inputs); weft's
    # compute in float.
    xin = x.double() if dtype == "bfloat16" else x
    try:
        y = F.interpolate(xin, size=size, scale_factor=scale, mode=mode, align_corners=opt(align),
                          recompute_scale_factor=opt(recompute))
        if dtype == "bfloat16":
            y = y.to(torch.bfloat16)
    except Exception as e:  # noqa: BLE001 (any error is a fixture)
        return head + error_tokens(e)
    toks = head + ["R"] + tensor_tokens(y)
    if x.requires_grad:
        g = torch.tensor([value(777, i, 23) for i in range(y.numel())], dtype=torch.float64)
        y.backward(g.reshape(y.shape))
        toks += ["G"] + [fmt(v) for v in x.grad.reshape(-1).tolist()]
        toks += ["N", type(y.grad_fn).__name__]
    else:
        toks += ["G", "-", "N", "-"]
    return toks


def cdist_case(name, p, s1, s2, mode=0, dtype="float64", l1="c", l2="c", levels=40, dtype2=None):
    a = make(s1, l1, 21, levels, dtype)
    b = make(s2, l2, 22, levels, dtype2 or dtype)
    head = ["cdist", name, repr(float(p)), str(mode), dtype + ("" if not dtype2 else "/" + dtype2),
            l1, str(len(s1))] + [str(s) for s in s1] + [l2, str(len(s2))] + [str(s) for s in s2]
    head += [str(levels)]
    grad = dtype == "float64" and dtype2 is None
    if grad:
        a.requires_grad_(True)
        b.requires_grad_(True)
    try:
        y = torch.cdist(a, b, p=p, compute_mode=CDIST_MODES[mode])
    except Exception as e:  # noqa: BLE001
        return head + error_tokens(e)
    toks = head + ["R"] + tensor_tokens(y)
    if grad and y.numel() > 0:
        g = torch.tensor([value(777, i, 23) for i in range(y.numel())], dtype=torch.float64)
        y.backward(g.reshape(y.shape))
        toks += ["G1"] + [fmt(v) for v in a.grad.reshape(-1).tolist()]
        toks += ["G2"] + [fmt(v) for v in b.grad.reshape(-1).tolist()]
        toks += ["N", type(y.grad_fn).__name__]
    else:
        toks += ["G1", "-", "G2", "-", "N", "-"]
    return toks


def interp_cases():
    c = []
    # every mode, up and down, odd sizes, both align_corners, size and scale_factor
    for mode, nd in (("nearest", 1), ("nearest", 2), ("nearest-exact", 1), ("nearest-exact", 2),
                     ("linear", 1), ("bilinear", 2), ("bicubic", 2)):
        shape = [1, 2, 7] if nd == 1 else [2, 2, 5, 7]
        aligns = [-1] if mode.startswith("nearest") else [0, 1]
        for al in aligns:
            tag = f"{mode}-{nd}d-a{al}"
            up = 11 if nd == 1 else (9, 13)
            down = 3 if nd == 1 else (3, 4)
            c.append(interp_case(tag + "-up", mode, shape, size=up, align=al))
            c.append(interp_case(tag + "-down", mode, shape, size=down, align=al))
            c.append(interp_case(tag + "-same", mode, shape, size=shape[2:] if nd == 2 else 7, align=al))
            c.append(interp_case(tag + "-x2", mode, shape, scale=2.0, align=al))
            c.append(interp_case(tag + "-x1.7", mode, shape, scale=1.7, align=al))
            c.append(interp_case(tag + "-x0.6", mode, shape, scale=0.6, align=al))
            c.append(interp_case(tag + "-x1.7-recompute", mode, shape, scale=1.7, align=al, recompute=1))
            c.append(interp_case(tag + "-x0.6-norecompute", mode, shape, scale=0.6, align=al, recompute=0))
            c.append(interp_case(tag + "-to1", mode, shape, size=1, align=al))
            c.append(interp_case(tag + "-t", mode, shape, size=up, align=al, layout="t"))
            c.append(interp_case(tag + "-f32", mode, shape, size=up, align=al, dtype="float32"))
            c.append(interp_case(tag + "-f32-x1.7", mode, shape, scale=1.7, align=al, dtype="float32"))
            c.append(interp_case(tag + "-f32-t-down", mode, shape, size=down, align=al,
                                 dtype="float32", layout="t"))
            if nd == 2:
                c.append(interp_case(tag + "-scale2", mode, shape, scale=(0.5, 2.5), align=al))
                c.append(interp_case(tag + "-from1", mode, [1, 2, 1, 1], size=(3, 4), align=al))
    c.append(interp_case("bilinear-bf16", "bilinear", [1, 2, 5, 7], size=(9, 4), dtype="bfloat16"))
    c.append(interp_case("bicubic-bf16", "bicubic", [1, 2, 5, 7], size=(9, 4), dtype="bfloat16"))
    c.append(interp_case("nearest-bf16", "nearest", [1, 2, 5, 7], size=(9, 4), dtype="bfloat16"))
    c.append(interp_case("bilinear-batch0", "bilinear", [0, 2, 5, 7], size=(9, 4)))
    c.append(interp_case("area-2d-down", "area", [2, 2, 5, 7], size=(3, 4)))
    c.append(interp_case("area-2d-scale", "area", [2, 2, 6, 8], scale=0.5))
    c.append(interp_case("area-1d-down", "area", [1, 2, 7], size=3))
    c.append(interp_case("area-2d-t", "area", [2, 2, 5, 7], size=(2, 3), layout="t"))
    # bad arguments: PyTorch's words
    x4, x3 = [1, 2, 4, 5], [1, 2, 5]
    c.append(interp_case("err-align-nearest", "nearest", x4, size=3, align=1))
    c.append(interp_case("err-align-nearest-false", "nearest-exact", x4, size=3, align=0))
    c.append(interp_case("err-size-and-scale", "bilinear", x4, size=3, scale=2.0))
    c.append(interp_case("err-neither", "bilinear", x4))
    c.append(interp_case("err-size-len", "bilinear", x4, size=[3]))
    c.append(interp_case("err-scale-len", "bilinear", x4, scale=[2.0, 2.0, 2.0]))
    c.append(interp_case("err-recompute-size", "bilinear", x4, size=3, recompute=1))
    c.append(interp_case("err-bilinear-3d", "bilinear", x3, size=3))
    c.append(interp_case("err-linear-4d", "linear", x4, size=3))
    c.append(interp_case("err-bicubic-3d", "bicubic", x3, size=3))
    c.append(interp_case("err-2d-input", "nearest", [4, 5], size=3))
    c.append(interp_case("err-unknown-mode", "cubic", x4, size=3))
    c.append(interp_case("err-size0", "bilinear", x4, size=(0, 3)))
    c.append(interp_case("err-size0-1d", "nearest", x3, size=0))
    c.append(interp_case("err-negative-scale", "nearest", x3, scale=-1.0))
    c.append(interp_case("err-channels0", "bicubic", [1, 0, 4, 5], size=3))
    c.append(interp_case("err-long", "bilinear", x4, size=3, dtype="int64"))
    c.append(interp_case("err-long-nearest", "nearest", x4, size=3, dtype="int64"))
    return c


def cdist_cases():
    c = []
    for p in (0.0, 1.0, 2.0, float("inf"), 0.5, 1.5, 3.0):
        tag = f"p{p}"
        c.append(cdist_case(tag, p, [3, 4], [5, 4]))
        c.append(cdist_case(tag + "-batch", p, [2, 3, 5], [2, 4, 5]))
        c.append(cdist_case(tag + "-broadcast", p, [2, 1, 3, 5], [3, 4, 5]))
        c.append(cdist_case(tag + "-ties", p, [2, 4, 3], [2, 5, 3], levels=2))
        c.append(cdist_case(tag + "-t", p, [2, 3, 5], [2, 4, 5], l1="t", l2="t"))
        c.append(cdist_case(tag + "-f32", p, [2, 3, 5], [2, 4, 5], dtype="float32"))
        c.append(cdist_case(tag + "-large", p, [2, 30, 6], [2, 7, 6]))
    # p = 2's matrix-multiply formula: default above 25 rows, forced, refused
    c.append(cdist_case("p2-mm-forced", 2.0, [2, 3, 5], [2, 4, 5], mode=1))
    c.append(cdist_case("p2-mm-refused", 2.0, [2, 30, 6], [2, 7, 6], mode=2))
    c.append(cdist_case("p2-mm-ties", 2.0, [1, 30, 3], [1, 6, 3], levels=2))
    c.append(cdist_case("p2-mm-2d", 2.0, [27, 4], [3, 4]))
    c.append(cdist_case("p2-mm-f32", 2.0, [2, 30, 6], [2, 7, 6], dtype="float32"))
    c.append(cdist_case("p2-mm-t", 2.0, [2, 30, 6], [2, 7, 6], l1="t", l2="t"))
    c.append(cdist_case("empty-rows", 2.0, [0, 3], [4, 3]))
    c.append(cdist_case("empty-cols", 1.0, [2, 0], [4, 0]))
    c.append(cdist_case("err-1d", 2.0, [3], [4, 3]))
    c.append(cdist_case("err-1d-x2", 2.0, [4, 3], [3]))
    c.append(cdist_case("err-cols", 2.0, [2, 4], [3, 3]))
    c.append(cdist_case("err-p", -1.0, [2, 4], [3, 4]))
    c.append(cdist_case("err-long", 2.0, [2, 4], [3, 4], dtype="int64"))
    c.append(cdist_case("err-long-x2", 2.0, [2, 4], [3, 4], dtype="float32", dtype2="int64"))
    c.append(cdist_case("err-batch", 2.0, [2, 3, 4], [3, 4, 4]))
    c.append(cdist_case("err-dtypes", 2.0, [2, 4], [3, 4], dtype="float32", dtype2="float64"))
    return c


def write(name, cases):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        f.write(f"# generated by tests/interp/gen.py from PyTorch {torch.__version__}; do not edit\n")
        for toks in cases:
            f.write(" ".join(toks) + "\n")
    print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    write("interpolate.txt", interp_cases())
    write("cdist.txt", cdist_cases())
