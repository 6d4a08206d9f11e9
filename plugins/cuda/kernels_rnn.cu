/* plugins/cuda/kernels_rnn.cu: rnn_layer and rnn_layer_backward (weft/kernel.h) on the
 * device, the cpu plugin's algorithm (kernels_rnn.c): per step one cuBLAS GEMM into a
 * scratch matrix allocated once per call (stream-ordered), then one gate kernel with a
 * thread per (batch row, hidden unit); LSTM's projection is a second GEMM and a kernel
 * that restores the rows past their length. float32 and float64. */
#include <cublas_v2.h>
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

struct Step {
    int mode;
    int64_t B, H, P, GH, t;
    const int64_t *len; /* device, or null */
};

__device__ __forceinline__ bool on(const Step &s, int64_t b)
{
    return !s.len || s.t < s.len[b];
}

template <typename T> __device__ __forceinline__ T sigm(T x)
{
    return T(1) / (T(1) + exp(-x));
}

/* Forward gates, one thread per (b, k < H); the state rows as kernels_rnn.c writes them
 * (hs is written here unless proj, then by proj_fix). */
template <typename T>
__global__ void forward_gates(Step s, const T *gi, const T *S, const T *bh, const T *hp,
                              const T *cp, T *ga, T *hs, T *out, T *cs, T *aux, bool proj)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.B * s.H)
        return;
    const int64_t b = i / s.H, k = i % s.H, H = s.H, GH = s.GH;
    const T *g = gi + b * GH, *r = S + b * GH;
    if (!on(s, b)) {
        if (!proj) {
            hs[b * s.P + k] = hp[b * s.P + k];
            if (out != hs)
                out[b * s.P + k] = 0;
        }
        if (cs)
            cs[b * H + k] = cp[b * H + k];
        if (aux) /* read by dW_hr's GEMM times a zero gradient: no garbage NaN */
            aux[b * H + k] = 0;
        return;
    }
    T h;
    switch (s.mode) {
    case WEFT_RNN_TANH: h = tanh(g[k] + r[k] + bh[k]); break;
    case WEFT_RNN_RELU: {
        T x = g[k] + r[k] + bh[k];
        h = x > 0 ? x : (x == x ? T(0) : x);
        break;
    }
    case WEFT_RNN_LSTM: {
        T ig = sigm(g[k] + r[k] + bh[k]), fg = sigm(g[H + k] + r[H + k] + bh[H + k]);
        T gg = tanh(g[2 * H + k] + r[2 * H + k] + bh[2 * H + k]);
        T og = sigm(g[3 * H + k] + r[3 * H + k] + bh[3 * H + k]);
        T c = fg * cp[b * H + k] + ig * gg;
        T *a = ga + b * GH;
        a[k] = ig;
        a[H + k] = fg;
        a[2 * H + k] = gg;
        a[3 * H + k] = og;
        cs[b * H + k] = c;
        h = og * tanh(c);
        if (proj) {
            aux[b * H + k] = h;
            return;
        }
        break;
    }
    default: { /* GRU */
        T rg = sigm(g[k] + r[k] + bh[k]), z = sigm(g[H + k] + r[H + k] + bh[H + k]);
        T ghn = r[2 * H + k] + bh[2 * H + k];
        T n = tanh(g[2 * H + k] + rg * ghn);
        T *a = ga + b * GH;
        a[k] = rg;
        a[H + k] = z;
        a[2 * H + k] = n;
        aux[b * H + k] = ghn;
        h = (1 - z) * n + z * hp[b * s.P + k];
        break;
    }
    }
    hs[b * s.P + k] = h;
    if (out != hs)
        out[b * s.P + k] = h;
}

/* After the projection GEMM: one thread per (b, k < P). */
template <typename T> __global__ void proj_fix(Step s, const T *hp, T *hs, T *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.B * s.P)
        return;
    int64_t b = i / s.P;
    if (!on(s, b))
        hs[i] = hp[i];
    if (out != hs)
        out[i] = on(s, b) ? hs[i] : T(0);
}

/* dht = dh + grad_out[t] (0 past a length), copied to grad_h[t]; one thread per (b, k < P). */
template <typename T> __global__ void backward_dht(Step s, const T *dh, const T *go, T *dht, T *gh)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.B * s.P)
        return;
    T v = on(s, i / s.P) ? dh[i] + (go ? go[i] : T(0)) : T(0);
    dht[i] = v;
    if (gh)
        gh[i] = v;
}

