/* plugins/cuda/kernels_index.cu: INDEX_SELECT, GATHER and SCATTER_ADD (kernel.h has the
 * contracts; the geometry is the cpu plugin's, kernels_index.c).
 *
 * Indices are checked on the device before anything is written: a check kernel records
 * the smallest position (in the index's own iteration order, as the cpu walks it) that
 * holds a value outside [0, size), the host reads it back and, when there is one, reads
 * that value and reports it with the cpu's text. This costs one synchronisation per call,
 * the price of the cpu's exact errors (and of leaving an in-place target untouched).
 *
 * index_select and gather only move elements, so they are written per element size;
 * scatter_add adds with atomics (per dtype), so duplicate indices add up in an
 * unspecified order: floating results may differ from the cpu's in the last bits. */
#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

constexpr unsigned long long kNone = ~0ull;

/* ---- index checks ---------------------------------------------------------------------- */

__global__ void check_kernel(weft_iter it, int64_t size, unsigned long long *first_bad)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[1];
        iter_offsets<1>(it, i, off);
        int64_t v = *reinterpret_cast<const int64_t *>(it.data[0] + off[0]);
        if (v < 0 || v >= size)
            atomicMin(first_bad, (unsigned long long)i);
    }
}

/* Queues the check of it's (int64) values against [0, size) and reads back into *pos the
 * smallest position holding a bad one (kNone when none). d_pos: 8 bytes of device memory. */
static int find_first_bad(const weft_iter &it, int64_t size, unsigned long long *d_pos,
                          cudaStream_t stream, unsigned long long *pos)
{
    if (CUDA_CHECK(cudaMemsetAsync(d_pos, 0xff, sizeof *d_pos, stream)) != 0)
        return weft_error_code();
    check_kernel<<<grid_for(it.numel), kThreads, 0, stream>>>(it, size, d_pos);
    if (CUDA_CHECK_LAUNCH("index check") != 0 ||
        CUDA_CHECK(cudaMemcpyAsync(pos, d_pos, sizeof *pos, cudaMemcpyDeviceToHost, stream)) != 0 ||
        CUDA_CHECK(cudaStreamSynchronize(stream)) != 0)
        return weft_error_code();
    return 0;
}

/* 1 and the first bad value in *bad when index (int64) holds one outside [0, size), 0
 * when none, negative with an error. */
static int first_out_of_bounds(const weft_tensor *index, int64_t size, cudaStream_t stream,
                               int64_t *bad)
{
    struct weft_iter it;
    if (weft_iter_init(&it, 1, &index) != 0)
        return weft_error_code();
    if (it.numel == 0)
        return 0;
    unsigned long long pos = kNone;
    const int64_t one = 1;
    weft_scope_push();
    weft_tensor *flag = weft_empty(1, &one, WEFT_I64, index->device);
    int rc = flag ? find_first_bad(it, size, static_cast<unsigned long long *>(weft_tensor_data(flag)),
                                   stream, &pos)
                  : weft_error_code();
    weft_scope_pop();
    if (rc != 0 || pos == kNone)
        return rc;
    int64_t off[1];
    iter_offsets<1>(it, (int64_t)pos, off);
    if (CUDA_CHECK(cudaMemcpyAsync(bad, it.data[0] + off[0], sizeof *bad, cudaMemcpyDeviceToHost,
                                   stream)) != 0 ||
        CUDA_CHECK(cudaStreamSynchronize(stream)) != 0)
        return weft_error_code();
    return 1;
}

/* The gather/scatter error, as the cpu words it; 0 when every index is in range. */
static int report_bounds(const weft_tensor *index, int dim, int64_t size, cudaStream_t stream)
{
    int64_t bad = 0;
    int found = first_out_of_bounds(index, size, stream, &bad);
    if (found < 0)
        return found;
    if (found)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "index %lld is out of bounds for dimension %d with size %lld",
                              (long long)bad, dim, (long long)size);
    return 0;
}

static int begin(const weft_tensor *t, cudaStream_t *stream)
{
    int dev = t->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    *stream = cuda_current_stream(dev);
    return 0;
}

/* `t` seen with its dim `dim` collapsed to size 1: the starts of the lines along dim. */
static weft_tensor line_starts(const weft_tensor *t, int dim)
{
    weft_tensor v = *t;
    v.shape[dim] = 1;
    return v;
}

/* t seen with index's shape, not moving along dim (the index supplies that offset). */
static weft_tensor indexed_view(const weft_tensor *t, const weft_tensor *index, int dim)
{
    weft_tensor v = *t;
    memcpy(v.shape, index->shape, sizeof v.shape);
    v.stride[dim] = 0;
    return v;
}

static int no_kernel(const struct weft_op_call *call, enum weft_dtype dt)
{
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                          weft_op_name(call->op), weft_dtype_torch_name(dt));
}

