/* plugins/cuda/kernels_optim.cu: the fused optimizer updates sgd_step, adam_step and
 * rmsprop_step (weft/optim_kernels.h has the contracts): one pass over a contiguous parameter and its
 * state, one thread per element.
 *
 * The arithmetic is the cpu kernels' (plugins/optim/kernels_cpu.c), operation by
 * operation and in the same precision (16-bit floats compute in float, constants are
 * derived in double on the host and then cast), so both devices take the same step.
 * Products go through mul() (__fmul_rn/__dmul_rn), which nvcc never fuses with a
 * following add: the cpu rounds every product, and a fused multiply-add would not. The
 * plugin that dispatches these ops bumps the tensors' versions. */
#include <math.h>

#include <weft/optim_kernels.h>

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
    const struct weft_sgd_step_params *h = (const struct weft_sgd_step_params *)c->params;
    SgdArgs<T> a = {(T)h->lr,           (T)h->momentum,           (T)(1.0 - h->dampening),
                    (T)h->weight_decay, h->weight_decay != 0.0,   h->nesterov,
                    h->first_step};
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

template <typename D> static int adam(const struct weft_op_call *c, int64_t n, cudaStream_t stream)
{
    typedef typename D::C T;
    const struct weft_adam_step_params *h = (const struct weft_adam_step_params *)c->params;
    const double lr = h->lr, b1 = h->beta1, b2 = h->beta2;
    const double wd = h->weight_decay, t = (double)h->step;
    const weft_tensor *vmax = c->nin > 2 ? c->in[2] : NULL;
    AdamArgs<T> a;
    a.step_size = (T)(lr / (1.0 - pow(b1, t)));
    a.c2_sqrt = (T)sqrt(1.0 - pow(b2, t));
    a.w1 = (T)(1.0 - b1);
    a.b2 = (T)b2;
    a.w2 = (T)(1.0 - b2);
    a.eps = (T)h->eps;
    a.decay = (T)(1.0 - lr * wd);
    a.wd = (T)wd;
    a.decoupled = h->decoupled;
    a.l2 = !a.decoupled && wd != 0.0;
    a.amsgrad = h->amsgrad && vmax != NULL;
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
    const struct weft_rmsprop_step_params *h = (const struct weft_rmsprop_step_params *)c->params;
    RmspropArgs<T> a;
    a.lr = (T)h->lr;
    a.alpha = (T)h->alpha;
    a.w = (T)(1.0 - h->alpha);
    a.eps = (T)h->eps;
    a.wd = (T)h->weight_decay;
    a.mom = (T)h->momentum;
    a.decay = h->weight_decay != 0.0;
    rmsprop_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(
        ref<D>(c->out[0]), ref<D>(c->in[0]), ref<D>(c->out[1]),
        ref<D>(c->nin > 1 ? c->in[1] : NULL), ref<D>(c->nin > 2 ? c->in[2] : NULL), n, a);
    return CUDA_CHECK_LAUNCH("rmsprop_step");
}

/* ---- entry ------------------------------------------------------------------------------------- */

static int sgd_step_op = -1, adam_step_op = -1, rmsprop_step_op = -1;

/* The parameter block must be the op's struct (weft/optim_kernels.h). */
static int check_params(const struct weft_op_call *c)
{
    size_t want = c->op == sgd_step_op    ? sizeof(struct weft_sgd_step_params)
                  : c->op == adam_step_op ? sizeof(struct weft_adam_step_params)
                                          : sizeof(struct weft_rmsprop_step_params);
    if (c->params && c->params_size == want)
        return 0;
    return weft_error_set(WEFT_ERR_VALUE, "%s: expected a %zu-byte parameter block, got %zu bytes",
                          weft_op_name(c->op), want, c->params ? c->params_size : 0);
}

static int step_op(const struct weft_op_call *c)
{
    if (check_params(c) != 0)
        return WEFT_ERR_VALUE;
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
        if (c->op == sgd_step_op)                                                             \
            return sgd<D>(c, n, stream);                                                      \
        if (c->op == adam_step_op)                                                            \
            return adam<D>(c, n, stream);                                                     \
        return rmsprop<D>(c, n, stream);
        WC_FLOATING_DTYPES(WC_STEP_CASE)
#undef WC_STEP_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              weft_op_name(c->op), weft_dtype_torch_name(c->in[0]->dtype));
    }
}

} // namespace

/* The fused ops' ids, which the kernel tells apart (named: whichever of this plugin and
 * weft-optim.so asks first creates each). */
extern "C" int cuda_optim_ops_init(void)
{
    sgd_step_op = weft_op_register(WEFT_OP_SGD_STEP_NAME);
    adam_step_op = weft_op_register(WEFT_OP_ADAM_STEP_NAME);
    rmsprop_step_op = weft_op_register(WEFT_OP_RMSPROP_STEP_NAME);
    return sgd_step_op < 0 ? sgd_step_op : adam_step_op < 0 ? adam_step_op : rmsprop_step_op < 0 ? rmsprop_step_op : 0;
}

extern "C" const struct weft_kernel_entry cuda_optim_kernels[] = {
    {-1, WEFT_OP_SGD_STEP_NAME, WEFT_DTYPES_FLOATING, step_op},
    {-1, WEFT_OP_ADAM_STEP_NAME, WEFT_DTYPES_FLOATING, step_op},
    {-1, WEFT_OP_RMSPROP_STEP_NAME, WEFT_DTYPES_FLOATING, step_op},
    {0, nullptr, 0, nullptr},
};
