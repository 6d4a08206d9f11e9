/* plugins/cuda/kernels_cdist.cu: cdist and cdist_backward (weft/kernel.h), the cpu
 * plugin's formulas (kernels_cdist.c) with one thread per output element.
 *
 * Forward: thread (b, i, j) sums over the M coordinates. Backward: thread (b, i, k) owns
 * grad_x1[b, i, k] and sums over j in order, so no atomics and no dependence on the
 * launch shape. */
#include "cuda_dtypes.cuh"
#include "weft/kernel_checks.h"

namespace {

using namespace wc;

enum norm { NORM_0, NORM_1, NORM_2, NORM_INF, NORM_LT2, NORM_GT2 };

static norm norm_of(double p)
{
    if (p == 0)
        return NORM_0;
    if (p == 1)
        return NORM_1;
    if (p == 2)
        return NORM_2;
    if (isinf(p))
        return NORM_INF;
    return p < 2 ? NORM_LT2 : NORM_GT2;
}

struct cdist_args {
    int norm;
    double p;
    int64_t B, P, R, M;
    int64_t s1[3], s2[3], sg[3], sd[3]; /* element strides: x1, x2, grad, dist */
};

template <typename C> __device__ __forceinline__ C sign_of(C v)
{
    return (C)((v > 0) - (v < 0));
}

/* x1 [B, P, M], x2 [B, R, M] strided -> out [B, P, R] contiguous. */
template <typename D>
__global__ void cdist_kernel(const typename D::S *x1, const typename D::S *x2, typename D::S *out,
                             cdist_args a)
{
    typedef typename D::C C;
    const int64_t total = a.B * a.P * a.R, step = (int64_t)gridDim.x * blockDim.x;
    const C p = (C)a.p;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += step) {
        int64_t j = n % a.R, i = n / a.R % a.P, b = n / (a.R * a.P);
        const typename D::S *u = x1 + b * a.s1[0] + i * a.s1[1];
        const typename D::S *v = x2 + b * a.s2[0] + j * a.s2[1];
        C acc = 0;
        for (int64_t k = 0; k < a.M; k++) {
            C d = D::load(u + k * a.s1[2]) - D::load(v + k * a.s2[2]);
            C ad = d < 0 ? -d : d;
            switch (a.norm) {
            case NORM_0:
                acc += d != 0;
                break;
            case NORM_1:
                acc += ad;
                break;
            case NORM_2:
                acc += d * d;
                break;
            case NORM_INF:
                acc = ad > acc || ad != ad ? ad : acc;
                break;
            default:
                acc += pow(ad, p);
                break;
            }
        }
        if (a.norm == NORM_2)
            acc = sqrt(acc);
        else if (a.norm == NORM_LT2 || a.norm == NORM_GT2)
            acc = pow(acc, (C)1 / p);
        D::store(out + n, acc);
    }
}

/* grad, dist [B, P, R], x1 [B, P, M], x2 [B, R, M] strided -> out [B, P, M] contiguous. */
template <typename D>
__global__ void cdist_backward_kernel(const typename D::S *g, const typename D::S *x1,
                                      const typename D::S *x2, const typename D::S *dist,
                                      typename D::S *out, cdist_args a)
{
    typedef typename D::C C;
    const int64_t total = a.B * a.P * a.M, step = (int64_t)gridDim.x * blockDim.x;
    const C p = (C)a.p;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += step) {
        int64_t k = n % a.M, i = n / a.M % a.P, b = n / (a.M * a.P);
        C u = D::load(x1 + b * a.s1[0] + i * a.s1[1] + k * a.s1[2]);
        C acc = 0;
        for (int64_t j = 0; j < a.R && a.norm != NORM_0; j++) {
            C diff = u - D::load(x2 + b * a.s2[0] + j * a.s2[1] + k * a.s2[2]);
            C gv = D::load(g + b * a.sg[0] + i * a.sg[1] + j * a.sg[2]);
            C dv = D::load(dist + b * a.sd[0] + i * a.sd[1] + j * a.sd[2]);
            C ad = diff < 0 ? -diff : diff;
            C v;
            switch (a.norm) {
            case NORM_1:
                v = gv * sign_of(diff);
                break;
            case NORM_2:
                v = dv == 0 ? (C)0 : gv * diff / dv;
                break;
            case NORM_INF:
                v = gv * sign_of(diff) * (C)(ad == dv);
                break;
            case NORM_LT2:
                v = dv == 0 || (diff == 0 && p < 1)
                        ? (C)0
                        : sign_of(diff) * pow(ad, p - 1) * gv / pow(dv, p - 1);
                break;
            default:
                v = dv == 0 ? (C)0 : diff * pow(ad, p - 2) * gv / pow(dv, p - 1);
                break;
            }
            acc += v;
        }
        D::store(out + n, acc);
    }
}