/* Backward gates, one thread per (b, k < H): d the gradient of o tanh(c) (or h). */
template <typename T>
__global__ void backward_gates(Step s, const T *d, const T *ga, const T *hs, const T *cs,
                               const T *cp, const T *hp, const T *aux, T *dg, T *dgh, T *dc,
                               T *dir)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.B * s.H)
        return;
    const int64_t b = i / s.H, k = i % s.H, H = s.H, GH = s.GH;
    T *g = dg + b * GH, *gh = dgh ? dgh + b * GH : nullptr;
    if (!on(s, b)) {
        for (int64_t q = k; q < GH; q += H) {
            g[q] = 0;
            if (gh)
                gh[q] = 0;
        }
        if (dir)
            dir[i] = 0;
        return;
    }
    const T dv = d[b * H + k];
    switch (s.mode) {
    case WEFT_RNN_TANH: {
        T h = hs[b * s.P + k];
        g[k] = dv * (1 - h * h);
        break;
    }
    case WEFT_RNN_RELU: g[k] = hs[b * s.P + k] > 0 ? dv : T(0); break;
    case WEFT_RNN_LSTM: {
        const T *a = ga + b * GH;
        T ig = a[k], fg = a[H + k], gg = a[2 * H + k], og = a[3 * H + k];
        T tc = tanh(cs[b * H + k]);
        T dct = dc[i] + dv * og * (1 - tc * tc);
        g[k] = dct * gg * ig * (1 - ig);
        g[H + k] = dct * cp[i] * fg * (1 - fg);
        g[2 * H + k] = dct * ig * (1 - gg * gg);
        g[3 * H + k] = dv * tc * og * (1 - og);
        dc[i] = dct * fg;
        break;
    }
    default: { /* GRU */
        const T *a = ga + b * GH;
        T rg = a[k], z = a[H + k], n = a[2 * H + k];
        T dn = dv * (1 - z) * (1 - n * n);
        T dz = dv * (hp[i] - n) * z * (1 - z);
        T dr = dn * aux[i] * rg * (1 - rg);
        g[k] = gh[k] = dr;
        g[H + k] = gh[H + k] = dz;
        g[2 * H + k] = dn;
        gh[2 * H + k] = dn * rg;
        dir[i] = dv * z;
        break;
    }
    }
}

/* dh = S + direct for rows within their length; one thread per (b, k < P). */
template <typename T> __global__ void backward_dh(Step s, const T *S, const T *dir, T *dh)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.B * s.P && on(s, i / s.P))
        dh[i] = S[i] + (dir ? dir[i] : T(0));
}

unsigned blocks(int64_t n)
{
    return (unsigned)((n + 255) / 256);
}

int blas_check(cublasStatus_t st, int line)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    return weft_error_set(WEFT_ERR_DEVICE, "cuBLAS error: %s (kernels_rnn.cu:%d)",
                          cublasGetStatusString(st), line);
}

/* Row-major C [M, N] = A [M, K] op(B) (B stored [N, K] when trans_b, else [K, N]) as
 * cuBLAS's column-major C^T = op(B)^T A^T. */
int gemm(cublasHandle_t h, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
         const float *B, float *C)
{
    const float one = 1, zero = 0;
    return blas_check(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, (int)N,
                                  (int)M, (int)K, &one, B, trans_b ? (int)K : (int)N, A, (int)K,
                                  &zero, C, (int)N), __LINE__);
}

int gemm(cublasHandle_t h, bool trans_b, int64_t M, int64_t N, int64_t K, const double *A,
         const double *B, double *C)
{
    const double one = 1, zero = 0;
    return blas_check(cublasDgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, (int)N,
                                  (int)M, (int)K, &one, B, trans_b ? (int)K : (int)N, A, (int)K,
                                  &zero, C, (int)N), __LINE__);
}

template <typename T> const T *ptr(const weft_tensor *t)
{
    return t ? (const T *)weft_tensor_data(t) : nullptr;
}
template <typename T> T *mptr(const weft_tensor *t)
{
    return t ? (T *)weft_tensor_data(t) : nullptr;
}
/* Step s's rows of a [T, B, n] tensor. */
template <typename T> T *at(const weft_tensor *t, int64_t s, int64_t B, int64_t n)
{
    return t ? (T *)weft_tensor_data(t) + s * B * n : nullptr;
}

int groups(int mode)
{
    return mode == WEFT_RNN_LSTM ? 4 : mode == WEFT_RNN_GRU ? 3 : 1;
}

