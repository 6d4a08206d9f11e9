"""PyTorch's OpenBLAS core type, for the bench/ scripts that run PyTorch beside weft.

Debian's PyTorch does its GEMMs in OpenBLAS, whose kernels follow the processor it
detects (OPENBLAS_CORETYPE overrides it), and the detected one is not always its
fastest: on a Sapphire Rapids VM it chose Cooperlake and trained the MNIST MLP at 23k
images/s, where SkylakeX gave 55k. A fair comparison runs PyTorch with its fastest, found
by a short calibration run under each candidate. weft's own OpenBLAS is left as detected:
weft measures its GEMM providers per shape itself."""

CORETYPES = "detected,Haswell,SkylakeX"


def with_coretype(env, coretype):
    """env (a dict) set for OpenBLAS core type `coretype` ("detected": unset)."""
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype != "detected":
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def fastest_coretype(measure, coretypes=CORETYPES):
    """The core type of coretypes ("A,B,...") for which measure(coretype) (a speed: higher
    is faster) is highest, and a line that shows each one's speed."""
    speeds = {c: measure(c) for c in coretypes.split(",")}
    best = max(speeds, key=speeds.get)
    return best, "PyTorch's OpenBLAS core type %s (calibration: %s)" % (
        best, ", ".join("%s %.0f" % kv for kv in speeds.items()))
