#!/usr/bin/env python3
"""Checks an ONNX file weft-train exported, as the issue that asked for the exporter does:
onnx.checker.check_model(path, full_check=True) under Debian's python3-onnx, the IR and
opset versions, the input and output names with their symbolic dims, and that every
initializer is a tensor of the checkpoint under its state_dict name, or one the exporter
derived (named "<module>.onnx.<what>").

    onnx_check.py MODEL.onnx CHECKPOINT.safetensors OPSET INPUT:DIMS OUTPUT:DIMS [--no-op OP]

DIMS is a comma-separated list of sizes and symbolic names ("batch,1,28,28"); several
inputs are given as one argument joined by '+'. --no-op fails when the graph has an OP
node (a BatchNorm folded away). Exit 0 when all hold, 1 with what does not; 77 when
python3 has no onnx module."""
import json
import struct
import sys

try:
    import onnx
except ImportError:
    print("onnx_check: python3 has no onnx module (Debian's python3-onnx): skipped")
    sys.exit(77)


def dims(value_info):
    return ",".join(d.dim_param or str(d.dim_value) for d in value_info.type.tensor_type.shape.dim)


def state_dict_names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k for k in header if k != "__metadata__"}


def main():
    args = sys.argv[1:]
    banned = []
    while "--no-op" in args:
        i = args.index("--no-op")
        banned.append(args[i + 1])
        del args[i:i + 2]
    model_path, ckpt, opset, inputs, output = args
    problems = []
    m = onnx.load(model_path)
    checker = "checker (full_check) ok"
    if int(opset) <= onnx.defs.onnx_opset_version():
        onnx.checker.check_model(model_path, full_check=True)
    else:  # the installed onnx cannot judge an opset newer than its own
        checker = "checker skipped (onnx %s knows opsets up to %d)" % (
            onnx.__version__, onnx.defs.onnx_opset_version())
    want_ir = 8 if int(opset) <= 18 else 9 if int(opset) <= 20 else 10
    if m.ir_version != want_ir:
        problems.append("ir_version %d, expected %d" % (m.ir_version, want_ir))
    got_opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    if got_opset != [int(opset)]:
        problems.append("opset %s, expected %s" % (got_opset, opset))
    got_in = "+".join("%s:%s" % (i.name, dims(i)) for i in m.graph.input)
    if got_in != inputs:
        problems.append("inputs %s, expected %s" % (got_in, inputs))
    got_out = "+".join("%s:%s" % (o.name, dims(o)) for o in m.graph.output)
    if got_out != output:
        problems.append("outputs %s, expected %s" % (got_out, output))
    names = state_dict_names(ckpt)
    for t in m.graph.initializer:
        if t.name not in names and ".onnx." not in "." + t.name:
            problems.append("initializer %s is neither a state_dict name nor a derived one"
                            % t.name)
    ops = {n.op_type for n in m.graph.node}
    for op in banned:
        if op in ops:
            problems.append("the graph still has a %s node" % op)
    for p in problems:
        print("onnx_check: %s: %s" % (model_path, p))
    if problems:
        return 1
    print("onnx_check: %s: %s, IR %d, opset %s, %s -> %s, %d initializers, "
          "%d nodes" % (model_path, checker, m.ir_version, opset, got_in, got_out,
                        len(m.graph.initializer), len(m.graph.node)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
