#!/usr/bin/env python3
"""Loads libweft.so with Python's ctypes (a host that did not link it) and computes.

    ctypes_host.py PATH/TO/libweft.so

Exit 0 on success, 77 (skipped) when this Python has no ctypes."""
import sys

try:
    import ctypes
except ImportError:
    sys.exit(77)


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int16), ("index", ctypes.c_int16)]


def main():
    lib = ctypes.CDLL(sys.argv[1])  # failed before ABI 2: "cannot allocate memory in static TLS block"
    lib.weft_arange.restype = ctypes.c_void_p
    lib.weft_arange.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_int, Device]
    lib.weft_sum.restype = ctypes.c_void_p
    lib.weft_sum.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_bool]
    lib.weft_tensor_item.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
    lib.weft_error_message.restype = ctypes.c_char_p
    f32 = 8  # WEFT_F32: dtype values are ABI (weft/dtype.h)
    lib.weft_scope_push()
    total = ctypes.c_double(-1)
    x = lib.weft_arange(0.0, 6.0, 1.0, f32, Device(0, 0))
    rc = lib.weft_tensor_item(lib.weft_sum(x, 0, None, False), ctypes.byref(total))
    lib.weft_scope_pop()
    if rc != 0 or total.value != 15.0:
        print("ctypes_host: sum(arange(6)) =", total.value, lib.weft_error_message().decode())
        return 1
    print("ctypes_host: libweft computed under Python's ctypes")
    return 0


sys.exit(main())
