# Sourced by the ONNX tests (onnx-export.sh, onnx-quant.sh) with $root set: finds the test
# peers, python3 with the onnx module (its checker) into $python and onnxruntime-node into
# WEFT_ONNXRUNTIME_NODE, or exits 77 (skipped) naming what is missing.
python=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import onnx' >/dev/null 2>&1; then python=$p; break; fi
done
[ -n "$python" ] || { echo "SKIP: no python3 with the onnx module (make onnx-deps)"; exit 77; }
export WEFT_ONNXRUNTIME_NODE="${WEFT_ONNXRUNTIME_NODE:-$root/build-onnx/node_modules}"
command -v node >/dev/null 2>&1 || { echo "SKIP: node is not installed (make onnx-deps)"; exit 77; }
NODE_PATH="$WEFT_ONNXRUNTIME_NODE" node -e "require('onnxruntime-node')" >/dev/null 2>&1 ||
    { echo "SKIP: onnxruntime-node not found in $WEFT_ONNXRUNTIME_NODE (make onnx-deps)"; exit 77; }
