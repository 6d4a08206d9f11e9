#!/usr/bin/env python3
"""weft and PyTorch exchange tensors through DLPack without copies, both ways: a weft
tensor wrapped in a PyCapsule named "dltensor" (what torch.utils.dlpack.from_dlpack
takes), and a torch tensor's capsule imported with weft_from_dlpack.

    dlpack_torch.py PATH/TO/libweft.so

Exit 0 on success, 77 (skipped) when this Python has no torch, 1 on a failure."""
import ctypes
import sys

try:
    import torch
    import torch.utils.dlpack
except ImportError:
    print("dlpack_torch: skipped: python3 has no torch")
    sys.exit(77)


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int16), ("index", ctypes.c_int16)]


CPU = Device(0, 0)
# weft/dtype.h values (ABI)
W = {"bool": 0, "u8": 1, "i8": 2, "i16": 3, "i32": 4, "i64": 5, "f16": 6, "bf16": 7,
     "f32": 8, "f64": 9}
TORCH = {"bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "i16": torch.int16,
         "i32": torch.int32, "i64": torch.int64, "f16": torch.float16,
         "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}

lib = ctypes.CDLL(sys.argv[1])
vp = ctypes.c_void_p
for name, res, args in [
        ("weft_arange", vp, [ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_int, Device]),
        ("weft_view", vp, [vp, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]),
        ("weft_transpose", vp, [vp, ctypes.c_int, ctypes.c_int]),
        ("weft_to_dtype", vp, [vp, ctypes.c_int]),
        ("weft_to_dlpack", vp, [vp]),
        ("weft_from_dlpack", vp, [vp]),
        ("weft_tensor_data", vp, [vp]),
        ("weft_tensor_ndim", ctypes.c_int, [vp]),
        ("weft_tensor_shape", ctypes.POINTER(ctypes.c_int64), [vp]),
        ("weft_tensor_strides", ctypes.POINTER(ctypes.c_int64), [vp]),
        ("weft_tensor_dtype", ctypes.c_int, [vp]),
        ("weft_tensor_release", None, [vp]),
        ("weft_error_message", ctypes.c_char_p, []),
]:
    f = getattr(lib, name)
    f.restype, f.argtypes = res, args

py = ctypes.pythonapi
py.PyCapsule_New.restype = ctypes.py_object
py.PyCapsule_New.argtypes = [vp, ctypes.c_char_p, vp]
py.PyCapsule_GetPointer.restype = vp
py.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
py.PyCapsule_SetName.restype = ctypes.c_int
py.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
py.PyCapsule_IsValid.restype = ctypes.c_int
py.PyCapsule_IsValid.argtypes = [vp, ctypes.c_char_p]
py.PyCapsule_GetPointer.restype = vp


class DLManagedTensorHead(ctypes.Structure):
    # DLTensor is 48 bytes on LP64 (data 8, device 8, ndim 4, dtype 4, shape 8, strides 8,
    # byte_offset 8); manager_ctx and deleter follow it.
    _fields_ = [("dl_tensor", ctypes.c_byte * 48), ("manager_ctx", vp),
                ("deleter", ctypes.CFUNCTYPE(None, vp))]


# The DLPack rule for an unconsumed capsule: its destructor calls the deleter; once a
# consumer took it, it is renamed "used_dltensor" and the destructor does nothing.
@ctypes.CFUNCTYPE(None, vp)
def capsule_destructor(capsule):
    if py.PyCapsule_IsValid(capsule, b"dltensor"):
        ptr = ctypes.pythonapi.PyCapsule_GetPointer(ctypes.cast(capsule, ctypes.py_object), b"dltensor")
        m = DLManagedTensorHead.from_address(ptr)
        m.deleter(ptr)


def to_capsule(t):
    m = lib.weft_to_dlpack(t)
    if not m:
        raise RuntimeError(lib.weft_error_message().decode())
    return py.PyCapsule_New(m, b"dltensor", ctypes.cast(capsule_destructor, vp))


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("dlpack_torch: FAIL:", what)


def weft_tensor(values_end, shape, dt="f32"):
    x = lib.weft_arange(0.0, float(values_end), 1.0, W["f64"], CPU)
    arr = (ctypes.c_int64 * len(shape))(*shape)
    v = lib.weft_view(x, len(shape), arr)
    y = lib.weft_to_dtype(v, W[dt])
    lib.weft_tensor_release(x)
    lib.weft_tensor_release(v)
    return y


# 1. weft -> torch: same memory, same values, a write on one side seen on the other.
w = weft_tensor(6, [2, 3])
t = torch.utils.dlpack.from_dlpack(to_capsule(w))
check(t.data_ptr() == lib.weft_tensor_data(w), "torch's data_ptr is weft's data (no copy)")
check(torch.equal(t, torch.arange(6, dtype=torch.float32).view(2, 3)), "values weft -> torch")
t[1, 2] = 100.0
check(ctypes.cast(lib.weft_tensor_data(w), ctypes.POINTER(ctypes.c_float))[5] == 100.0,
      "a write through torch is seen by weft")
lib.weft_tensor_release(w)  # torch keeps the storage alive through the deleter
check(t[1, 2].item() == 100.0 and t[0, 1].item() == 1.0, "torch's tensor outlives weft's reference")
del t

# 2. strides: a transposed weft view arrives with the same strides.
w = weft_tensor(12, [3, 4])
wt = lib.weft_transpose(w, 0, 1)
t = torch.utils.dlpack.from_dlpack(to_capsule(wt))
check(t.shape == (4, 3) and t.stride() == (1, 4), "strides weft -> torch: %s" % (t.stride(),))
check(torch.equal(t, torch.arange(12, dtype=torch.float32).view(3, 4).t()), "transposed values")
lib.weft_tensor_release(wt)
lib.weft_tensor_release(w)
del t

# 3. dtypes. PyTorch 1.13's DLPack (0.6) has no kDLBool: bool only from PyTorch 2.
dtypes = ["u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f64"]
if int(torch.__version__.split(".")[0]) >= 2:
    dtypes.append("bool")
for dt in dtypes:
    w = weft_tensor(4, [4], dt)
    t = torch.utils.dlpack.from_dlpack(to_capsule(w))
    check(t.dtype == TORCH[dt], "dtype %s -> %s" % (dt, t.dtype))
    check(torch.equal(t, torch.arange(4).to(TORCH[dt])), "values of %s" % dt)
    lib.weft_tensor_release(w)
    del t

# 4. torch -> weft: the capsule's pointer goes to weft_from_dlpack, the capsule is renamed
# so that it does not free what weft now owns, and torch's writes show in weft.
src = torch.arange(20, dtype=torch.float64).view(4, 5)[1:, ::2]  # offset and strides
cap = torch.utils.dlpack.to_dlpack(src)
w = lib.weft_from_dlpack(py.PyCapsule_GetPointer(cap, b"dltensor"))
check(bool(w), "weft_from_dlpack of torch's tensor: %s" % lib.weft_error_message())
py.PyCapsule_SetName(cap, b"used_dltensor")
del cap
if w:
    shape = lib.weft_tensor_shape(w)
    strides = lib.weft_tensor_strides(w)
    check(lib.weft_tensor_ndim(w) == 2 and (shape[0], shape[1]) == (3, 3), "shape torch -> weft")
    check((strides[0], strides[1]) == (5, 2), "strides torch -> weft")
    check(lib.weft_tensor_dtype(w) == W["f64"], "dtype torch -> weft")
    check(lib.weft_tensor_data(w) == src.data_ptr(), "weft's data is torch's (no copy)")
    src[2, 1] = -7.0
    data = ctypes.cast(lib.weft_tensor_data(w), ctypes.POINTER(ctypes.c_double))
    check(data[2 * 5 + 1 * 2] == -7.0, "a write through torch is seen by weft")
    del src  # weft's reference keeps torch's storage alive
    check(data[0] == 5.0, "weft's tensor outlives torch's")
    lib.weft_tensor_release(w)  # calls torch's deleter

if failures:
    sys.exit(1)
print("dlpack_torch: ok (torch %s)" % torch.__version__)
