/* plugins/cpu/cpu.h: what the CPU plugin's files share (not installed, not ABI). */
#ifndef WEFT_CPU_H
#define WEFT_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include <weft.h>
#include <weft/backend.h>
#include <weft/half.h>
#include <weft/kernel.h>

/* ---- kernel families: each registers its kernels for device type cpu ---------------- */
int cpu_register_copy_kernels(void);
int cpu_register_fill_kernels(void);   /* fill, arange, linspace */
int cpu_register_random_kernels(void); /* rand_uniform, rand_normal, randint */
int cpu_register_unary_kernels(void);
int cpu_register_binary_kernels(void); /* binary, where, clamp */
int cpu_register_reduce_kernels(void);
int cpu_register_softmax_kernels(void);
int cpu_register_matmul_kernels(void);
int cpu_register_index_kernels(void);
int cpu_register_conv_kernels(void); /* im2col, col2im */
int cpu_register_pool_kernels(void); /* max/avg pool2d and their backward */

/* ---- memory (allocator.c) ---------------------------------------------------------- */
void *cpu_alloc(int index, size_t nbytes);
void cpu_free(int index, void *ptr, size_t nbytes);
int cpu_memory_stats(int index, struct weft_memory_stats *out);
void cpu_empty_cache(int index);

/* ---- threads -------------------------------------------------------------------------- */
int cpu_num_threads(void);
/* Below this many elements a loop runs on the calling thread: waking the pool costs
 * more than the work. */
#define CPU_PARALLEL_GRAIN 32768
/* Runs fn(ctx, begin, end) over [0, n) in chunks, in parallel when n >= grain and we are
 * not already inside a parallel region. */
void cpu_parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t begin, int64_t end),
                      void *ctx);
/* Runs an iterator's loop over all its elements, split across threads when large. */
void cpu_iter_parallel(const struct weft_iter *it, weft_iter_loop_fn loop, void *ctx);

/* ---- dtypes ----------------------------------------------------------------------------
 * X(name, enum, storage type, compute type). 16-bit floats compute in float. Kernels are
 * written once against these and expanded per dtype, never pasted. */
#define CPU_FOR_ALL_DTYPES(X)                                                                 \
    X(bool, WEFT_BOOL, bool, bool)                                                           \
    X(u8, WEFT_U8, uint8_t, uint8_t)                                                         \
    X(i8, WEFT_I8, int8_t, int8_t)                                                           \
    X(i16, WEFT_I16, int16_t, int16_t)                                                       \
    X(i32, WEFT_I32, int32_t, int32_t)                                                       \
    X(i64, WEFT_I64, int64_t, int64_t)                                                       \
    X(f16, WEFT_F16, uint16_t, float)                                                        \
    X(bf16, WEFT_BF16, uint16_t, float)                                                      \
    X(f32, WEFT_F32, float, float)                                                           \
    X(f64, WEFT_F64, double, double)

#define CPU_FOR_INTEGRAL_DTYPES(X)                                                            \
    X(u8, WEFT_U8, uint8_t, uint8_t)                                                         \
    X(i8, WEFT_I8, int8_t, int8_t)                                                           \
    X(i16, WEFT_I16, int16_t, int16_t)                                                       \
    X(i32, WEFT_I32, int32_t, int32_t)                                                       \
    X(i64, WEFT_I64, int64_t, int64_t)

#define CPU_FOR_FLOATING_DTYPES(X)                                                            \
    X(f16, WEFT_F16, uint16_t, float)                                                        \
    X(bf16, WEFT_BF16, uint16_t, float)                                                      \
    X(f32, WEFT_F32, float, float)                                                           \
    X(f64, WEFT_F64, double, double)

/* cpu_load_<name>(const void *) -> compute type; cpu_store_<name>(void *, compute type). */
#define CPU_PLAIN_ACCESS(name, T)                                                             \
    static inline T cpu_load_##name(const void *p) { return *(const T *)p; }                 \
    static inline void cpu_store_##name(void *p, T v) { *(T *)p = v; }
CPU_PLAIN_ACCESS(u8, uint8_t)
CPU_PLAIN_ACCESS(i8, int8_t)
CPU_PLAIN_ACCESS(i16, int16_t)
CPU_PLAIN_ACCESS(i32, int32_t)
CPU_PLAIN_ACCESS(i64, int64_t)
CPU_PLAIN_ACCESS(f32, float)
CPU_PLAIN_ACCESS(f64, double)
#undef CPU_PLAIN_ACCESS
static inline bool cpu_load_bool(const void *p) { return *(const uint8_t *)p != 0; }
static inline void cpu_store_bool(void *p, bool v) { *(uint8_t *)p = v ? 1 : 0; }
static inline float cpu_load_f16(const void *p) { return weft_f16_to_float(*(const uint16_t *)p); }
static inline void cpu_store_f16(void *p, float v) { *(uint16_t *)p = weft_float_to_f16(v); }
static inline float cpu_load_bf16(const void *p) { return weft_bf16_to_float(*(const uint16_t *)p); }
static inline void cpu_store_bf16(void *p, float v) { *(uint16_t *)p = weft_float_to_bf16(v); }

/* `bool` is a macro (stdbool.h) that nested X-macro arguments expand to _Bool, so the
 * bool dtype's accessors also exist under that spelling. */
static inline bool cpu_load__Bool(const void *p) { return cpu_load_bool(p); }
static inline void cpu_store__Bool(void *p, bool v) { cpu_store_bool(p, v); }

/* Runs loop over ops[0..nops) (out first, all of one shape; itemsize[k] is operand k's):
 * as flat arrays when every operand is contiguous, else through the core's iterator, in
 * parallel above CPU_PARALLEL_GRAIN (kernels_binary.c). */
int cpu_elementwise_run(int nops, const weft_tensor *const *ops, const int64_t *itemsize,
                        weft_iter_loop_fn loop, void *ctx);

/* Any dtype as double, and double into any dtype (C conversion rules; bool is != 0). */
double cpu_load_as_double(enum weft_dtype dt, const void *p);
void cpu_store_from_double(enum weft_dtype dt, void *p, double v);

#endif
