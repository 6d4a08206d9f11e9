"""tests/torch/gen_ported.py: the differential suite's cases for the functions ported
programs call (issue 32): fixtures/ported.txt and fixtures/ported_grad.txt. gen.py imports
it; run gen.py, not this file. Parameters are the op's scalars in the order run() reads
them; test_torch_ported.inc builds the same calls in weft."""
import torch
import torch.nn.functional as F

REDUCTION = ["mean", "sum", "none"]


def _dims(p, start, n):
    return [int(x) for x in p[start:start + n]]


def run(op, ts, p):
    """PyTorch's answer for one ported op, or KeyError."""
    x = ts[0] if ts else None
    if op in ("cumsum", "cumprod"):
        return getattr(torch, op)(x, int(p[0]))
    if op == "sort":
        # stable=False, as programs call it (its node is SortBackward0; the stable overload's
        # SortBackward1); PyTorch 1.13's cpu sort keeps ties in order either way
        r = torch.sort(x, int(p[0]), descending=bool(p[1]))
        return (r.values, r.indices)
    if op == "argsort":
        return torch.argsort(x, int(p[0]), descending=bool(p[1]))
    if op == "topk":
        r = torch.topk(x, int(p[0]), int(p[1]), largest=bool(p[2]))
        return (r.values, r.indices)
    if op in ("amax", "amin"):
        return getattr(torch, op)(x, _dims(p, 2, int(p[1])), keepdim=bool(p[0]))
    if op == "flip":
        return torch.flip(x, [int(d) for d in p])
    if op == "roll":
        n = int(p[0])
        shifts, dims = [int(s) for s in p[1:1 + n]], [int(d) for d in p[1 + n:]]
        return torch.roll(x, shifts, dims) if dims else torch.roll(x, shifts)
    if op in ("tril", "triu"):
        return getattr(torch, op)(x, int(p[0]))
    if op == "movedim":
        n = int(p[0])
        return torch.movedim(x, _dims(p, 1, n), [int(d) for d in p[1 + n:]])
    if op == "nonzero":
        return torch.nonzero(x)
    if op == "masked_select":
        return x.masked_select(ts[1])
    if op == "masked_scatter":
        return x.masked_scatter(ts[1], ts[2])
    if op in ("index_add", "index_add_"):
        return getattr(x, op)(int(p[0]), ts[1], ts[2], alpha=p[1] if p[1] != int(p[1]) else int(p[1]))
    if op in ("index_copy", "index_copy_"):
        return getattr(x, op)(int(p[0]), ts[1], ts[2])
    if op in ("index_fill", "index_fill_"):
        return getattr(x, op)(int(p[0]), ts[1], p[1])
    if op == "isclose":
        return torch.isclose(x, ts[1], rtol=p[0], atol=p[1], equal_nan=bool(p[2]))
    if op == "allclose":
        return torch.tensor(torch.allclose(x, ts[1], rtol=p[0], atol=p[1], equal_nan=bool(p[2])))
    if op == "clamp_tensor":
        lo = ts[1] if p[0] else None
        hi = ts[1 + int(p[0])] if p[1] else None
        return torch.clamp(x, lo, hi)
    if op in ("floor_divide_", "remainder_"):
        return getattr(x, op)(ts[1])
    if op in ("floor_divide_scalar_", "remainder_scalar_"):
        s = p[0] if p[0] != int(p[0]) else int(p[0])
        return getattr(x, op[:-8] + "_")(s)
    if op == "scatter_":
        return x.scatter_(int(p[0]), ts[1], ts[2])
    if op == "scatter_value_":
        return x.scatter_(int(p[0]), ts[1], p[1])
    if op == "smooth_l1_loss":
        return F.smooth_l1_loss(x, ts[1], reduction=REDUCTION[int(p[0])], beta=p[1])
    if op == "huber_loss":
        return F.huber_loss(x, ts[1], reduction=REDUCTION[int(p[0])], delta=p[1])
    if op == "embedding_padding":
        return F.embedding(x, ts[1], padding_idx=int(p[0]))
    if op == "unfold":
        return x.unfold(int(p[0]), int(p[1]), int(p[2]))
    if op == "F_unfold":
        return F.unfold(x, int(p[0]), dilation=int(p[1]), padding=int(p[2]), stride=int(p[3]))
    raise KeyError(op)


