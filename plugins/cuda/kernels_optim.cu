/* plugins/cuda/kernels_optim.cu: the fused optimizer updates SGD_STEP, ADAM_STEP and
 * RMSPROP_STEP (kernel.h has the contracts): one pass over a contiguous parameter and its
 * state, one thread per element.
 *
 * The arithmetic is the cpu kernels' (plugins/optim/kernels_cpu.c), operation by
 * operation and in the same precision (16-bit floats compute in float, constants are
 * derived in double on the host and then cast), so both devices take the same step.
 * Products go through mul() (__fmul_rn/__dmul_rn), which nvcc never fuses with a
 * following add: the cpu rounds every product, and a fused multiply-add would not. The
 * plugin that dispatches these ops bumps the tensors' versions. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }

/* Element i of an optional state tensor. */
template <typename D> struct Ref {
    typename D::S *p;
    __device__ __forceinline__ typename D::C get(int64_t i) const { return D::load(p + i); }
    __device__ __forceinline__ void set(int64_t i, typename D::C v) const { D::store(p + i, v); }
};

template <typename D> static Ref<D> ref(const weft_tensor *t)
{
    return Ref<D>{t ? static_cast<typename D::S *>(weft_tensor_data(t)) : nullptr};
}

#define WC_FOR_EACH_ELEMENT(i, n)                                                             \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,                          \
                 step_ = (int64_t)gridDim.x * blockDim.x;                                     \
         i < (n); i += step_)

/* ---- SGD ----------------------------------------------------------------------------------- */

template <typename T> struct SgdArgs {
    T lr, mu, keep, wd;
    bool decay, nesterov, first;
};

template <typename D>
__global__ void sgd_kernel(Ref<D> p, Ref<D> g, Ref<D> buf, int64_t n, SgdArgs<typename D::C> a)
{
    typedef typename D::C T;
    WC_FOR_EACH_ELEMENT(i, n)
    {
        T pv = p.get(i), d = g.get(i);
        if (a.decay)
            d = d + mul(a.wd, pv);
        if (buf.p) {
            T b = a.first ? d : mul(a.mu, buf.get(i)) + mul(a.keep, d);
            buf.set(i, b);
            d = a.nesterov ? d + mul(a.mu, b) : b;
        }
        p.set(i, pv - mul(a.lr, d));
    }
}

template <typename D> static int sgd(const struct weft_op_call *c, int64_t n, cudaStream_t stream)
{
    typedef typename D::C T;
    SgdArgs<T> a = {(T)c->scalar[0],     (T)c->scalar[1], (T)(1.0 - c->scalar[2]),
                    (T)c->scalar[3],     c->scalar[3] != 0.0, c->ints[0] != 0,
                    c->ints[1] != 0};
    sgd_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(ref<D>(c->out[0]), ref<D>(c->in[0]),
                                                        ref<D>(c->nout > 1 ? c->out[1] : NULL),
                                                        n, a);
    return CUDA_CHECK_LAUNCH("sgd_step");
}

/* ---- Adam / AdamW ----------------------------------------------------------------------------- */

template <typename T> struct AdamArgs {
    T step_size, c2_sqrt, w1, b2, w2, eps, decay, wd;
    bool decoupled, l2, amsgrad;
};

template <typename D>
__global__ void adam_kernel(Ref<D> p, Ref<D> g, Ref<D> m, Ref<D> v, Ref<D> vmax, int64_t n,
                            AdamArgs<typename D::C> a)
{
    typedef typename D::C T;
    WC_FOR_EACH_ELEMENT(i, n)
    {
        T pv = p.get(i), d = g.get(i);
        if (a.decoupled)
            pv = mul(pv, a.decay);
        else if (a.l2)
            d = d + mul(a.wd, pv);
        T mv = m.get(i);
        mv = mv + mul(a.w1, d - mv);
        T vv = mul(a.b2, v.get(i)) + mul(a.w2, mul(d, d));
        m.set(i, mv);
        v.set(i, vv);
        if (a.amsgrad) {
            T old = vmax.get(i);
            vv = old > vv || isnan(old) ? old : vv;
            vmax.set(i, vv);
        }
        T denom = sqrt(vv) / a.c2_sqrt + a.eps;
        p.set(i, pv + mul(-a.step_size, mv / denom));
    }
}

