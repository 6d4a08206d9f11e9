/* plugins/sparse/cuda/sddmm_kernels.cu: weft's own sampled dense-dense product
 * (sddmm_kernels.h has the contract).
 *
 * One warp per specified element: the lanes stride over the n products of a row of G
 * and a row of B, and a shuffle reduction sums them, so a row pair is read with
 * coalesced loads when its stride is 1. A CSR element finds its row by binary search
 * over the offsets, which keeps long rows from serialising on one warp; a COO element
 * reads it. */
#include "sddmm_kernels.h"

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20; /* the rest is covered by the grid-stride loop */

template <typename I> struct CooRows {
    const I *rows;
    __device__ __forceinline__ int64_t operator()(int64_t e) const { return (int64_t)rows[e]; }
};

/* The row r with offsets[r] <= e < offsets[r + 1]; offsets[0] = 0 <= e < nnz = offsets[m]
 * holds for every valid CSR, and the loop keeps offsets[lo] <= e < offsets[hi]. */
template <typename I> struct CsrRows {
    const I *offsets;
    int64_t m;
    __device__ __forceinline__ int64_t operator()(int64_t e) const
    {
        int64_t lo = 0, hi = m;
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            if ((int64_t)offsets[mid] <= e)
                lo = mid;
            else
                hi = mid;
        }
        return lo;
    }
};

/* The loop over elements is uniform across a warp (all lanes share e), so every lane
 * reaches each shuffle: the full mask is right. */
template <typename T, typename I, typename RowOf>
__global__ void __launch_bounds__(kThreads)
    sddmm_kernel(RowOf row_of, const I *cols, int64_t nnz, int64_t n, const T *g, int64_t g_rs,
                 int64_t g_cs, const T *b, int64_t b_rs, int64_t b_cs, T *out)
{
    const int lane = (int)(threadIdx.x % kWarp);
    const int64_t warps = (int64_t)gridDim.x * (kThreads / kWarp);
    int64_t e = ((int64_t)blockIdx.x * kThreads + threadIdx.x) / kWarp;
    for (; e < nnz; e += warps) {
        const T *gr = g + row_of(e) * g_rs;
        const T *br = b + (int64_t)cols[e] * b_rs;
        T acc = 0;
        for (int64_t j = lane; j < n; j += kWarp)
            acc += gr[j * g_cs] * br[j * b_cs];
        for (int offset = kWarp / 2; offset > 0; offset /= 2)
            acc += __shfl_down_sync(0xffffffffu, acc, offset);
        if (lane == 0)
            out[e] = acc;
    }
}

template <typename T, typename I>
cudaError_t launch_typed(const sc_sddmm_args *a, cudaStream_t stream)
{
    const int64_t per_block = kThreads / kWarp;
    int64_t blocks = (a->nnz + per_block - 1) / per_block;
    if (blocks > kMaxBlocks)
        blocks = kMaxBlocks;
    const I *cols = static_cast<const I *>(a->cols);
    const T *g = static_cast<const T *>(a->g);
    const T *b = static_cast<const T *>(a->b);
    T *out = static_cast<T *>(a->out);
    const I *rows = static_cast<const I *>(a->rows);
    if (a->csr)
        sddmm_kernel<T, I><<<(unsigned)blocks, kThreads, 0, stream>>>(
            CsrRows<I>{rows, a->m}, cols, a->nnz, a->n, g, a->g_rs, a->g_cs, b, a->b_rs,
            a->b_cs, out);
    else
        sddmm_kernel<T, I><<<(unsigned)blocks, kThreads, 0, stream>>>(
            CooRows<I>{rows}, cols, a->nnz, a->n, g, a->g_rs, a->g_cs, b, a->b_rs, a->b_cs,
            out);
    return cudaGetLastError();
}

template <typename T> cudaError_t launch_indexed(const sc_sddmm_args *a, cudaStream_t stream)
{
    if (a->index_dtype == WEFT_I32)
        return launch_typed<T, int32_t>(a, stream);
    if (a->index_dtype == WEFT_I64)
        return launch_typed<T, int64_t>(a, stream);
    return cudaErrorInvalidValue;
}

} // namespace

extern "C" cudaError_t sc_sddmm_launch(const struct sc_sddmm_args *args, cudaStream_t stream)
{
    if (args->nnz <= 0 || args->n <= 0)
        return cudaErrorInvalidValue;
    if (args->dtype == WEFT_F32)
        return launch_indexed<float>(args, stream);
    if (args->dtype == WEFT_F64)
        return launch_indexed<double>(args, stream);
    return cudaErrorInvalidValue;
}