OPS = ("cumsum", "cumprod", "sort", "argsort", "topk", "amax", "amin", "flip", "roll", "tril",
       "triu", "movedim", "nonzero", "masked_select", "masked_scatter", "index_add",
       "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "isclose",
       "allclose", "clamp_tensor", "floor_divide_", "remainder_", "floor_divide_scalar_",
       "remainder_scalar_", "scatter_", "scatter_value_", "smooth_l1_loss", "huber_loss",
       "embedding_padding", "unfold", "F_unfold")


def topk_ties(Inp, inp, k, dim, largest):
    """True when PyTorch's topk orders ties differently from a stable sort (such cases are
    left out: the order of equal values is not part of topk's contract)."""
    t = inp.tensor()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()  # PyTorch 1.13's cpu topk has no 16-bit floats; case() does the same
    r = torch.topk(t, k, dim, largest=largest)
    s = torch.sort(t, dim=dim, descending=largest, stable=True).indices.narrow(dim, 0, k)
    return not torch.equal(r.indices, s)


def cases(Inp, case):
    L = []
    seed = 70000
    ALL = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
           "float32", "float64"]
    MAIN = ["bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    # scans: every dtype, each dim, a transposed layout, a 0-dim and an empty tensor
    for op in ("cumsum", "cumprod"):
        for dt in ALL:
            lo, hi = (-2, 3) if op == "cumprod" else (-4, 5)
            for dim in (0, 1, -1):
                L.append(case(op, [dim], [Inp(dt, seed, lo, hi, [3, 5])]))
            L.append(case(op, [0], [Inp(dt, seed, lo, hi, [4, 3], [1, 4], 0, 12)]))
            seed += 1
        for shape, dim in (([], 0), ([0, 3], 1), ([2, 3, 4], 1), ([3], 1)):
            L.append(case(op, [dim], [Inp("float32", seed, -2, 3, shape)]))
    # sort / argsort / topk
    for dt in ALL:
        for dim, desc in ((0, 0), (1, 1), (-1, 0)):
            L.append(case("sort", [dim, desc], [Inp(dt, seed, -4, 5, [3, 6])]))
            L.append(case("argsort", [dim, desc], [Inp(dt, seed, -4, 5, [3, 6])]))
        seed += 1
    L.append(case("sort", [0, 0], [Inp("float32", seed, -4, 5, [6, 3], [1, 6], 0, 18)]))
    L.append(case("sort", [0, 1], [Inp("float32", seed, -4, 5, [])]))
    L.append(case("sort", [1, 0], [Inp("float32", seed, -4, 5, [0, 4])]))
    L.append(case("sort", [2, 0], [Inp("float32", seed, -4, 5, [2, 3])]))
    for dt in ("uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"):
        for k, dim, largest in ((2, 1, 1), (3, 0, 0), (1, -1, 1), (0, 1, 1)):
            inp = Inp(dt, seed, -60, 60, [4, 7])
            if dt != "bool" and topk_ties(Inp, inp, k, dim, bool(largest)):
                seed += 1
                continue
            L.append(case("topk", [k, dim, largest], [inp]))
            seed += 1
    L.append(case("topk", [8, 1, 1], [Inp("float32", seed, -60, 60, [4, 7])]))
    L.append(case("topk", [-1, 1, 1], [Inp("float32", seed, -60, 60, [4, 7])]))
    # amax / amin
    for op in ("amax", "amin"):
        for dt in ALL:
            for keep, dims in ((0, []), (1, [1]), (0, [0, 2]), (0, [-1])):
                L.append(case(op, [keep, len(dims)] + dims, [Inp(dt, seed, -4, 5, [2, 3, 4])]))
            seed += 1
        L.append(case(op, [0, 1, 0], [Inp("float32", seed, -4, 5, [0, 3])]))
        L.append(case(op, [0, 1, 1], [Inp("float32", seed, -4, 5, [0, 3])]))
        L.append(case(op, [0, 2, 0, 0], [Inp("float32", seed, -4, 5, [2, 3])]))
    # flip / roll / tril / triu / movedim
    for dt in MAIN:
        for dims in ([0], [1, 2], [-1, 0], []):
            L.append(case("flip", dims, [Inp(dt, seed, -4, 5, [2, 3, 4])]))
        for shifts, dims in (([1], [0]), ([-2, 5], [1, 2]), ([3], []), ([7], [-1])):
            L.append(case("roll", [len(shifts)] + shifts + dims, [Inp(dt, seed, -4, 5, [2, 3, 4])]))
        for diag in (0, 1, -1, 5):
            L.append(case("tril", [diag], [Inp(dt, seed, -4, 5, [2, 3, 4])]))
            L.append(case("triu", [diag], [Inp(dt, seed, -4, 5, [3, 4])]))
        seed += 1
    L.append(case("flip", [0, 0], [Inp("float32", seed, -4, 5, [2, 3])]))
    L.append(case("flip", [1], [Inp("float32", seed, -4, 5, [3, 4], [1, 3], 0, 12)]))
    L.append(case("roll", [2, 1, 2], [Inp("float32", seed, -4, 5, [3, 4])]))
    L.append(case("roll", [2, 1, 2, 0], [Inp("float32", seed, -4, 5, [3, 4])]))
    L.append(case("tril", [0], [Inp("float32", seed, -4, 5, [4])]))
    L.append(case("triu", [0], [Inp("float32", seed, -4, 5, [4, 3], [1, 4], 0, 12)]))
    for src, dst in (([0], [2]), ([0, 1], [2, 0]), ([-1], [0]), ([0, 1], [0]), ([0, 0], [1, 2]),
                     ([0, 1], [1, 1]), ([3], [0])):
        L.append(case("movedim", [len(src)] + src + dst, [Inp("float32", seed, -4, 5, [2, 3, 4])]))
    # nonzero, masked_select, masked_scatter
    for dt in MAIN:
        for shape in ([3, 4], [5], [], [0, 2], [2, 2, 3]):
            L.append(case("nonzero", [], [Inp(dt, seed, -1, 2, shape)]))
            seed += 1
        L.append(case("masked_select", [], [Inp(dt, seed, -4, 5, [3, 4]), Inp("bool", seed + 1, 0, 2, [3, 4])]))
        L.append(case("masked_select", [], [Inp(dt, seed, -4, 5, [3, 4]), Inp("bool", seed + 1, 0, 2, [4])]))
        L.append(case("masked_scatter", [], [Inp(dt, seed, -4, 5, [3, 4]), Inp("bool", seed + 1, 0, 2, [3, 4]),
                                             Inp(dt, seed + 2, -4, 5, [12])]))
        L.append(case("masked_scatter", [], [Inp(dt, seed, -4, 5, [3, 4]), Inp("bool", seed + 1, 0, 2, [4]),
                                             Inp(dt, seed + 2, -4, 5, [4, 4])]))
        seed += 3
    L.append(case("masked_select", [], [Inp("float32", seed, -4, 5, [3, 4]), Inp("uint8", seed + 1, 0, 2, [3, 4])]))
    L.append(case("masked_select", [], [Inp("float32", seed, -4, 5, [3, 4]), Inp("int64", seed + 1, 0, 2, [3, 4])]))
    L.append(case("masked_select", [], [Inp("float32", seed, -4, 5, [3, 4]), Inp("bool", seed + 1, 0, 2, [2, 4])]))
    L.append(case("masked_select", [], [Inp("float32", seed, -4, 5, [4], [3], 0, 10), Inp("bool", seed + 1, 0, 2, [3, 1])]))
    L.append(case("masked_scatter", [], [Inp("float32", seed, -4, 5, [3, 4]), Inp("bool", seed + 1, 1, 2, [3, 4]),
                                         Inp("float32", seed + 2, -4, 5, [3])]))
    L.append(case("masked_scatter", [], [Inp("float32", seed, -4, 5, [3, 4]), Inp("bool", seed + 1, 0, 2, [3, 4]),
                                         Inp("float64", seed + 2, -4, 5, [12])]))
    seed += 3
    # index_add / index_copy / index_fill and their in-place forms
    idx = Inp("int64", seed, 0, 4, [3])        # may repeat: index_add sums duplicates
    perm = Inp("int64", 70002, 0, 4, [2])      # the generator checks it has no duplicates
    for dt in MAIN:
        for op in ("index_add", "index_add_"):
            L.append(case(op, [1, 1], [Inp(dt, seed, -4, 5, [3, 4]), idx, Inp(dt, seed + 1, -4, 5, [3, 3])]))
            L.append(case(op, [0, 2], [Inp(dt, seed, -4, 5, [4, 3]), idx, Inp(dt, seed + 1, -4, 5, [3, 3])]))
        for op in ("index_copy", "index_copy_"):
            L.append(case(op, [1], [Inp(dt, seed, -4, 5, [3, 4]), perm, Inp(dt, seed + 1, -4, 5, [3, 2])]))
        for op in ("index_fill", "index_fill_"):
            L.append(case(op, [1, 2], [Inp(dt, seed, -4, 5, [3, 4]), idx]))
            L.append(case(op, [0, -1], [Inp(dt, seed, -4, 5, [4, 2]), Inp("int64", seed, -4, 4, [3])]))
        seed += 2
    x, s32 = Inp("float32", seed, -4, 5, [3, 4]), Inp("float32", seed + 1, -4, 5, [3, 2])
    two = Inp("int64", 70002, 0, 4, [2])
    for op in ("index_add", "index_copy"):
        L.append(case(op, [1, 1], [x, Inp("int64", seed, 0, 4, [3]), s32]))
        L.append(case(op, [1, 1], [x, Inp("int32", 70002, 0, 4, [2]), s32]))
        L.append(case(op, [1, 1], [x, Inp("float32", 70002, 0, 4, [2]), s32]))
        L.append(case(op, [1, 1], [x, Inp("int64", 70002, 0, 4, [2, 1]), s32]))
        L.append(case(op, [1, 1], [x, two, Inp("float64", seed + 1, -4, 5, [3, 2])]))
        L.append(case(op, [1, 1], [x, Inp("int64", 70002, 4, 9, [2]), s32]))
        L.append(case(op, [1, 1], [x, two, Inp("float32", seed + 1, -4, 5, [2, 2])]))
    L.append(case("index_fill", [1, 2], [x, Inp("int32", 70002, 0, 4, [2])]))
    L.append(case("index_fill", [1, 2], [x, Inp("int64", 70002, 4, 9, [2])]))
    L.append(case("index_fill", [1, 2], [x, Inp("int64", 70002, 0, 4, [2, 1])]))
    seed += 2
    # isclose / allclose
    for dt in MAIN:
        for rtol, atol, en in ((1e-5, 1e-8, 0), (0.1, 0.5, 0), (0, 0, 0), (0.25, 0, 1)):
            a = Inp(dt, seed, -4, 5, [3, 4])
            L.append(case("isclose", [rtol, atol, en], [a, Inp(dt, seed + 1, -4, 5, [3, 4])]))
            L.append(case("isclose", [rtol, atol, en], [a, Inp(dt, seed, -4, 5, [4])]))
            L.append(case("allclose", [rtol, atol, en], [a, Inp(dt, seed + 1, -4, 5, [3, 4])]))
        seed += 2
    L.append(case("isclose", [1e-5, 1e-8, 0], [Inp("float32", seed, -4, 5, [3]), Inp("float64", seed, -4, 5, [3])]))
    L.append(case("isclose", [-1, 1e-8, 0], [Inp("float32", seed, -4, 5, [3]), Inp("float32", seed, -4, 5, [3])]))
    L.append(case("isclose", [1e-5, -1, 0], [Inp("float32", seed, -4, 5, [3]), Inp("float32", seed, -4, 5, [3])]))
    # clamp with tensor bounds
    for dt in ("uint8", "int32", "int64", "float16", "float32", "float64"):
        t = Inp(dt, seed, -6, 7, [3, 4])
        lo, hi = Inp(dt, seed + 1, -4, 1, [4]), Inp(dt, seed + 2, 0, 5, [3, 1])
        L.append(case("clamp_tensor", [1, 1], [t, lo, hi]))
        L.append(case("clamp_tensor", [1, 0], [t, lo]))
        L.append(case("clamp_tensor", [0, 1], [t, hi]))
        L.append(case("clamp_tensor", [1, 1], [t, hi, lo]))
        seed += 3
    L.append(case("clamp_tensor", [1, 1], [Inp("int64", seed, -6, 7, [3, 4]), Inp("float32", seed, -2, 1, [4]),
                                           Inp("float32", seed + 1, 0, 3, [4])]))
    L.append(case("clamp_tensor", [0, 0], [Inp("float32", seed, -6, 7, [3, 4])]))
    L.append(case("clamp_tensor", [1, 0], [Inp("bool", seed, 0, 2, [3, 4]), Inp("bool", seed, 0, 2, [3, 4])]))
    # in-place floor_divide_ / remainder_ / scatter_
    for op in ("floor_divide_", "remainder_"):
        for da, db in (("float32", "float32"), ("int64", "int64"), ("int64", "float32"),
                       ("float64", "int32"), ("int32", "int64"), ("float32", "float64")):
            L.append(case(op, [], [Inp(da, seed, -9, 10, [3, 4]), Inp(db, seed + 1, 1, 4, [4])]))
            seed += 2
        L.append(case(op, [], [Inp("float32", seed, -9, 10, [4]), Inp("float32", seed + 1, 1, 4, [3, 4])]))
        for dt in ("float32", "int64", "uint8"):
            for s in (3.0, -2.5):
                L.append(case(op[:-1] + "_scalar_", [s], [Inp(dt, seed, -9, 10, [3, 4])]))
    for dt in MAIN:
        L.append(case("scatter_", [1], [Inp(dt, seed, -4, 5, [3, 5]), Inp("int64", seed, 0, 5, [2, 3]),
                                        Inp(dt, seed + 1, -4, 5, [2, 3])]))
        L.append(case("scatter_value_", [0, 2.0], [Inp(dt, seed, -4, 5, [3, 5]), Inp("int64", seed, 0, 3, [2, 3])]))
        seed += 2
    L.append(case("scatter_", [1], [Inp("float32", seed, -4, 5, [3, 5]), Inp("int64", seed, 0, 5, [2, 3]),
                                    Inp("float64", seed + 1, -4, 5, [2, 3])]))
    # losses
    for dt in ("float32", "float64", "float16", "bfloat16"):
        for r in range(3):
            for beta in (1.0, 0.5, 0.0):
                ins = [Inp(dt, seed, -4, 5, [3, 4]), Inp(dt, seed + 1, -4, 5, [3, 4])]
                L.append(case("smooth_l1_loss", [r, beta], ins))
                if beta > 0:
                    L.append(case("huber_loss", [r, beta * 2], ins))
        seed += 2
    L.append(case("smooth_l1_loss", [0, -1.0], [Inp("float32", seed, -4, 5, [3]), Inp("float32", seed, -4, 5, [3])]))
    L.append(case("huber_loss", [0, 0.0], [Inp("float32", seed, -4, 5, [3]), Inp("float32", seed, -4, 5, [3])]))
    L.append(case("huber_loss", [0, 1.0], [Inp("float32", seed, -4, 5, [3]), Inp("float64", seed, -4, 5, [3])]))
    # embedding with padding_idx (its forward is embedding's; the errors are its own)
    w = Inp("float32", seed, -4, 5, [5, 3])
    for pad in (0, 2, -1, 5, -6):
        L.append(case("embedding_padding", [pad], [Inp("int64", seed, 0, 5, [2, 3]), w]))
    # Tensor.unfold and F.unfold
    for dt in ("float32", "int64", "bool"):
        for dim, size, step in ((1, 2, 1), (0, 2, 2), (-1, 3, 2), (1, 5, 1), (1, 0, 1), (1, 2, 0)):
            L.append(case("unfold", [dim, size, step], [Inp(dt, seed, -4, 5, [3, 4])]))
        seed += 1
    L.append(case("unfold", [0, 1, 1], [Inp("float32", seed, -4, 5, [])]))
    for shape in ([2, 3, 5, 6], [3, 4, 4]):
        for k, dil, pad, st in ((2, 1, 0, 1), (3, 1, 1, 2), (2, 2, 1, 1)):
            L.append(case("F_unfold", [k, dil, pad, st], [Inp("float32", seed, -4, 5, shape)]))
    L.append(case("F_unfold", [2, 1, 0, 1], [Inp("float32", seed, -4, 5, [4, 4])]))
    L.append(case("F_unfold", [7, 1, 0, 1], [Inp("float32", seed, -4, 5, [1, 2, 4, 4])]))
    return [x for x in L if x is not None]


def grad_cases(Inp, grad_case):
    L = []
    seed = 80000

    def f64(s, shape, lo=-3, hi=4):
        return Inp("float64", s, lo, hi, shape)

    for op in ("cumsum", "cumprod"):
        for shape, dim in (([3, 5], 1), ([3, 5], 0), ([2, 3, 4], -2), ([], 0)):
            L.append(grad_case(op, [dim], [f64(seed, shape)]))
            seed += 1
    # cumprod through zeros: one, two and none in a line
    L.append(grad_case("cumprod", [1], [Inp("float64", 3, -1, 1, [4, 6])]))
    L.append(grad_case("cumprod", [0], [Inp("float64", 5, -1, 1, [6, 3])]))
    for dim, desc in ((1, 0), (0, 1)):
        L.append(grad_case("sort", [dim, desc], [f64(seed, [3, 5], -60, 60)]))
    L.append(grad_case("topk", [2, 1, 1], [f64(80100, [3, 5], -60, 60)]))
    L.append(grad_case("topk", [3, 0, 0], [f64(80101, [4, 3], -60, 60)]))
    for op in ("amax", "amin"):
        for keep, dims in ((0, []), (1, [1]), (0, [0, 2])):
            L.append(grad_case(op, [keep, len(dims)] + dims, [Inp("float64", seed, -1, 1, [2, 3, 4])]))
            seed += 1
    t = f64(seed, [2, 3, 4])
    L.append(grad_case("flip", [0, 2], [t]))
    L.append(grad_case("roll", [2, 1, -2, 1, 2], [t]))
    L.append(grad_case("roll", [1, 5], [t]))
    L.append(grad_case("tril", [0], [t]))
    L.append(grad_case("triu", [1], [t]))
    L.append(grad_case("movedim", [2, 0, 1, 2, 0], [t]))
    m = Inp("bool", seed, 0, 2, [4])
    L.append(grad_case("masked_select", [], [f64(seed, [3, 4]), Inp("bool", seed + 1, 0, 2, [3, 4])],
                       [True, False]))
    L.append(grad_case("masked_select", [], [f64(seed, [4]), Inp("bool", seed + 1, 0, 2, [3, 4])],
                       [True, False]))
    L.append(grad_case("masked_scatter", [], [f64(seed, [3, 4]), m, f64(seed + 2, [3, 5])],
                       [True, False, True]))
    seed += 3
    idx, perm = Inp("int64", 70000, 0, 4, [3]), Inp("int64", 70002, 0, 4, [2])
    L.append(grad_case("index_add", [1, 2.5], [f64(seed, [3, 4]), idx, f64(seed + 1, [3, 3])],
                       [True, False, True]))
    L.append(grad_case("index_copy", [1], [f64(seed, [3, 4]), perm, f64(seed + 1, [3, 2])],
                       [True, False, True]))
    L.append(grad_case("index_fill", [0, 2.0], [f64(seed, [4, 3]), idx], [True, False]))
    L.append(grad_case("clamp_tensor", [1, 1], [f64(seed, [3, 4], -6, 7), f64(seed + 1, [4], -4, 1),
                                                f64(seed + 2, [3, 1], 0, 5)]))
    L.append(grad_case("clamp_tensor", [1, 1], [f64(seed, [3, 4], -6, 7), f64(seed + 2, [3, 1], 0, 5),
                                                f64(seed + 1, [4], -4, 1)]))
    L.append(grad_case("clamp_tensor", [0, 1], [f64(seed, [3, 4], -6, 7), f64(seed + 2, [3, 1], 0, 5)]))
    seed += 3
    for r in range(3):
        for beta in (1.0, 0.0):
            L.append(grad_case("smooth_l1_loss", [r, beta], [f64(seed, [3, 4]), f64(seed + 1, [3, 4])]))
        L.append(grad_case("huber_loss", [r, 1.5], [f64(seed, [3, 4]), f64(seed + 1, [3, 4])]))
    for pad in (1, -1):
        L.append(grad_case("embedding_padding", [pad], [Inp("int64", seed, 0, 5, [2, 3]), f64(seed, [5, 3])],
                           [False, True]))
    L.append(grad_case("unfold", [1, 2, 1], [f64(seed, [3, 4])]))
    L.append(grad_case("unfold", [0, 2, 1], [f64(seed, [3, 4])]))
    L.append(grad_case("F_unfold", [3, 1, 1, 2], [f64(seed, [2, 2, 5, 6])]))
    return [x for x in L if x is not None]
