/* weft/dtype_kernels.h: every dtype as an X-macro list, with typed load/store helpers, for
 * plugins that write a kernel once and expand it per dtype (header-only; not ABI).
 *
 *   #define DEFINE_NEG(name, id, S, C) \
 *       static void neg_##name(void *d, const void *s) { weft_store_##name(d, -weft_load_##name(s)); }
 *   WEFT_FOR_FLOATING_DTYPES(DEFINE_NEG)
 *
 * X(name, enum, storage type, compute type). 16-bit floats compute in float; bool loads
 * as "!= 0" and stores as 0 or 1, so arithmetic on it saturates as PyTorch's does.
 */
#ifndef WEFT_DTYPE_KERNELS_H
#define WEFT_DTYPE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/dtype.h"
#include "weft/half.h"

#define WEFT_FOR_INTEGRAL_DTYPES(X)                                                           \
    X(u8, WEFT_U8, uint8_t, uint8_t)                                                         \
    X(i8, WEFT_I8, int8_t, int8_t)                                                           \
    X(i16, WEFT_I16, int16_t, int16_t)                                                       \
    X(i32, WEFT_I32, int32_t, int32_t)                                                       \
    X(i64, WEFT_I64, int64_t, int64_t)

#define WEFT_FOR_FLOATING_DTYPES(X)                                                           \
    X(f16, WEFT_F16, uint16_t, float)                                                        \
    X(bf16, WEFT_BF16, uint16_t, float)                                                      \
    X(f32, WEFT_F32, float, float)                                                           \
    X(f64, WEFT_F64, double, double)

#define WEFT_FOR_ALL_DTYPES(X)                                                                \
    X(bool, WEFT_BOOL, bool, bool)                                                           \
    WEFT_FOR_INTEGRAL_DTYPES(X)                                                              \
    WEFT_FOR_FLOATING_DTYPES(X)

/* weft_load_<name>(const void *) -> compute type; weft_store_<name>(void *, compute type). */
#define WEFT_PLAIN_ACCESS_(name, T)                                                           \
    static inline T weft_load_##name(const void *p) { return *(const T *)p; }                \
    static inline void weft_store_##name(void *p, T v) { *(T *)p = v; }
WEFT_PLAIN_ACCESS_(u8, uint8_t)
WEFT_PLAIN_ACCESS_(i8, int8_t)
WEFT_PLAIN_ACCESS_(i16, int16_t)
WEFT_PLAIN_ACCESS_(i32, int32_t)
WEFT_PLAIN_ACCESS_(i64, int64_t)
WEFT_PLAIN_ACCESS_(f32, float)
WEFT_PLAIN_ACCESS_(f64, double)
#undef WEFT_PLAIN_ACCESS_
static inline bool weft_load_bool(const void *p) { return *(const uint8_t *)p != 0; }
static inline void weft_store_bool(void *p, bool v) { *(uint8_t *)p = v ? 1 : 0; }
static inline float weft_load_f16(const void *p) { return weft_f16_to_float(*(const uint16_t *)p); }
static inline void weft_store_f16(void *p, float v) { *(uint16_t *)p = weft_float_to_f16(v); }
static inline float weft_load_bf16(const void *p) { return weft_bf16_to_float(*(const uint16_t *)p); }
static inline void weft_store_bf16(void *p, float v) { *(uint16_t *)p = weft_float_to_bf16(v); }
/* `bool` is a macro (stdbool.h) that nested X-macro arguments expand to _Bool, so the
 * bool dtype's accessors also exist under that spelling. */
static inline bool weft_load__Bool(const void *p) { return weft_load_bool(p); }
static inline void weft_store__Bool(void *p, bool v) { weft_store_bool(p, v); }

#endif
