#!/usr/bin/env python3
"""Writes data/sparse/train.svm and test.svm: a large sparse classification problem in
libsvm format, for configs/sparse-logreg.ini. Deterministic (seeded Mersenne Twister,
whose random() is the same on every Python 3), standard library only.

The data: 1,000,000 features; each row has 30 to 70 non-zeros (50 on average) with
values in [0.05, 1] written with three decimals. A hidden sparse linear model labels
the rows: only 5,000 "informative" features (scattered over the index range) have a
weight, drawn from N(0, 1) per class; every row takes 40% of its non-zeros from them
and the rest uniformly from all features, and its label is the class with the largest
score w_c . x (no label noise). With two classes (the default) labels are written as
-1/+1, the svmlight convention, else as 0..C-1.

Each informative feature appears in about 400 training rows, so a linear model can
recover the hidden weights well but not perfectly, while each of the other features
appears in about 3 rows, enough to be memorised: logistic regression
(configs/sparse-logreg.ini) reaches 100% training and about 95% test accuracy.

Usage: python3 scripts/make-sparse-libsvm.py [--out DIR] [--rows N] [--test-rows N]
       [--features N] [--classes C] [--informative N] [--seed S]
"""
import argparse
import os
import random
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join("data", "sparse"))
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--test-rows", type=int, default=20000)
    p.add_argument("--features", type=int, default=1000000)
    p.add_argument("--classes", type=int, default=2)
    p.add_argument("--informative", type=int, default=5000)
    p.add_argument("--share", type=float, default=0.4,
                   help="fraction of each row's non-zeros drawn from the informative features")
    p.add_argument("--min-nnz", type=int, default=30)
    p.add_argument("--max-nnz", type=int, default=70)
    p.add_argument("--seed", type=int, default=20240601)
    a = p.parse_args()
    if a.classes < 2 or a.features < 1 or not 0 < a.informative <= a.features:
        p.error("need classes >= 2 and 0 < informative <= features")
    if not 1 <= a.min_nnz <= a.max_nnz or a.max_nnz > a.features:
        p.error("need 1 <= min-nnz <= max-nnz <= features")
    return a


def hidden_model(rng, a):
    """The informative features (distinct, scattered) and their weights per class."""
    chosen = set()
    while len(chosen) < a.informative:
        chosen.add(int(rng.random() * a.features))
    informative = sorted(chosen)
    weights = {}
    for j in informative:
        weights[j] = [rng.gauss(0.0, 1.0) for _ in range(a.classes)]
    return informative, weights


def write_rows(path, n, rng, a, informative, weights):
    rnd = rng.random
    nf, ni = a.features, len(informative)
    span = a.max_nnz - a.min_nnz + 1
    classes = range(a.classes)
    binary = a.classes == 2
    counts = [0] * a.classes
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        lines = []
        for _ in range(n):
            k = a.min_nnz + int(rnd() * span)
            k_inf = int(k * a.share + 0.5)
            row = set()
            while len(row) < k_inf:
                row.add(informative[int(rnd() * ni)])
            while len(row) < k:
                row.add(int(rnd() * nf))
            cols = sorted(row)
            vals = [50 + int(rnd() * 951) for _ in cols]  # thousandths: 0.050 .. 1.000
            score = [0.0] * a.classes
            for j, v in zip(cols, vals):
                w = weights.get(j)
                if w is not None:
                    for c in classes:
                        score[c] += w[c] * v
            label = max(classes, key=score.__getitem__)
            counts[label] += 1
            text = ("+1" if label else "-1") if binary else str(label)
            lines.append(text + " " + " ".join(
                ["%d:%d.%03d" % (j + 1, v // 1000, v % 1000) for j, v in zip(cols, vals)]))
            if len(lines) == 4096:
                f.write("\n".join(lines) + "\n")
                lines = []
        if lines:
            f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return counts


def main():
    a = parse_args()
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    # Generated data is never committed: the directory ignores itself.
    with open(os.path.join(a.out, ".gitignore"), "w") as f:
        f.write("# written by scripts/make-sparse-libsvm.py; regenerate with `make sparse-data`\n*\n")
    rng = random.Random(a.seed)
    informative, weights = hidden_model(rng, a)
    for name, n in (("train.svm", a.rows), ("test.svm", a.test_rows)):
        path = os.path.join(a.out, name)
        counts = write_rows(path, n, rng, a, informative, weights)
        print("%s: %d rows, %d features, classes %s (%.0f MB)" % (
            path, n, a.features, counts, os.path.getsize(path) / 1e6))
    print("done in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    sys.exit(main())