/* ---- index_select ---------------------------------------------------------------------------
 * Work item t = i * nlines + line: index entry i of line `line` (neighbouring threads take
 * neighbouring lines, which usually lie next to each other in memory). */

template <typename T>
__global__ void select_kernel(weft_iter lines, const int64_t *idx, int64_t idx_stride,
                              int64_t nidx, int64_t sin, int64_t sout)
{
    int64_t total = lines.numel * nidx;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += step) {
        int64_t i = t / lines.numel, line = t % lines.numel;
        int64_t off[2];
        iter_offsets<2>(lines, line, off);
        T *o = reinterpret_cast<T *>(lines.data[0] + off[0] + i * sout);
        *o = *reinterpret_cast<const T *>(lines.data[1] + off[1] + idx[i * idx_stride] * sin);
    }
}

template <typename T>
static int launch_select(const weft_iter &lines, const int64_t *idx, int64_t idx_stride,
                         int64_t nidx, int64_t sin, int64_t sout, cudaStream_t stream)
{
    select_kernel<T><<<grid_for(lines.numel * nidx), kThreads, 0, stream>>>(
        lines, idx, idx_stride, nidx, sin, sout);
    return CUDA_CHECK_LAUNCH("index_select");
}

static int index_select_op(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0], *index = call->in[1];
    weft_tensor *out = call->out[0];
    int dim = (int)call->ints[0];
    cudaStream_t stream = nullptr;
    if (begin(out, &stream) != 0)
        return weft_error_code();
    int64_t bad;
    int found = first_out_of_bounds(index, in->shape[dim], stream, &bad);
    if (found < 0)
        return found;
    if (found)
        return weft_error_set(WEFT_ERR_INDEX, "index out of range in self");
    int64_t nidx = weft_tensor_numel(index);
    if (weft_tensor_numel(out) == 0 || nidx == 0)
        return 0;
    size_t isz = weft_tensor_itemsize(in);
    /* in's other dims match out's; only the size along dim differs, and that is 1 here */
    weft_tensor out_starts = line_starts(out, dim), in_starts = line_starts(in, dim);
    const weft_tensor *ops[2] = {&out_starts, &in_starts};
    struct weft_iter lines;
    if (weft_iter_init(&lines, 2, ops) != 0)
        return weft_error_code();
    const int64_t *idx = static_cast<const int64_t *>(weft_tensor_data(index));
    int64_t idx_stride = index->ndim ? index->stride[0] : 1;
    int64_t sin = in->stride[dim] * (int64_t)isz, sout = out->stride[dim] * (int64_t)isz;
    switch (isz) {
    case 1: return launch_select<uint8_t>(lines, idx, idx_stride, nidx, sin, sout, stream);
    case 2: return launch_select<uint16_t>(lines, idx, idx_stride, nidx, sin, sout, stream);
    case 4: return launch_select<uint32_t>(lines, idx, idx_stride, nidx, sin, sout, stream);
    case 8: return launch_select<uint64_t>(lines, idx, idx_stride, nidx, sin, sout, stream);
    default: return no_kernel(call, in->dtype);
    }
}

/* ---- gather: operands out, index, in (index's shape, stride 0 along dim) ------------------ */

template <typename T> __global__ void gather_kernel(weft_iter it, int64_t sdim)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[3];
        iter_offsets<3>(it, i, off);
        int64_t v = *reinterpret_cast<const int64_t *>(it.data[1] + off[1]);
        *reinterpret_cast<T *>(it.data[0] + off[0]) =
            *reinterpret_cast<const T *>(it.data[2] + off[2] + v * sdim);
    }
}

template <typename T>
static int launch_gather(const weft_iter &it, int64_t sdim, cudaStream_t stream)
{
    gather_kernel<T><<<grid_for(it.numel), kThreads, 0, stream>>>(it, sdim);
    return CUDA_CHECK_LAUNCH("gather");
}

static int gather_op(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0], *index = call->in[1];
    weft_tensor *out = call->out[0];
    int dim = (int)call->ints[0];
    if (weft_tensor_numel(index) == 0)
        return 0;
    cudaStream_t stream = nullptr;
    if (begin(out, &stream) != 0)
        return weft_error_code();
    if (report_bounds(index, dim, in->shape[dim], stream) != 0)
        return weft_error_code();
    size_t isz = weft_tensor_itemsize(in);
    weft_tensor src = indexed_view(in, index, dim);
    const weft_tensor *ops[3] = {out, index, &src};
    struct weft_iter it;
    if (weft_iter_init(&it, 3, ops) != 0)
        return weft_error_code();
    int64_t sdim = in->stride[dim] * (int64_t)isz;
    switch (isz) {
    case 1: return launch_gather<uint8_t>(it, sdim, stream);
    case 2: return launch_gather<uint16_t>(it, sdim, stream);
    case 4: return launch_gather<uint32_t>(it, sdim, stream);
    case 8: return launch_gather<uint64_t>(it, sdim, stream);
    default: return no_kernel(call, in->dtype);
    }
}