static void strides3(const weft_tensor *t, int64_t *s)
{
    for (int d = 0; d < 3; d++)
        s[d] = t->stride[d];
}

static int cdist_op(const struct weft_op_call *call)
{
    const weft_tensor *x1 = call->in[0], *x2 = call->in[1];
    weft_tensor *out = call->out[0];
    if (weft_check_cdist(call) != 0)
        return weft_error_code();
    cdist_args a = {norm_of(call->scalar[0]), call->scalar[0], x1->shape[0], x1->shape[1],
                    x2->shape[1], x1->shape[2], {0}, {0}, {0}, {0}};
    strides3(x1, a.s1);
    strides3(x2, a.s2);
    int64_t total = weft_tensor_numel(out);
    if (total == 0)
        return 0;
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (x1->dtype) {
#define WC_CDIST_CASE(E, D)                                                                   \
    case E:                                                                                   \
        cdist_kernel<D><<<grid_for(total), kThreads, 0, stream>>>(                            \
            static_cast<const D::S *>(weft_tensor_data(x1)),                                  \
            static_cast<const D::S *>(weft_tensor_data(x2)),                                  \
            static_cast<D::S *>(weft_tensor_data(out)), a);                                   \
        return CUDA_CHECK_LAUNCH("cdist");
        WC_FLOATING_DTYPES(WC_CDIST_CASE)
#undef WC_CDIST_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"cdist\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(x1->dtype));
    }
}

static int cdist_backward_op(const struct weft_op_call *call)
{
    const weft_tensor *g = call->in[0], *x1 = call->in[1], *x2 = call->in[2], *d = call->in[3];
    weft_tensor *out = call->out[0];
    if (weft_check_cdist_backward(call) != 0)
        return weft_error_code();
    cdist_args a = {norm_of(call->scalar[0]), call->scalar[0], x1->shape[0], x1->shape[1],
                    x2->shape[1], x1->shape[2], {0}, {0}, {0}, {0}};
    strides3(x1, a.s1);
    strides3(x2, a.s2);
    strides3(g, a.sg);
    strides3(d, a.sd);
    int64_t total = weft_tensor_numel(out);
    if (total == 0)
        return 0;
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (g->dtype) {
#define WC_CDIST_BACKWARD_CASE(E, D)                                                          \
    case E:                                                                                   \
        cdist_backward_kernel<D><<<grid_for(total), kThreads, 0, stream>>>(                   \
            static_cast<const D::S *>(weft_tensor_data(g)),                                   \
            static_cast<const D::S *>(weft_tensor_data(x1)),                                  \
            static_cast<const D::S *>(weft_tensor_data(x2)),                                  \
            static_cast<const D::S *>(weft_tensor_data(d)),                                   \
            static_cast<D::S *>(weft_tensor_data(out)), a);                                   \
        return CUDA_CHECK_LAUNCH("cdist_backward");
        WC_FLOATING_DTYPES(WC_CDIST_BACKWARD_CASE)
#undef WC_CDIST_BACKWARD_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"cdist_backward\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(g->dtype));
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_cdist_kernels[] = {
    {-1, WEFT_OP_CDIST_NAME, WEFT_DTYPES_FLOATING, cdist_op},
    {-1, WEFT_OP_CDIST_BACKWARD_NAME, WEFT_DTYPES_FLOATING, cdist_backward_op},
    {0, nullptr, 0, nullptr},
};
