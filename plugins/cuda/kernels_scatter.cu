/* plugins/cuda/kernels_scatter.cu: SCATTER and SCATTER_REDUCE (weft/kernel.h).
 *
 * SCATTER runs one thread per index element (of duplicates, whichever writes last wins,
 * as PyTorch's CUDA kernel leaves it). SCATTER_REDUCE runs the cpu plugin's walk on one
 * thread, in the index's row-major order (kernels_scatter.c): slow, but the same order,
 * so the same sums and the same winners as the cpu, with no atomics per dtype. Out-of-range
 * indices are skipped by the kernels and counted in a device flag the host reads back
 * (one synchronisation) to fail with PyTorch's text. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

struct Geom {
    int ndim, dim;
    int64_t shape[WEFT_MAX_DIMS];                          /* the index's */
    int64_t sidx[WEFT_MAX_DIMS], ssrc[WEFT_MAX_DIMS], sself[WEFT_MAX_DIMS]; /* elements */
    int64_t self_shape[WEFT_MAX_DIMS];
    int64_t size; /* self's size along dim */
};

/* Offsets of index element e (row-major over the index's shape); *pos its coordinates. */
__device__ __forceinline__ void offsets(const Geom &g, int64_t e, int64_t *io, int64_t *so,
                                        int64_t *to, int64_t *pos)
{
    *io = *so = *to = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
        int64_t p = e % g.shape[d];
        e /= g.shape[d];
        pos[d] = p;
        *io += p * g.sidx[d];
        *so += p * g.ssrc[d];
        if (d != g.dim)
            *to += p * g.sself[d];
    }
}

/* ---- SCATTER: by element size ------------------------------------------------------------ */

template <typename T>
__global__ void scatter_kernel(Geom g, int64_t n, const int64_t *idx, const T *src, T value,
                               T *self, unsigned long long *bad)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
        int64_t io, so, to, pos[WEFT_MAX_DIMS];
        offsets(g, e, &io, &so, &to, pos);
        int64_t i = idx[io];
        if (i < 0 || i >= g.size) {
            atomicAdd(bad, 1ull);
            continue;
        }
        self[to + i * g.sself[g.dim]] = src ? src[so] : value;
    }
}

/* ---- SCATTER_REDUCE: one thread, row-major ------------------------------------------------- */

enum { R_SUM, R_PROD, R_MEAN, R_AMAX, R_AMIN };

template <typename C> __device__ __forceinline__ bool is_nan(C v)
{
    if constexpr (std::is_floating_point<C>::value)
        return v != v;
    else
        return false;
}

template <typename C> __device__ __forceinline__ C identity(int reduce)
{
    if (reduce == R_PROD)
        return C(1);
    if constexpr (std::is_floating_point<C>::value) {
        if (reduce == R_AMAX)
            return -INFINITY;
        if (reduce == R_AMIN)
            return INFINITY;
    } else {
        /* two's complement extremes; unsigned types run from 0 to all ones */
        const uint64_t top = (uint64_t)1 << (sizeof(C) * 8 - 1);
        if (reduce == R_AMAX)
            return std::is_signed<C>::value ? (C)top : (C)0;
        if (reduce == R_AMIN)
            return std::is_signed<C>::value ? (C)(top - 1) : (C)~(uint64_t)0;
    }
    return C(0);
}

template <typename C> __device__ __forceinline__ C combine(int reduce, C a, C b)
{
    switch (reduce) {
    case R_PROD:
        if constexpr (std::is_floating_point<C>::value)
            return a * b;
        else
            return (C)((uint64_t)a * (uint64_t)b);
    case R_AMAX: return is_nan(b) ? b : a < b ? b : a;
    case R_AMIN: return is_nan(b) ? b : b < a ? b : a;
    default:
        if constexpr (std::is_floating_point<C>::value)
            return a + b;
        else
            return (C)((uint64_t)a + (uint64_t)b);
    }
}

template <typename C> __device__ __forceinline__ C divide(C a, C b)
{
    if constexpr (std::is_floating_point<C>::value)
        return a / b;
    else if constexpr (std::is_signed<C>::value)
        return (C)(a / b - ((a % b != 0) && ((a < 0) != (b < 0))));
    else
        return (C)(a / b);
}

