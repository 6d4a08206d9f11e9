/* plugins/cuda/kernels_scan_sort.cu: CUMSUM, CUMPROD and SORT (weft/kernel.h).
 *
 * Simple first versions, correct on every dtype and layout rather than fast: a scan runs
 * each line on one thread, in order (the cpu's order, so the same sums); a sort places
 * each element at its rank within its line, the count of elements that go before it (a
 * stable order, NaN above every number), with one thread per element: O(n) work per
 * element, fine for the short lines models sort (top-k of logits), slow past a few
 * thousand per line, where a segmented radix sort would belong. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

/* A line's geometry: the other dims' sizes and both operands' strides, dim left out. */
struct Lines {
    int ndim;
    int64_t shape[WEFT_MAX_DIMS];
    int64_t sa[WEFT_MAX_DIMS], sb[WEFT_MAX_DIMS], sc[WEFT_MAX_DIMS];
    int64_t n, along_a, along_b, along_c; /* line length, strides along dim */
};

__device__ __forceinline__ void line_start(const Lines &g, int64_t l, int64_t *a, int64_t *b,
                                           int64_t *c)
{
    *a = *b = *c = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
        int64_t p = l % g.shape[d];
        l /= g.shape[d];
        *a += p * g.sa[d];
        *b += p * g.sb[d];
        *c += p * g.sc[d];
    }
}

static Lines lines_of(const weft_tensor *a, const weft_tensor *b, const weft_tensor *c, int dim,
                      int64_t *count)
{
    Lines g;
    memset(&g, 0, sizeof g);
    *count = 1;
    for (int d = 0; d < a->ndim; d++) {
        if (d == dim)
            continue;
        g.shape[g.ndim] = a->shape[d];
        g.sa[g.ndim] = a->stride[d];
        g.sb[g.ndim] = b->stride[d];
        g.sc[g.ndim] = c ? c->stride[d] : 0;
        *count *= a->shape[d];
        g.ndim++;
    }
    g.n = a->shape[dim];
    g.along_a = a->stride[dim];
    g.along_b = b->stride[dim];
    g.along_c = c ? c->stride[dim] : 0;
    return g;
}

/* ---- scans ------------------------------------------------------------------------------- */

template <typename D>
__global__ void scan_kernel(Lines g, int64_t lines, bool prod, const typename D::S *in,
                            typename D::S *out)
{
    typedef typename D::C C;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < lines; l += step) {
        int64_t a, b, c;
        line_start(g, l, &a, &b, &c);
        C acc = prod ? C(1) : C(0);
        for (int64_t i = 0; i < g.n; i++) {
            C v = D::load(in + a + i * g.along_a);
            if constexpr (std::is_floating_point<C>::value)
                acc = prod ? acc * v : acc + v;
            else /* integers wrap, through uint64 */
                acc = (C)(prod ? (uint64_t)acc * (uint64_t)v : (uint64_t)acc + (uint64_t)v);
            D::store(out + b + i * g.along_b, acc);
        }
    }
}

template <typename D> static int launch_scan(const struct weft_op_call *call, bool prod)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out = call->out[0];
    int64_t lines;
    Lines g = lines_of(in, out, nullptr, (int)call->ints[0], &lines);
    scan_kernel<D><<<grid_for(lines), kThreads, 0, cuda_current_stream(out->device.index)>>>(
        g, lines, prod, static_cast<const typename D::S *>(weft_tensor_data(in)),
        static_cast<typename D::S *>(weft_tensor_data(out)));
    return CUDA_CHECK_LAUNCH(prod ? "cumprod" : "cumsum");
}

static int scan_op(const struct weft_op_call *call, bool prod)
{
    const weft_tensor *in = call->in[0];
    if (weft_tensor_numel(in) == 0)
        return 0;
    if (cuda_set_device(call->out[0]->device.index) != 0)
        return weft_error_code();
    switch (in->dtype) {
#define WC_SCAN_CASE(E, D)                                                                    \
    case E:                                                                                   \
        return launch_scan<D>(call, prod);
        WC_INTEGRAL_DTYPES(WC_SCAN_CASE)
        WC_FLOATING_DTYPES(WC_SCAN_CASE)
#undef WC_SCAN_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              prod ? "cumprod" : "cumsum", weft_dtype_torch_name(in->dtype));
    }
}

static int cumsum_op(const struct weft_op_call *call)
{
    return scan_op(call, false);
}

static int cumprod_op(const struct weft_op_call *call)
{
    return scan_op(call, true);
}

/* ---- sort -------------------------------------------------------------------------------- */

template <typename C> __device__ __forceinline__ bool is_nan(C v)
{
    if constexpr (std::is_floating_point<C>::value)
        return v != v;
    else
        return false;
}

/* a goes strictly before b */
template <typename C> __device__ __forceinline__ bool before(C a, C b, bool descending)
{
    if (descending)
        return a > b || (is_nan(a) && !is_nan(b));
    return a < b || (!is_nan(a) && is_nan(b));
}

/* one thread per element e = (line, i): its rank is the number of elements of the line
 * that go before it, equal ones counting when they come earlier (stable) */
template <typename D>
__global__ void sort_kernel(Lines g, int64_t total, bool descending, const typename D::S *in,
                            typename D::S *vals, int64_t *idx)
{
    typedef typename D::C C;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        int64_t l = e / g.n, i = e % g.n, a, b, c;
        line_start(g, l, &a, &b, &c);
        C v = D::load(in + a + i * g.along_a);
        int64_t rank = 0;
        for (int64_t j = 0; j < g.n; j++) {
            C w = D::load(in + a + j * g.along_a);
            rank += before<C>(w, v, descending) || (j < i && !before<C>(v, w, descending));
        }
        D::store(vals + b + rank * g.along_b, v);
        idx[c + rank * g.along_c] = i;
    }
}

template <typename D> static int launch_sort(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *vals = call->out[0], *idx = call->out[1];
    int64_t lines;
    Lines g = lines_of(in, vals, idx, (int)call->ints[0], &lines);
    int64_t total = lines * g.n;
    sort_kernel<D><<<grid_for(total), kThreads, 0, cuda_current_stream(vals->device.index)>>>(
        g, total, call->ints[1] != 0, static_cast<const typename D::S *>(weft_tensor_data(in)),
        static_cast<typename D::S *>(weft_tensor_data(vals)),
        static_cast<int64_t *>(weft_tensor_data(idx)));
    return CUDA_CHECK_LAUNCH("sort");
}

static int sort_op(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    if (weft_tensor_numel(in) == 0)
        return 0;
    if (cuda_set_device(call->out[0]->device.index) != 0)
        return weft_error_code();
    switch (in->dtype) {
#define WC_SORT_CASE(E, D)                                                                    \
    case E:                                                                                   \
        return launch_sort<D>(call);
        WC_ALL_DTYPES(WC_SORT_CASE)
#undef WC_SORT_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"sort\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(in->dtype));
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_scan_sort_kernels[] = {
    {-1, WEFT_OP_CUMSUM_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING, cumsum_op},
    {-1, WEFT_OP_CUMPROD_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING, cumprod_op},
    {-1, WEFT_OP_SORT_NAME, WEFT_DTYPES_ALL, sort_op},
    {0, nullptr, 0, nullptr},
};
