#!/usr/bin/env python3
"""Writes data/spirals.csv: three interleaved spirals in the plane (x, y, label), the
classic toy problem a linear model cannot solve. Deterministic (fixed-seed LCG), stdlib
only. Usage: python3 scripts/make-spirals-csv.py [OUT]"""
import math
import sys

POINTS_PER_CLASS = 500
CLASSES = 3


def lcg(seed):
    state = seed
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        yield (state >> 11) / float(1 << 53)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "data/spirals.csv"
    rand = lcg(42)
    rows = []
    for c in range(CLASSES):
        for i in range(POINTS_PER_CLASS):
            r = i / POINTS_PER_CLASS
            t = c * 4.0 + 4.0 * r + 0.2 * (next(rand) * 2 - 1)
            rows.append((r * math.sin(t), r * math.cos(t), c))
    # A fixed shuffle so that a validation split sees every class.
    for i in range(len(rows) - 1, 0, -1):
        j = int(next(rand) * (i + 1))
        rows[i], rows[j] = rows[j], rows[i]
    with open(out, "w") as f:
        f.write("x,y,label\n")
        for x, y, c in rows:
            f.write(f"{x:.6f},{y:.6f},{c}\n")


if __name__ == "__main__":
    main()