template <typename D>
__global__ void scatter_reduce_kernel(Geom g, int64_t n, const int64_t *idx,
                                      const typename D::S *src, typename D::S *self,
                                      int64_t *counts, int reduce, bool include_self,
                                      unsigned long long *bad)
{
    typedef typename D::C C;
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    int64_t io, so, to, pos[WEFT_MAX_DIMS];
    for (int64_t e = 0; e < n; e++) {
        offsets(g, e, &io, &so, &to, pos);
        int64_t i = idx[io];
        if (i < 0 || i >= g.size) {
            *bad += 1;
            return;
        }
    }
    if (!include_self)
        for (int64_t e = 0; e < n; e++) {
            offsets(g, e, &io, &so, &to, pos);
            D::store(self + to + idx[io] * g.sself[g.dim], identity<C>(reduce));
        }
    for (int64_t e = 0; e < n; e++) {
        offsets(g, e, &io, &so, &to, pos);
        int64_t i = idx[io];
        typename D::S *p = self + to + i * g.sself[g.dim];
        D::store(p, combine<C>(reduce, D::load(p), D::load(src + so)));
        int64_t k = 0; /* self's element, row-major */
        for (int d = 0; d < g.ndim; d++)
            k = k * g.self_shape[d] + (d == g.dim ? i : pos[d]);
        counts[k]++;
    }
    if (reduce != R_MEAN)
        return;
    for (int64_t e = 0; e < n; e++) {
        offsets(g, e, &io, &so, &to, pos);
        int64_t i = idx[io], k = 0;
        for (int d = 0; d < g.ndim; d++)
            k = k * g.self_shape[d] + (d == g.dim ? i : pos[d]);
        if (counts[k] <= 0)
            continue;
        typename D::S *p = self + to + i * g.sself[g.dim];
        D::store(p, divide<C>(D::load(p), (C)(counts[k] + include_self)));
        counts[k] = 0;
    }
}

/* ---- host side ----------------------------------------------------------------------------- */

static void geom_of(Geom *g, const weft_tensor *self, const weft_tensor *index,
                    const weft_tensor *src, int dim)
{
    memset(g, 0, sizeof *g);
    g->ndim = index->ndim;
    g->dim = dim;
    g->size = self->shape[dim];
    for (int d = 0; d < index->ndim; d++) {
        g->shape[d] = index->shape[d];
        g->sidx[d] = index->stride[d];
        g->ssrc[d] = src ? src->stride[d] : 0;
        g->sself[d] = self->stride[d];
        g->self_shape[d] = self->shape[d];
    }
}

/* A zeroed int64 counter on self's device (a weft tensor, so the caching allocator
 * serves it). */
static weft_tensor *zeros_on(const weft_tensor *self, int64_t n)
{
    return weft_zeros(1, &n, WEFT_I64, self->device);
}

/* Reads the bad-index counter back (synchronises) and fails with PyTorch's text. */
static int check_bad(weft_tensor *bad, const weft_tensor *self, int dim)
{
    int64_t count;
    if (weft_tensor_read(bad, &count, sizeof count) != 0)
        return weft_error_code();
    if (count > 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "index out of bounds for dimension %d with size %lld", dim,
                              (long long)self->shape[dim]);
    return 0;
}

/* A scalar as dtype D's storage (host side), converted as the cpu converts it. */
template <typename D> static typename D::S storage_of(double v)
{
    typename D::C c = scalar_as<typename D::C>(v);
    if constexpr (std::is_same<D, Half>::value)
        return weft_float_to_f16(c);
    else if constexpr (std::is_same<D, BFloat16>::value)
        return weft_float_to_bf16(c);
    else
        return c;
}

/* value: scalar[0] as T's storage (used when there is no src) */
template <typename T>
static int launch_scatter(const struct weft_op_call *call, unsigned long long *bad, T value)
{
    weft_tensor *self = call->out[0];
    const weft_tensor *index = call->in[0], *src = call->in[1];
    Geom g;
    geom_of(&g, self, index, src, (int)call->ints[0]);
    int64_t n = weft_tensor_numel(index);
    int dev = self->device.index;
    scatter_kernel<T><<<grid_for(n), kThreads, 0, cuda_current_stream(dev)>>>(
        g, n, static_cast<const int64_t *>(weft_tensor_data(index)),
        src ? static_cast<const T *>(weft_tensor_data(src)) : nullptr, value,
        static_cast<T *>(weft_tensor_data(self)), bad);
    return CUDA_CHECK_LAUNCH("scatter");
}

