#!/usr/bin/python3
"""Writes tests/quant/fixtures/histogram.txt: torch 1.13's HistogramObserver on data sets
that tests/test_quant.c computes the same way (a closed formula of i, in float64, rounded to
float32), one batch each, with whole-number ends: torch 1.13 hands torch.histc int(min) and
int(max), which only whole-number ends survive unchanged (weft bins the true range).

    /usr/bin/python3 tests/quant/gen.py     (Debian's python3-torch)

Line format: name n range_min range_max scale zero_point, where the range is
_non_linear_param_search's choice and scale/zero_point calculate_qparams' (quint8)."""
import math
import os

import torch
from torch.ao.quantization.observer import HistogramObserver

N = 20000


def values(name):
    v = []
    for i in range(N):
        u = (i + 0.5) / N
        if name == "exponential":
            x = -math.log(1.0 - u) * 0.7
        elif name == "cauchy":
            x = max(-4.0, min(4.0, math.tan(math.pi * (u - 0.5)) * 0.3))
        elif name == "uniform":
            x = -2.0 + 5.0 * u
        else:  # logistic with two outliers
            x = math.log(u / (1.0 - u)) * 0.5
        v.append(x)
    ends = {"exponential": (0.0, 8.0), "cauchy": (-4.0, 4.0), "uniform": (-2.0, 3.0),
            "outliers": (-5.0, 20.0)}[name]
    v[0], v[-1] = ends
    return torch.tensor(v, dtype=torch.float64).to(torch.float32)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "histogram.txt")
    with open(out, "w") as f:
        f.write("# written by tests/quant/gen.py with torch %s\n" % torch.__version__)
        for name in ("exponential", "cauchy", "uniform", "outliers"):
            o = HistogramObserver()
            o(values(name))
            lo, hi = o._non_linear_param_search()
            scale, zp = o.calculate_qparams()
            f.write("%s %d %.9g %.9g %.9g %d\n" % (name, N, lo.item(), hi.item(), scale.item(),
                                                   zp.item()))


main()