int check(const struct weft_op_call *call, const char *op)
{
    if (!call->params || call->params_size != sizeof(struct weft_rnn_kernel_params) ||
        !call->in[0])
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected struct weft_rnn_kernel_params",
                              op);
    const struct weft_rnn_kernel_params *p = (const struct weft_rnn_kernel_params *)call->params;
    if (p->T < 1 || p->B < 0 || p->H < 1 || p->P < 1 || p->mode < 0 || p->mode > 3 ||
        (p->w_hr && p->mode != WEFT_RNN_LSTM))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: bad sizes", op);
    return 0;
}

template <typename T> int forward(const struct weft_op_call *call, cudaStream_t st,
                                  cublasHandle_t h)
{
    const struct weft_rnn_kernel_params *p = (const struct weft_rnn_kernel_params *)call->params;
    const int64_t T_ = p->T, B = p->B, H = p->H, P = p->P, GH = groups(p->mode) * H;
    const bool lstm = p->mode == WEFT_RNN_LSTM, proj = p->w_hr != nullptr;
    T *S = nullptr;
    if (CUDA_CHECK(cudaMallocAsync((void **)&S, sizeof(T) * (size_t)(B * GH + GH), st)) != 0)
        return weft_error_code();
    int rc = CUDA_CHECK(cudaMemsetAsync(S + B * GH, 0, sizeof(T) * (size_t)GH, st));
    const T *bh = p->b_hh ? ptr<T>(p->b_hh) : S + B * GH;
    Step s = {p->mode, B, H, P, GH, 0, ptr<int64_t>(p->lengths)};
    for (int64_t k = 0; k < T_ && rc == 0; k++) {
        int64_t t = p->reverse ? T_ - 1 - k : k, tp = p->reverse ? t + 1 : t - 1;
        s.t = t;
        const T *hp = k == 0 ? ptr<T>(p->h0) : at<T>(p->hs, tp, B, P);
        const T *cp = !lstm ? nullptr : k == 0 ? ptr<T>(p->c0) : at<T>(p->cs, tp, B, H);
        T *hs = at<T>(p->hs, t, B, P), *out = at<T>(p->out, t, B, P);
        rc = gemm(h, true, B, GH, P, hp, ptr<T>(p->w_hh), S);
        if (rc)
            break;
        forward_gates<T><<<blocks(B * H), 256, 0, st>>>(
            s, at<T>(call->in[0], t, B, GH), S, bh, hp, cp, at<T>(p->gates, t, B, GH), hs, out,
            at<T>(p->cs, t, B, H), at<T>(p->aux, t, B, H), proj);
        rc = CUDA_CHECK_LAUNCH("rnn forward_gates");
        if (rc == 0 && proj) {
            rc = gemm(h, true, B, P, H, at<T>(p->aux, t, B, H), ptr<T>(p->w_hr), hs);
            if (rc == 0) {
                proj_fix<T><<<blocks(B * P), 256, 0, st>>>(s, hp, hs, out);
                rc = CUDA_CHECK_LAUNCH("rnn proj_fix");
            }
        }
    }
    int64_t last = p->reverse ? 0 : T_ - 1;
    if (rc == 0)
        rc = CUDA_CHECK(cudaMemcpyAsync(mptr<T>(p->h_n), at<T>(p->hs, last, B, P),
                                        sizeof(T) * (size_t)(B * P), cudaMemcpyDeviceToDevice, st));
    if (rc == 0 && lstm)
        rc = CUDA_CHECK(cudaMemcpyAsync(mptr<T>(p->c_n), at<T>(p->cs, last, B, H),
                                        sizeof(T) * (size_t)(B * H), cudaMemcpyDeviceToDevice, st));
    cudaFreeAsync(S, st);
    return rc;
}