static int scatter_op(const struct weft_op_call *call)
{
    weft_tensor *self = call->out[0];
    int dim = (int)call->ints[0];
    if (weft_tensor_numel(call->in[0]) == 0)
        return 0;
    if (cuda_set_device(self->device.index) != 0)
        return weft_error_code();
    weft_scope_push();
    weft_tensor *bad = zeros_on(self, 1);
    int rc = -1;
    if (bad) {
        unsigned long long *flag = static_cast<unsigned long long *>(weft_tensor_data(bad));
        double v = call->scalar[0];
        switch (self->dtype) {
        case WEFT_BOOL: rc = launch_scatter<uint8_t>(call, flag, v != 0); break;
#define WC_SCATTER_CASE(E, D)                                                                 \
    case E: {                                                                                 \
        rc = launch_scatter<typename D::S>(call, flag, storage_of<D>(v));                     \
        break;                                                                                \
    }
            WC_INTEGRAL_DTYPES(WC_SCATTER_CASE)
            WC_FLOATING_DTYPES(WC_SCATTER_CASE)
#undef WC_SCATTER_CASE
        default:
            rc = weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"scatter\" not implemented for '%s' on cuda",
                                weft_dtype_torch_name(self->dtype));
        }
        if (rc == 0)
            rc = check_bad(bad, self, dim);
    }
    weft_scope_pop();
    return rc == 0 ? 0 : weft_error_code();
}

template <typename D> static int launch_reduce(const struct weft_op_call *call, int64_t *counts,
                                               unsigned long long *bad)
{
    weft_tensor *self = call->out[0];
    const weft_tensor *index = call->in[0], *src = call->in[1];
    Geom g;
    geom_of(&g, self, index, src, (int)call->ints[0]);
    scatter_reduce_kernel<D><<<1, 1, 0, cuda_current_stream(self->device.index)>>>(
        g, weft_tensor_numel(index), static_cast<const int64_t *>(weft_tensor_data(index)),
        static_cast<const typename D::S *>(weft_tensor_data(src)),
        static_cast<typename D::S *>(weft_tensor_data(self)), counts, (int)call->ints[1],
        call->ints[2] != 0, bad);
    return CUDA_CHECK_LAUNCH("scatter_reduce");
}

static int scatter_reduce_op(const struct weft_op_call *call)
{
    weft_tensor *self = call->out[0];
    int dim = (int)call->ints[0];
    if (weft_tensor_numel(call->in[0]) == 0)
        return 0;
    if (!call->in[1] || call->ints[1] < R_SUM || call->ints[1] > R_AMIN)
        return weft_error_set(WEFT_ERR_VALUE, "scatter_reduce: bad reduction or no src");
    if (cuda_set_device(self->device.index) != 0)
        return weft_error_code();
    weft_scope_push();
    weft_tensor *bad = zeros_on(self, 1), *counts = zeros_on(self, weft_tensor_numel(self));
    int rc = -1;
    if (bad && counts) {
        unsigned long long *flag = static_cast<unsigned long long *>(weft_tensor_data(bad));
        int64_t *c = static_cast<int64_t *>(weft_tensor_data(counts));
        switch (self->dtype) {
#define WC_REDUCE_CASE(E, D)                                                                  \
    case E:                                                                                   \
        rc = launch_reduce<D>(call, c, flag);                                                 \
        break;
            WC_INTEGRAL_DTYPES(WC_REDUCE_CASE)
            WC_FLOATING_DTYPES(WC_REDUCE_CASE)
#undef WC_REDUCE_CASE
        default:
            rc = weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                                "\"scatter_reduce\" not implemented for '%s' on cuda",
                                weft_dtype_torch_name(self->dtype));
        }
        if (rc == 0)
            rc = check_bad(bad, self, dim);
    }
    weft_scope_pop();
    return rc == 0 ? 0 : weft_error_code();
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_scatter_kernels[] = {
    {-1, WEFT_OP_SCATTER_NAME, WEFT_DTYPES_ALL, scatter_op},
    {-1, WEFT_OP_SCATTER_REDUCE_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING,
     scatter_reduce_op},
    {0, nullptr, 0, nullptr},
};
