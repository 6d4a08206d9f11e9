// plugins/cpu/onednn_guard.cc: the plugin's C++ boundary with oneDNN (onednn_guard.h): each
// wrapper calls oneDNN's C entry point of the same signature inside try/catch, so that an
// exception becomes a status on the calling thread instead of std::terminate.
#define WEFT_CPU_ONEDNN_GUARD_IMPL
#include "onednn_guard.h"

#include <new>

// The status of f(), or what it threw as one.
template <typename F> static dnnl_status_t guarded(F f) noexcept
{
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return dnnl_out_of_memory;
    } catch (...) {
        return dnnl_runtime_error;
    }
}

extern "C" {

dnnl_status_t cpu_guarded_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                dnnl_dim_t K, float alpha, const float *A, dnnl_dim_t lda,
                                const float *B, dnnl_dim_t ldb, float beta, float *C,
                                dnnl_dim_t ldc)
{
    return guarded([&] {
        return dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    });
}

dnnl_status_t cpu_guarded_engine_create(dnnl_engine_t *engine, dnnl_engine_kind_t kind,
                                        size_t index)
{
    return guarded([&] { return dnnl_engine_create(engine, kind, index); });
}

dnnl_status_t cpu_guarded_primitive_desc_create(dnnl_primitive_desc_t *pd,
                                                const_dnnl_op_desc_t op_desc,
                                                const_dnnl_primitive_attr_t attr,
                                                dnnl_engine_t engine,
                                                const_dnnl_primitive_desc_t hint)
{
    return guarded([&] { return dnnl_primitive_desc_create(pd, op_desc, attr, engine, hint); });
}

dnnl_status_t cpu_guarded_reorder_primitive_desc_create(dnnl_primitive_desc_t *pd,
                                                        const dnnl_memory_desc_t *src_desc,
                                                        dnnl_engine_t src_engine,
                                                        const dnnl_memory_desc_t *dst_desc,
                                                        dnnl_engine_t dst_engine,
                                                        const_dnnl_primitive_attr_t attr)
{
    return guarded([&] {
        return dnnl_reorder_primitive_desc_create(pd, src_desc, src_engine, dst_desc,
                                                  dst_engine, attr);
    });
}

dnnl_status_t cpu_guarded_primitive_create(dnnl_primitive_t *primitive,
                                           const_dnnl_primitive_desc_t pd)
{
    return guarded([&] { return dnnl_primitive_create(primitive, pd); });
}

dnnl_status_t cpu_guarded_primitive_execute(const_dnnl_primitive_t primitive,
                                            dnnl_stream_t stream, int nargs,
                                            const dnnl_exec_arg_t *args)
{
    return guarded([&] { return dnnl_primitive_execute(primitive, stream, nargs, args); });
}

dnnl_status_t cpu_guarded_primitive_attr_create(dnnl_primitive_attr_t *attr)
{
    return guarded([&] { return dnnl_primitive_attr_create(attr); });
}

dnnl_status_t cpu_guarded_memory_create(dnnl_memory_t *memory,
                                        const dnnl_memory_desc_t *memory_desc,
                                        dnnl_engine_t engine, void *handle)
{
    return guarded([&] { return dnnl_memory_create(memory, memory_desc, engine, handle); });
}

dnnl_status_t cpu_guarded_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine,
                                        unsigned flags)
{
    return guarded([&] { return dnnl_stream_create(stream, engine, flags); });
}

dnnl_status_t cpu_guarded_stream_wait(dnnl_stream_t stream)
{
    return guarded([&] { return dnnl_stream_wait(stream); });
}

} // extern "C"
