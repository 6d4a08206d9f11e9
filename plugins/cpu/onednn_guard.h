/* plugins/cpu/onednn_guard.h: oneDNN's C API as the plugin calls it. Include this instead
 * of <oneapi/dnnl/dnnl.h>.
 *
 * oneDNN is C++, and its C entry points let exceptions out: std::bad_alloc from operator
 * new, above all in the one-time JIT initialisation of its gemm kernels that the first
 * dnnl_sgemm of a kind runs (tens of thousands of allocations). One that reaches the
 * plugin's C frames ends the process (std::terminate: SIGABRT, with a checkpoint maybe
 * half kept). So every call that may allocate goes through a C++ wrapper of the same
 * signature (onednn_guard.cc) that returns dnnl_out_of_memory for std::bad_alloc and
 * dnnl_runtime_error for anything else thrown, on the thread that called it; the macros
 * below make each such call in the plugin's C files the guarded one, so none is missed.
 * cpu_onednn_error() then turns a status into weft's error, out of memory as such. */
#ifndef WEFT_CPU_ONEDNN_GUARD_H
#define WEFT_CPU_ONEDNN_GUARD_H

#include <oneapi/dnnl/dnnl.h>

#ifdef __cplusplus
extern "C" {
#endif

dnnl_status_t cpu_guarded_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                dnnl_dim_t K, float alpha, const float *A, dnnl_dim_t lda,
                                const float *B, dnnl_dim_t ldb, float beta, float *C,
                                dnnl_dim_t ldc);
dnnl_status_t cpu_guarded_engine_create(dnnl_engine_t *engine, dnnl_engine_kind_t kind,
                                        size_t index);
dnnl_status_t cpu_guarded_primitive_desc_create(dnnl_primitive_desc_t *pd,
                                                const_dnnl_op_desc_t op_desc,
                                                const_dnnl_primitive_attr_t attr,
                                                dnnl_engine_t engine,
                                                const_dnnl_primitive_desc_t hint);
dnnl_status_t cpu_guarded_reorder_primitive_desc_create(dnnl_primitive_desc_t *pd,
                                                        const dnnl_memory_desc_t *src_desc,
                                                        dnnl_engine_t src_engine,
                                                        const dnnl_memory_desc_t *dst_desc,
                                                        dnnl_engine_t dst_engine,
                                                        const_dnnl_primitive_attr_t attr);
dnnl_status_t cpu_guarded_primitive_create(dnnl_primitive_t *primitive,
                                           const_dnnl_primitive_desc_t pd);
dnnl_status_t cpu_guarded_primitive_execute(const_dnnl_primitive_t primitive,
                                            dnnl_stream_t stream, int nargs,
                                            const dnnl_exec_arg_t *args);
dnnl_status_t cpu_guarded_primitive_attr_create(dnnl_primitive_attr_t *attr);
dnnl_status_t cpu_guarded_memory_create(dnnl_memory_t *memory,
                                        const dnnl_memory_desc_t *memory_desc,
                                        dnnl_engine_t engine, void *handle);
dnnl_status_t cpu_guarded_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine,
                                        unsigned flags);
dnnl_status_t cpu_guarded_stream_wait(dnnl_stream_t stream);

/* weft's error for a failed oneDNN call: WEFT_ERR_OUT_OF_MEMORY "<what>: oneDNN ran out
 * of memory" for dnnl_out_of_memory, else WEFT_ERR_RUNTIME "<what> failed (status N)".
 * what is printf-formatted. Returns the code. */
int cpu_onednn_error(dnnl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#ifndef WEFT_CPU_ONEDNN_GUARD_IMPL
#define dnnl_sgemm cpu_guarded_sgemm
#define dnnl_engine_create cpu_guarded_engine_create
#define dnnl_primitive_desc_create cpu_guarded_primitive_desc_create
#define dnnl_reorder_primitive_desc_create cpu_guarded_reorder_primitive_desc_create
#define dnnl_primitive_create cpu_guarded_primitive_create
#define dnnl_primitive_execute cpu_guarded_primitive_execute
#define dnnl_primitive_attr_create cpu_guarded_primitive_attr_create
#define dnnl_memory_create cpu_guarded_memory_create
#define dnnl_stream_create cpu_guarded_stream_create
#define dnnl_stream_wait cpu_guarded_stream_wait
#endif

#endif
