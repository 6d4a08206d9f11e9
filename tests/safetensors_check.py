#!/usr/bin/env python3
"""tests/safetensors_check.py: an independent check of weft's safetensors files.

Usage: safetensors_check.py FILE...

For each file: validates it the way the Rust/Python `safetensors` library reads a file
(safetensors/src/tensor.rs: read_metadata + validate), then rebuilds the file the way its
writer would (`prepare`: entries sorted by descending dtype alignment then name,
"__metadata__" first, compact JSON, header padded with spaces to a multiple of 8) from the
decoded tensors and metadata, and requires the rebuilt bytes to equal the file's.
Standard library only. Exit status 0 when every file passes; otherwise 1 with the reason.
"""
import json
import struct
import sys

MAX_HEADER = 100_000_000

# safetensors' Dtype enum in declaration (= alignment) order, with element sizes in bits.
DTYPES = [
    ("BOOL", 8), ("F4", 4), ("F6_E2M3", 6), ("F6_E3M2", 6), ("U8", 8), ("I8", 8),
    ("F8_E5M2", 8), ("F8_E4M3", 8), ("F8_E8M0", 8), ("F8_E4M3FNUZ", 8), ("F8_E5M2FNUZ", 8),
    ("I16", 16), ("U16", 16), ("F16", 16), ("BF16", 16), ("I32", 32), ("U32", 32),
    ("F32", 32), ("C64", 64), ("F64", 64), ("I64", 64), ("U64", 64),
]
RANK = {name: i for i, (name, _) in enumerate(DTYPES)}
BITS = dict(DTYPES)


class Invalid(Exception):
    pass


def no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise Invalid(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def is_index(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read(path):
    """Returns (metadata or None, {name: (dtype, shape, bytes)}) or raises Invalid."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise Invalid("HeaderTooSmall")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER:
        raise Invalid("HeaderTooLarge")
    if 8 + n > len(buf):
        raise Invalid("InvalidHeaderLength")
    try:
        text = buf[8:8 + n].decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid(f"InvalidHeader: {e}")
    if not text.startswith("{"):
        raise Invalid("InvalidHeaderStart")
    try:
        header = json.loads(text, object_pairs_hook=no_duplicates)
    except ValueError as e:
        raise Invalid(f"InvalidHeaderDeserialization: {e}")
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise Invalid("__metadata__ must map strings to strings")
    infos = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise Invalid(f"{name}: entry must have exactly dtype, shape, data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in RANK:
            raise Invalid(f"{name}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(is_index(d) for d in shape):
            raise Invalid(f"{name}: bad shape {shape!r}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(is_index, offsets)):
            raise Invalid(f"{name}: bad data_offsets {offsets!r}")
        infos.append((tuple(offsets), name, dtype, shape))
    infos.sort(key=lambda x: x[0])
    start = 0
    data = buf[8 + n:]
    tensors = {}
    for (begin, end), name, dtype, shape in infos:
        if begin != start or end < begin:
            raise Invalid(f"InvalidOffset({name})")
        numel = 1
        for d in shape:
            numel *= d
        if (end - begin) * 8 != numel * BITS[dtype]:
            raise Invalid(f"TensorInvalidInfo({name})")
        tensors[name] = (dtype, shape, data[begin:end])
        start = end
    if 8 + n + start != len(buf):
        raise Invalid("MetadataIncompleteBuffer")
    return metadata, tensors


def write(metadata, tensors):
    """The bytes safetensors' serialize() produces for these tensors and metadata."""
    order = sorted(tensors, key=lambda name: (-RANK[tensors[name][0]], name.encode("utf-8")))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name in order:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(tensors[name][2] for name in order)


def main(paths):
    status = 0
    for path in paths:
        try:
            metadata, tensors = read(path)
        except (Invalid, OSError) as e:
            print(f"{path}: rejected: {e}")
            status = 1
            continue
        with open(path, "rb") as f:
            actual = f.read()
        expected = write(metadata, tensors)
        if actual != expected:
            at = next((i for i, (a, b) in enumerate(zip(actual, expected)) if a != b),
                      min(len(actual), len(expected)))
            print(f"{path}: differs from what the safetensors writer makes, first at byte {at}")
            print(f"  file:     {actual[max(0, at - 24):at + 24]!r}")
            print(f"  expected: {expected[max(0, at - 24):at + 24]!r}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