static double bits_double(int64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

template <typename D> static int adam(const struct weft_op_call *c, int64_t n, cudaStream_t stream)
{
    typedef typename D::C T;
    const double lr = c->scalar[0], b1 = c->scalar[1], b2 = c->scalar[2];
    const double wd = bits_double(c->ints[3]), t = (double)c->ints[0];
    const weft_tensor *vmax = c->nin > 2 ? c->in[2] : NULL;
    AdamArgs<T> a;
    a.step_size = (T)(lr / (1.0 - pow(b1, t)));
    a.c2_sqrt = (T)sqrt(1.0 - pow(b2, t));
    a.w1 = (T)(1.0 - b1);
    a.b2 = (T)b2;
    a.w2 = (T)(1.0 - b2);
    a.eps = (T)c->scalar[3];
    a.decay = (T)(1.0 - lr * wd);
    a.wd = (T)wd;
    a.decoupled = c->ints[2] != 0;
    a.l2 = !a.decoupled && wd != 0.0;
    a.amsgrad = c->ints[1] != 0 && vmax != NULL;
    adam_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(ref<D>(c->out[0]), ref<D>(c->in[0]),
                                                         ref<D>(c->out[1]), ref<D>(c->in[1]),
                                                         ref<D>(vmax), n, a);
    return CUDA_CHECK_LAUNCH("adam_step");
}

/* ---- RMSprop ------------------------------------------------------------------------------------ */

template <typename T> struct RmspropArgs {
    T lr, alpha, w, eps, wd, mom;
    bool decay;
};

template <typename D>
__global__ void rmsprop_kernel(Ref<D> p, Ref<D> g, Ref<D> sq, Ref<D> ga, Ref<D> buf, int64_t n,
                               RmspropArgs<typename D::C> a)
{
    typedef typename D::C T;
    WC_FOR_EACH_ELEMENT(i, n)
    {
        T pv = p.get(i), d = g.get(i);
        if (a.decay)
            d = d + mul(a.wd, pv);
        T s = mul(a.alpha, sq.get(i)) + mul(a.w, mul(d, d));
        sq.set(i, s);
        T avg;
        if (ga.p) {
            T av = ga.get(i);
            av = av + mul(a.w, d - av);
            ga.set(i, av);
            avg = sqrt(s - mul(av, av));
        } else {
            avg = sqrt(s);
        }
        avg = avg + a.eps;
        if (buf.p) {
            T b = mul(a.mom, buf.get(i)) + d / avg;
            buf.set(i, b);
            p.set(i, pv + mul(-a.lr, b));
        } else {
            p.set(i, pv + mul(-a.lr, d / avg));
        }
    }
}

template <typename D>
static int rmsprop(const struct weft_op_call *c, int64_t n, cudaStream_t stream)
{
    typedef typename D::C T;
    RmspropArgs<T> a;
    a.lr = (T)c->scalar[0];
    a.alpha = (T)c->scalar[1];
    a.w = (T)(1.0 - c->scalar[1]);
    a.eps = (T)c->scalar[2];
    a.wd = (T)c->scalar[3];
    a.mom = (T)bits_double(c->ints[0]);
    a.decay = c->scalar[3] != 0.0;
    rmsprop_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(
        ref<D>(c->out[0]), ref<D>(c->in[0]), ref<D>(c->out[1]),
        ref<D>(c->nin > 1 ? c->in[1] : NULL), ref<D>(c->nin > 2 ? c->in[2] : NULL), n, a);
    return CUDA_CHECK_LAUNCH("rmsprop_step");
}

/* ---- entry ------------------------------------------------------------------------------------- */

static int step_op(const struct weft_op_call *c)
{
    int64_t n = weft_tensor_numel(c->out[0]);
    if (n == 0)
        return 0;
    int dev = c->out[0]->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (c->in[0]->dtype) {
#define WC_STEP_CASE(E, D)                                                                    \
    case E:                                                                                   \
        switch (c->op) {                                                                      \
        case WEFT_OP_SGD_STEP: return sgd<D>(c, n, stream);                                   \
        case WEFT_OP_ADAM_STEP: return adam<D>(c, n, stream);                                 \
        default: return rmsprop<D>(c, n, stream);                                             \
        }
        WC_FLOATING_DTYPES(WC_STEP_CASE)
#undef WC_STEP_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              weft_op_name(c->op), weft_dtype_torch_name(c->in[0]->dtype));
    }
}

} // namespace

extern "C" int cuda_register_optim_kernels(void)
{
    const int ops[] = {WEFT_OP_SGD_STEP, WEFT_OP_ADAM_STEP, WEFT_OP_RMSPROP_STEP};
    for (int op : ops) {
        int rc = weft_kernel_register(op, WEFT_DEVICE_CUDA, WEFT_LAYOUT_STRIDED,
                                      WEFT_DTYPES_FLOATING, step_op);
        if (rc != 0)
            return rc;
    }
    return 0;
}
