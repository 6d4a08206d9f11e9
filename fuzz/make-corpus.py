#!/usr/bin/env python3
"""fuzz/make-corpus.py: writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/):
a few small valid files of each format and a few malformed ones. The seeds are committed;
run this again only to change them. The plugin-file seeds (fuzz_plugin_file/*.elf) are a
build's test fixture, whole, cut and stripped: copied by hand, not written here.

Dataset inputs start with a control byte that picks the reader's keys (FUZZ_CONTROL in
fuzz/meson.build; 0: the first choice of each) or with "#keys\\n...#end\\n" (keys for the
[data] section), and may hold a second file after "\\n#file2\\n" (the labels of idx and
npy): see fuzz_dataset.c."""
import gzip
import json
import os
import struct

C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def w(target, name, data):
    d = os.path.join(C, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def wd(target, name, data, control=0):
    """A dataset input: the control byte, then the file(s); "#keys" inputs as they are."""
    data = data.encode() if isinstance(data, str) else data
    w(target, name, data if data.startswith(b"#keys\n") else bytes([control]) + data)


def gz(data):
    return gzip.compress(data, mtime=0)  # the same bytes at every run


def ini():
    w("fuzz_ini", "mlp.ini", "; a small model\n[runtime]\nseed = 1\nthreads = 2\n\n[data]\n"
      "reader = synthetic\nkind = blobs\nsamples = 60\nbatch_size = 10\n\n[layer.fc1]\n"
      "type = linear\nin_features = 2\nout_features = 3\n\n[optimizer]\ntype = sgd\n"
      "lr = 0.1\nmilestones = 1, 2,\n  3\n")
    w("fuzz_ini", "crlf.ini", "[train]\r\nepochs = 2\r\n\r\n[model]\r\nname = x ; comment\r\n")
    w("fuzz_ini", "many-crs.ini", "[runtime]\nseed = 0" + "\r" * 400 + "\n")
    w("fuzz_ini", "typo.ini", "[dta]\nreder = idx\n[data]\nimages = a\n")
    w("fuzz_ini", "bad.ini", "[model\nno equals here\n= value\n[a]\nk = v\nk = w\n")
    w("fuzz_ini", "binary.ini", b"\x7fELF\x02\x01\x01\x00\x00\x00[a]\nx=1\n")


def idx_file(code, dims, payload):
    return (struct.pack(">BBBB", 0, 0, code, len(dims)) +
            b"".join(struct.pack(">I", d) for d in dims) + payload)


def idx():
    images = idx_file(8, [3, 2, 2], bytes(range(12)))
    labels = idx_file(8, [3], bytes([0, 1, 2]))
    t = "fuzz_dataset_idx"
    wd(t, "images-labels", images + b"\n#file2\n" + labels)
    wd(t, "images-only", images)
    wd(t, "float32", idx_file(0x0D, [2, 3], struct.pack(">6f", *range(6))))
    wd(t, "gzip", gz(images) + b"\n#file2\n" + gz(labels))
    wd(t, "short", images[:-3])
    wd(t, "keys", b"#keys\nnum_classes = 3\n#end\n" + images + b"\n#file2\n" + labels)


def csv():
    t = "fuzz_dataset_csv"
    wd(t, "header", "#keys\nlabel_column = y\n#end\na,b,y\n1,2.5,0\n-3e2,4,1\n")
    wd(t, "noheader", "#keys\nheader = false\nlabel_column = 0\ndelimiter = semicolon\n#end\n"
      "1;0.5;7\n0;1;2\n")
    wd(t, "features", "x,y\n1,2\n3,4\n")
    wd(t, "crlf-quoted", "a,b\r\n\"1\",2\r\n3,nan\r\n")
    wd(t, "ragged", "a,b,c\n1,2\n")
    # header = false, label_column = 0, delimiter = semicolon (control bits: 1, 001, 01, 00)
    wd(t, "control-noheader", "1;0.5;7\n0;1;2\n", control=0x13)
    # label_column = y, num_classes = 2, delimiter = pipe
    wd(t, "control-label", "a|b|y\n1|2|0\n3|4|1\n", control=0x4 << 1 | 0x3 << 4 | 0x1 << 6)


def npy_file(descr, shape, payload, fortran=False, version=1):
    h = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", repr(tuple(shape)))
    pre = 10 if version == 1 else 12
    h += " " * ((64 - (pre + len(h) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + size + h.encode() + payload


def npy():
    t = "fuzz_dataset_npy"
    feat = npy_file("<f4", [3, 2], struct.pack("<6f", *[0.5 * i for i in range(6)]))
    lab = npy_file("<i8", [3], struct.pack("<3q", 0, 1, 1))
    wd(t, "features-labels", feat + b"\n#file2\n" + lab)
    wd(t, "fortran-bigendian", npy_file(">f8", [2, 3], struct.pack(">6d", *range(6)), True))
    wd(t, "v2-u8", npy_file("|u1", [4, 2, 2], bytes(range(16)), version=2))
    wd(t, "truncated", feat[:-5])


def mtx():
    t = "fuzz_dataset_mtx"
    wd(t, "real", "%%MatrixMarket matrix coordinate real general\n% comment\n3 4 4\n1 1 1.5\n"
      "1 4 -2\n2 2 3\n3 1 1e-3\n")
    wd(t, "symmetric", "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n"
      "2 1 2\n3 2 3\n")
    wd(t, "pattern", "%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 2\n2 1\n")
    wd(t, "integer-gz", gz(b"%%MatrixMarket matrix coordinate integer general\n"
                                     b"2 3 2\n1 3 7\n2 1 -1\n"))
    wd(t, "bad-count", "%%MatrixMarket matrix coordinate real general\n2 2 5\n1 1 1\n")


def libsvm():
    t = "fuzz_dataset_libsvm"
    wd(t, "classes", "2 1:0.5 3:1.25 # c\n0 2:1\n\n1 1:-1 4:2e-3\n")
    wd(t, "plusminus", "+1 1:1\n-1 2:1 3:0.5\n")
    wd(t, "zero-based", "#keys\nzero_based = true\nfeatures = 5\n#end\n0 0:1 4:2\n1 1:1\n")
    wd(t, "huge-label", "0 1:1\n9223372036854775807 2:1\n")
    wd(t, "crlf", "1 1:1\r\n0 2:1\r\n")


def text():
    t = "fuzz_dataset_text"
    wd(t, "genesis", "In the beginning God created the heaven and the earth.\n"
      "And the earth was without form.\n")
    wd(t, "split", "#keys\nsplit = val\nval_fraction = 0.25\n#end\n"
      "abcdefghijklmnopqrstuvwxyz0123456789")
    wd(t, "tiny", "abc")
    wd(t, "empty", "")  # once NULL + 0 in token_stream.c (UBSan)
    # block_size = 2, split = val, val_fraction = 0.5 (control bits: 010, 1, 01)
    wd(t, "control-val", "abcdefghijklmnopqrstuvwxyz", control=0x2 | 1 << 3 | 1 << 4)


def tokens_file(toks, count=None, version=1, magic=20240520):
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, len(toks) if count is None else count
    return struct.pack("<256i", *h) + struct.pack("<%dH" % len(toks), *toks)


def tokens():
    t = "fuzz_dataset_tokens"
    wd(t, "ok", tokens_file(list(range(1, 21))))
    wd(t, "split", b"#keys\nsplit = val\nval_fraction = 0.5\n#end\n" + tokens_file(list(range(40))))
    wd(t, "bad-count", tokens_file([1, 2, 3], count=9))
    wd(t, "big-token", tokens_file([1, 299, 300, 2, 3, 4, 5, 6, 7]))
    wd(t, "empty", b"")
    # vocab_size = 65536, split = val (control bits: 000, 100, 1)
    wd(t, "control-vocab", tokens_file(list(range(0, 4000, 97))), control=0x4 << 3 | 1 << 6)


def st_file(tensors, meta=None, raw_header=None):
    h, data = {}, b""
    for name, (dt, shape, payload) in tensors.items():
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if meta is not None:
        h["__metadata__"] = meta
    hb = raw_header if raw_header is not None else json.dumps(h).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + data


def safetensors():
    t = "fuzz_safetensors"
    w(t, "two", st_file({"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                         "b": ("I64", [2], struct.pack("<2q", 5, -6))}, {"weft.epoch": "2"}))
    w(t, "dtypes", st_file({"h": ("F16", [3], b"\x00\x3c" * 3), "bf": ("BF16", [1], b"\x80\x3f"),
                            "u": ("U8", [4], b"abcd"), "z": ("BOOL", [0], b""),
                            "s": ("F64", [], struct.pack("<d", 1.5))}))
    w(t, "empty", st_file({}))
    w(t, "overlap", st_file({}, raw_header=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                           b'"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}')
      + b"\0" * 4)
    w(t, "bad-json", struct.pack("<Q", 10) + b'{"a":[1,,}')


if __name__ == "__main__":
    for make in (ini, idx, csv, npy, mtx, libsvm, text, tokens, safetensors):
        make()
