/* plugins/cuda/kernels_embedding.cu: embedding_dense_backward (weft/kernel.h), an
 * index-add of gradient rows into a zeroed table without atomics.
 *
 * Thread (column j, partition p) walks every index in order and adds column j of the
 * gradient rows whose destination row r has r % P == p: each destination element has
 * one owner, who sums its rows in the order of the indices, so the bits do not depend on
 * the launch shape. P grows until the grid has enough threads. */
#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

/* *bad = 1 when an index is outside [0, num). */
__global__ void check_kernel(const int64_t *idx, int64_t n, int64_t num, int *bad)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        if (idx[i] < 0 || idx[i] >= num)
            *bad = 1;
}

/* grad [N, len], idx [N], out [num, len] zeroed; grid: x over columns, y partitions. */
template <typename D>
__global__ void index_add_kernel(const typename D::S *grad, const int64_t *idx,
                                 typename D::S *out, int64_t N, int64_t len)
{
    const int64_t P = gridDim.y, p = blockIdx.y;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < len; j += step) {
        for (int64_t i = 0; i < N; i++) {
            int64_t r = idx[i];
            if (r % P != p)
                continue;
            typename D::S *o = out + r * len + j;
            D::store(o, D::load(o) + D::load(grad + i * len + j));
        }
    }
}

/* 0 when every index is in range, IndexError when one is not, negative on a CUDA error. */
static int check_indices(const int64_t *idx, int64_t n, int64_t num, weft_device device,
                         cudaStream_t stream)
{
    const int64_t one = 1;
    int bad = 0;
    weft_scope_push();
    weft_tensor *flag = weft_zeros(1, &one, WEFT_I32, device);
    int rc = flag ? 0 : weft_error_code();
    if (rc == 0) {
        int *d_bad = static_cast<int *>(weft_tensor_data(flag));
        check_kernel<<<grid_for(n), kThreads, 0, stream>>>(idx, n, num, d_bad);
        if (CUDA_CHECK_LAUNCH("embedding_dense_backward (index check)") != 0 ||
            CUDA_CHECK(cudaMemcpyAsync(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost, stream)) != 0 ||
            CUDA_CHECK(cudaStreamSynchronize(stream)) != 0)
            rc = weft_error_code();
    }
    weft_scope_pop();
    if (rc == 0 && bad)
        rc = weft_error_set(WEFT_ERR_INDEX, "index out of range in self");
    return rc;
}

static int embedding_dense_backward_op(const struct weft_op_call *call)
{
    const weft_tensor *grad = call->in[0], *index = call->in[1];
    weft_tensor *out = call->out[0];
    if (grad->ndim != 2 || index->ndim != 1 || index->dtype != WEFT_I64 || out->ndim != 2 ||
        index->shape[0] != grad->shape[0] || out->shape[1] != grad->shape[1] ||
        out->dtype != grad->dtype || !weft_tensor_is_contiguous(grad) ||
        !weft_tensor_is_contiguous(index) || !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "embedding_dense_backward: expected contiguous grad [N, D], int64 "
                              "indices [N] and an output [num_weights, D] of grad's dtype");
    const int64_t N = grad->shape[0], len = grad->shape[1], num = out->shape[0];
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    const int64_t *idx = static_cast<const int64_t *>(weft_tensor_data(index));
    if (N > 0) {
        int rc = check_indices(idx, N, num, out->device, stream);
        if (rc != 0)
            return rc;
    }
    if (num * len == 0)
        return 0;
    if (CUDA_CHECK(cudaMemsetAsync(weft_tensor_data(out), 0,
                                   (size_t)(num * len) * weft_dtype_size(out->dtype), stream)) != 0)
        return weft_error_code();
    if (N == 0)
        return 0;
    /* about 64k threads: columns first, then partitions of the destination rows */
    int64_t P = 65536 / (len > 0 ? len : 1);
    P = P < 1 ? 1 : P > 64 ? 64 : P;
    P = P > num ? num : P;
    dim3 grid(grid_for(len), (unsigned)P);
    switch (grad->dtype) {
#define WC_EMBEDDING_CASE(E, D)                                                               \
    case E:                                                                                   \
        index_add_kernel<D><<<grid, kThreads, 0, stream>>>(                                   \
            static_cast<const D::S *>(weft_tensor_data(grad)), idx,                           \
            static_cast<D::S *>(weft_tensor_data(out)), N, len);                              \
        return CUDA_CHECK_LAUNCH("embedding_dense_backward");
        WC_FLOATING_DTYPES(WC_EMBEDDING_CASE)
#undef WC_EMBEDDING_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"embedding_dense_backward\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(grad->dtype));
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_embedding_kernels[] = {
    {-1, WEFT_OP_EMBEDDING_DENSE_BACKWARD_NAME, WEFT_DTYPES_FLOATING, embedding_dense_backward_op},
    {0, nullptr, 0, nullptr},
};