template <typename T> int backward(const struct weft_op_call *call, cudaStream_t st,
                                   cublasHandle_t h)
{
    const struct weft_rnn_kernel_params *p = (const struct weft_rnn_kernel_params *)call->params;
    const int64_t T_ = p->T, B = p->B, H = p->H, P = p->P, GH = groups(p->mode) * H;
    const bool lstm = p->mode == WEFT_RNN_LSTM, gru = p->mode == WEFT_RNN_GRU;
    const bool proj = p->w_hr != nullptr;
    const int64_t wide = P > H ? P : H;
    T *S = nullptr;
    if (CUDA_CHECK(cudaMallocAsync((void **)&S, sizeof(T) * (size_t)(B * (wide + P + H)), st)) != 0)
        return weft_error_code();
    T *dht = S + B * wide, *dir = gru ? dht + B * P : nullptr;
    T *dh = mptr<T>(p->grad_h0), *dc = lstm ? mptr<T>(p->grad_c0) : nullptr;
    int rc = p->grad_hn ? CUDA_CHECK(cudaMemcpyAsync(dh, ptr<T>(p->grad_hn),
                                                     sizeof(T) * (size_t)(B * P),
                                                     cudaMemcpyDeviceToDevice, st))
                        : CUDA_CHECK(cudaMemsetAsync(dh, 0, sizeof(T) * (size_t)(B * P), st));
    if (rc == 0 && lstm)
        rc = p->grad_cn ? CUDA_CHECK(cudaMemcpyAsync(dc, ptr<T>(p->grad_cn),
                                                     sizeof(T) * (size_t)(B * H),
                                                     cudaMemcpyDeviceToDevice, st))
                        : CUDA_CHECK(cudaMemsetAsync(dc, 0, sizeof(T) * (size_t)(B * H), st));
    Step s = {p->mode, B, H, P, GH, 0, ptr<int64_t>(p->lengths)};
    for (int64_t k = T_ - 1; k >= 0 && rc == 0; k--) {
        int64_t t = p->reverse ? T_ - 1 - k : k, tp = p->reverse ? t + 1 : t - 1;
        s.t = t;
        const T *hp = k == 0 ? ptr<T>(p->h0) : at<T>(p->hs, tp, B, P);
        const T *cp = !lstm ? nullptr : k == 0 ? ptr<T>(p->c0) : at<T>(p->cs, tp, B, H);
        T *dgi = at<T>(p->grad_gi, t, B, GH), *dgh = at<T>(p->grad_gh, t, B, GH);
        backward_dht<T><<<blocks(B * P), 256, 0, st>>>(s, dh, at<T>(p->grad_out, t, B, P), dht,
                                                       at<T>(p->grad_h, t, B, P));
        rc = CUDA_CHECK_LAUNCH("rnn backward_dht");
        const T *d = dht;
        if (rc == 0 && proj) {
            rc = gemm(h, false, B, H, P, dht, ptr<T>(p->w_hr), S);
            d = S;
        }
        if (rc)
            break;
        backward_gates<T><<<blocks(B * H), 256, 0, st>>>(
            s, d, at<T>(p->gates, t, B, GH), at<T>(p->hs, t, B, P), at<T>(p->cs, t, B, H), cp,
            hp, at<T>(p->aux, t, B, H), dgi, dgh, dc, dir);
        rc = CUDA_CHECK_LAUNCH("rnn backward_gates");
        if (rc == 0)
            rc = gemm(h, false, B, P, GH, gru ? dgh : dgi, ptr<T>(p->w_hh), S);
        if (rc == 0) {
            backward_dh<T><<<blocks(B * P), 256, 0, st>>>(s, S, dir, dh);
            rc = CUDA_CHECK_LAUNCH("rnn backward_dh");
        }
    }
    cudaFreeAsync(S, st);
    return rc;
}

template <bool Backward> int run(const struct weft_op_call *call)
{
    const char *op = Backward ? "rnn_layer_backward" : "rnn_layer";
    int rc = check(call, op);
    if (rc)
        return rc;
    const struct weft_rnn_kernel_params *p = (const struct weft_rnn_kernel_params *)call->params;
    if (p->B == 0)
        return 0;
    int index = call->in[0]->device.index;
    if ((rc = cuda_set_device(index)) != 0)
        return rc;
    cudaStream_t st = cuda_current_stream(index);
    cublasHandle_t h = (cublasHandle_t)cuda_blas_handle(index);
    if (!h)
        return weft_error_code();
    switch (call->in[0]->dtype) {
    case WEFT_F32: return Backward ? backward<float>(call, st, h) : forward<float>(call, st, h);
    case WEFT_F64: return Backward ? backward<double>(call, st, h) : forward<double>(call, st, h);
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              op, weft_dtype_torch_name(call->in[0]->dtype));
    }
}

int forward_kernel(const struct weft_op_call *call)
{
    return run<false>(call);
}

int backward_kernel(const struct weft_op_call *call)
{
    return run<true>(call);
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_rnn_kernels[] = {
    {-1, WEFT_OP_RNN_LAYER_NAME, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64),
     forward_kernel},
    {-1, WEFT_OP_RNN_LAYER_BACKWARD_NAME, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64),
     backward_kernel},
    {0, nullptr, 0, nullptr},
};
