#!/usr/bin/env python3
"""Builds data/text/kjv-genesis-2kings.txt, the byte-level text corpus, from Debian's
King James Bible (packages bible-kjv-text 4.38, which holds the text, and bible-kjv
4.38, whose `bible` program reads it: apt-get install bible-kjv).

The package stores the text in its own compressed format (/usr/lib/bible.data, magic
"EC02"), so the script asks the package's own program for it:

    bible -l 100000 Gen1:1-2Ki25:30

prints Genesis 1:1 through 2 Kings 25:30 (the first twelve books, the "primary history"
from the creation to the exile) as a leading blank line, then per chapter a heading
("Genesis 1"), a blank line, its verses one per line as "  N text" (-l 100000: never
wrapped), and a blank line. The script keeps the headings and blank lines, drops the
verse numbers and their indentation (noise for a language model: they only count), and
drops the leading blank line. The result is plain ASCII, LF line ends, ending in one
newline: the same bytes every run (the program and its data are fixed by the package
version; the script checks both versions and the output's sha256).

Usage (python3 standard library only):
    python3 scripts/make-text-corpus.py [OUTPUT_FILE]
OUTPUT_FILE defaults to data/text/kjv-genesis-2kings.txt next to this script's parent
directory. Prints the size, the sha256, the unigram byte entropy (bits and nats) and the
cross-entropy of the training split's unigram on the validation split: the loss a
language model must beat to have learnt anything beyond letter frequencies.
"""
import collections
import hashlib
import math
import os
import re
import subprocess
import sys

PACKAGES = {"bible-kjv-text": "4.38", "bible-kjv": "4.38"}
RANGE = "Gen1:1-2Ki25:30"
# The committed file's sha256.
EXPECTED_SHA256 = "79a924dfdad12d50a991ce8f081939eb51778ca9cd68cb141a6f19a76e511be3"

VERSE = re.compile(rb"^ +[0-9]+ (.*)$")
HEADING = re.compile(rb"^[1-4]?[ A-Za-z]+ [0-9]+$")


def check_packages():
    for name, want in PACKAGES.items():
        try:
            have = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], check=True,
                                  capture_output=True, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            sys.exit(f"error: package {name} is not installed (apt-get install bible-kjv)")
        if have != want:
            print(f"warning: {name} is version {have}, expected {want}: the output may differ",
                  file=sys.stderr)


def build():
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    raw = subprocess.run(["bible", "-l", "100000", RANGE], check=True, capture_output=True,
                         env=env, stdin=subprocess.DEVNULL).stdout
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    while lines and lines[0] == b"":
        lines.pop(0)
    out = []
    for n, line in enumerate(lines, 1):
        m = VERSE.match(line)
        if m:
            out.append(m.group(1).rstrip(b" "))
        elif line == b"" or HEADING.match(line):
            out.append(line)
        else:
            sys.exit(f"error: line {n} of the bible output is neither a heading, a verse nor "
                     f"blank: {line[:60]!r}")
    text = b"\n".join(out) + b"\n"
    bad = [b for b in set(text) if not (32 <= b < 127 or b == 10)]
    if bad:
        sys.exit(f"error: the text holds bytes outside printable ASCII: {sorted(bad)}")
    return text


def entropy(data):
    counts = collections.Counter(data)
    n = len(data)
    h = -sum(c / n * math.log(c / n) for c in counts.values())
    return h / math.log(2), h, len(counts)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data", "text",
                                                              "kjv-genesis-2kings.txt")
    check_packages()
    text = build()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(text)
    sha = hashlib.sha256(text).hexdigest()
    bits, nats, distinct = entropy(text)
    cut = int(len(text) * 0.9)  # nanoGPT's split: the last 10% is validation
    train, val = text[:cut], text[cut:]
    counts = collections.Counter(train)
    # the loss of the best model that ignores context, fitted on train, measured on val
    cross = -sum(math.log(counts[b] / len(train)) for b in val) / len(val)
    print(f"{path}: {len(text)} bytes, {distinct} distinct, sha256 {sha}")
    print(f"unigram entropy: {bits:.4f} bits = {nats:.4f} nats per byte")
    print(f"train's unigram on the validation split (last 10%): {cross / math.log(2):.4f} "
          f"bits = {cross:.4f} nats per byte")
    if EXPECTED_SHA256 and sha != EXPECTED_SHA256:
        print(f"warning: sha256 differs from the committed file's {EXPECTED_SHA256}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