/* ---- scatter_add: operands out (index's shape, stride 0 along dim), index, src ------------ */

/* *p = *p + v in D's arithmetic (the cpu's (C)(load(p) + v); integers wrap), atomically:
 * the hardware's atomicAdd for 32- and 64-bit types, compare-and-swap on the aligned
 * 32-bit word that holds the element for 8- and 16-bit ones. */
template <typename D> __device__ void atomic_add(typename D::S *p, typename D::C v)
{
    typedef typename D::S S;
    typedef typename D::C C;
    if constexpr (std::is_same<S, float>::value || std::is_same<S, double>::value) {
        atomicAdd(p, v);
    } else if constexpr (sizeof(S) == 4) {
        atomicAdd(reinterpret_cast<unsigned int *>(p), (unsigned int)v);
    } else if constexpr (sizeof(S) == 8) {
        atomicAdd(reinterpret_cast<unsigned long long *>(p), (unsigned long long)v);
    } else {
        static_assert(sizeof(S) <= 2, "8- and 16-bit elements go through their 32-bit word");
        uintptr_t addr = reinterpret_cast<uintptr_t>(p);
        auto *word = reinterpret_cast<unsigned int *>(addr & ~(uintptr_t)3);
        unsigned shift = (unsigned)(addr & 3) * 8;
        unsigned mask = (sizeof(S) == 1 ? 0xffu : 0xffffu) << shift;
        unsigned old = *word, assumed;
        do {
            assumed = old;
            unsigned part = (assumed & mask) >> shift;
            S cur, next;
            memcpy(&cur, &part, sizeof cur); /* little-endian: the low bytes */
            C sum;
            if constexpr (std::is_same<C, bool>::value)
                sum = D::load(&cur) || v;
            else if constexpr (std::is_floating_point<C>::value)
                sum = D::load(&cur) + v;
            else
                sum = (C)((uint64_t)D::load(&cur) + (uint64_t)v);
            D::store(&next, sum);
            unsigned bits = 0;
            memcpy(&bits, &next, sizeof next);
            old = atomicCAS(word, assumed, (assumed & ~mask) | (bits << shift));
        } while (old != assumed);
    }
}

template <typename D> __global__ void scatter_add_kernel(weft_iter it, int64_t sout)
{
    typedef typename D::S S;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[3];
        iter_offsets<3>(it, i, off);
        int64_t v = *reinterpret_cast<const int64_t *>(it.data[1] + off[1]);
        S *p = reinterpret_cast<S *>(it.data[0] + off[0] + v * sout);
        atomic_add<D>(p, D::load(reinterpret_cast<const S *>(it.data[2] + off[2])));
    }
}

static int scatter_add_op(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    const weft_tensor *index = call->in[0], *src = call->in[1];
    int dim = (int)call->ints[0];
    if (weft_tensor_numel(index) == 0)
        return 0;
    cudaStream_t stream = nullptr;
    if (begin(out, &stream) != 0)
        return weft_error_code();
    if (report_bounds(index, dim, out->shape[dim], stream) != 0)
        return weft_error_code();
    weft_tensor target = indexed_view(out, index, dim);
    weft_tensor values = *src; /* src seen with index's shape (it is at least as large) */
    memcpy(values.shape, index->shape, sizeof values.shape);
    const weft_tensor *ops[3] = {&target, index, &values};
    struct weft_iter it;
    if (weft_iter_init(&it, 3, ops) != 0)
        return weft_error_code();
    int64_t sout = out->stride[dim] * (int64_t)weft_tensor_itemsize(out);
    switch (out->dtype) {
#define WC_SCATTER_CASE(E, D)                                                                 \
    case E:                                                                                   \
        scatter_add_kernel<D><<<grid_for(it.numel), kThreads, 0, stream>>>(it, sout);         \
        return CUDA_CHECK_LAUNCH("scatter_add");
        WC_ALL_DTYPES(WC_SCATTER_CASE)
#undef WC_SCATTER_CASE
    default:
        return no_kernel(call, out->dtype);
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_index_kernels[] = {
    {WEFT_OP_INDEX_SELECT, nullptr, WEFT_DTYPES_ALL, index_select_op},
    {WEFT_OP_GATHER, nullptr, WEFT_DTYPES_ALL, gather_op},
    {WEFT_OP_SCATTER_ADD, nullptr, WEFT_DTYPES_ALL, scatter_add_op},
    {0, nullptr, 0, nullptr},
};
