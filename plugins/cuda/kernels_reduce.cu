/* plugins/cuda/kernels_reduce.cu: SUM, PROD, MEAN, VAR, MAX/MIN (with indices), ARGMAX/
 * ARGMIN, ALL, ANY over the trailing dims of a strided input (kernel.h has the contract;
 * the values are the cpu plugin's, kernels_reduce.c).
 *
 * One kernel for every op, parameterised by an op functor: an accumulator type, its
 * identity, an associative and commutative combine, how an element becomes an
 * accumulator and how the result is written. A group of threads reduces one output:
 *  - a thread (group 1) when the outputs lie closer together in memory than the reduced
 *    elements (sum over dim 0 of a contiguous matrix: neighbouring threads then read
 *    neighbouring elements), or when the reduced range is tiny;
 *  - a warp (32) for short reductions, a block (kThreads) for long ones, finished with
 *    shuffles (and shared memory across warps).
 * When there are too few outputs to fill the device, the reduced range is also split
 * across blockIdx.y; the partial accumulators go to a scratch buffer and a second kernel
 * combines them in order and writes the results.
 *
 * Outputs are walked with the core's weft_iter over (out0, in's kept dims, out1), the
 * reduced elements with a hand-made weft_iter over in's reduced dims in row-major order,
 * so a reduced position is its row-major index (the index MAX/MIN/ARGMAX report). The
 * combines make the result independent of the order of the tree: MAX/MIN keep the first
 * extreme, and the first NaN when there is one; sums follow the cpu's accumulator types
 * (float for 16/32-bit floats, double, wrapping 64-bit integers) in another order, so
 * floating sums may differ from the cpu's in the last bits. VAR combines (count, mean,
 * M2) triples (Chan et al.), in double. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

struct Geom {
    weft_iter outs; /* operands: out0, in's kept dims, out1 (out0 again when absent) */
    weft_iter red;  /* one operand: in's reduced dims, row-major, size-1 dims dropped */
    int64_t nout, R;
    int64_t splits; /* blocks along y that share one output's reduced range */
    int group;      /* threads per output: 1, 32 or kThreads */
    bool has_o1;
};

__device__ __forceinline__ int64_t reduced_offset(const weft_iter &red, int64_t r)
{
    if (red.ndim == 1)
        return r * red.strides[0][0];
    int64_t off[1];
    iter_offsets<1>(red, r, off);
    return off[0];
}

template <typename V> __device__ __forceinline__ bool is_nan(V v)
{
    if constexpr (std::is_floating_point<V>::value)
        return v != v;
    else
        return false;
}

/* ---- loaders: elements as values of one compute type ---------------------------------------
 * Floating dtypes are instantiated one by one; bool and the integers share one loader that
 * widens to int64 through a switch on the dtype (the same branch for every thread), which
 * keeps the number of kernels, and the build time, down at no visible cost. */

template <typename D> struct FloatLoader {
    typedef typename D::S S;
    typedef typename D::C V;
    __device__ V load(const char *p) const { return D::load(reinterpret_cast<const S *>(p)); }
    __device__ void store(char *p, V v) const { D::store(reinterpret_cast<S *>(p), v); }
};

struct IntLoader {
    typedef int64_t V;
    int dt;
    __device__ V load(const char *p) const
    {
        switch (dt) {
#define WC_LOAD_CASE(E, D)                                                                    \
    case E:                                                                                   \
        return (int64_t)D::load(reinterpret_cast<const typename D::S *>(p));
            WC_BOOL_DTYPES(WC_LOAD_CASE)
            WC_INTEGRAL_DTYPES(WC_LOAD_CASE)
#undef WC_LOAD_CASE
        default:
            return 0;
        }
    }
    /* as the cpu's store_from_i64: integers keep the low bits, bool is != 0 */
    __device__ void store(char *p, V v) const
    {
        switch (dt) {
#define WC_STORE_CASE(E, D)                                                                   \
    case E:                                                                                   \
        D::store(reinterpret_cast<typename D::S *>(p), (typename D::C)v);                     \
        return;
            WC_BOOL_DTYPES(WC_STORE_CASE)
            WC_INTEGRAL_DTYPES(WC_STORE_CASE)
#undef WC_STORE_CASE
        default:
            return;
        }
    }
};

/* Any dtype as its truth: != 0, so NaN is true and -0.0 false. */
struct TruthLoader {
    int dt;
    __device__ bool load(const char *p) const
    {
        switch (dt) {
#define WC_TRUTH_CASE(E, D)                                                                   \
    case E:                                                                                   \
        return D::load(reinterpret_cast<const typename D::S *>(p)) != (typename D::C)0;
            WC_ALL_DTYPES(WC_TRUTH_CASE)
#undef WC_TRUTH_CASE
        default:
            return false;
        }
    }
};

/* ---- the op functors ------------------------------------------------------------------------ */

/* SUM, PROD, MEAN; A is the cpu's accumulator: the compute type of floating dtypes (float
 * for 16-bit ones), wrapping uint64 for bool and integers (whose result is int64). */
template <typename L> struct SumProd {
    typedef typename L::V V;
    static constexpr bool kFloat = std::is_floating_point<V>::value;
    typedef std::conditional_t<kFloat, V, uint64_t> A;
    struct Acc {
        A v;
    };
    L loader;
    bool prod, mean;
    int64_t R;

    __device__ Acc identity() const { return Acc{prod ? (A)1 : (A)0}; }
    __device__ Acc load(const char *p, int64_t) const { return Acc{(A)loader.load(p)}; }
    __device__ Acc operator()(Acc a, Acc b) const { return Acc{prod ? a.v * b.v : a.v + b.v}; }
    __device__ void write(Acc a, char *o0, char *) const
    {
        if constexpr (kFloat)
            loader.store(o0, mean ? (V)((double)a.v / (double)R) : (V)a.v);
        else
            *reinterpret_cast<int64_t *>(o0) = (int64_t)a.v;
    }
};

/* MAX, MIN (values, and indices when out1 is given), ARGMAX, ARGMIN. */
template <typename L> struct MaxMin {
    typedef typename L::V V;
    struct Acc {
        V v;
        int64_t idx; /* < 0: no element yet */
    };
    L loader;
    bool is_min, arg;

    __device__ Acc identity() const { return Acc{(V)0, -1}; }
    __device__ Acc load(const char *p, int64_t r) const { return Acc{loader.load(p), r}; }
    /* The first NaN, else the first extreme. */
    __device__ Acc operator()(Acc a, Acc b) const
    {
        if (a.idx < 0)
            return b;
        if (b.idx < 0)
            return a;
        bool an = is_nan(a.v), bn = is_nan(b.v);
        if (an != bn)
            return an ? a : b;
        if (an || a.v == b.v)
            return a.idx < b.idx ? a : b;
        bool b_better = is_min ? b.v < a.v : b.v > a.v;
        return b_better ? b : a;
    }
    __device__ void write(Acc a, char *o0, char *o1) const
    {
        if (arg) {
            *reinterpret_cast<int64_t *>(o0) = a.idx;
            return;
        }
        loader.store(o0, a.v);
        if (o1)
            *reinterpret_cast<int64_t *>(o1) = a.idx;
    }
};

/* ALL, ANY. */
struct AllAny {
    struct Acc {
        int v;
    };
    TruthLoader loader;
    bool all;

    __device__ Acc identity() const { return Acc{all ? 1 : 0}; }
    __device__ Acc load(const char *p, int64_t) const { return Acc{loader.load(p) ? 1 : 0}; }
    __device__ Acc operator()(Acc a, Acc b) const { return Acc{all ? a.v & b.v : a.v | b.v}; }
    __device__ void write(Acc a, char *o0, char *) const
    {
        *reinterpret_cast<uint8_t *>(o0) = a.v != 0;
    }
};

/* VAR: the sum of squared deviations over (R - correction), 0 or less giving inf/NaN as on
 * the cpu; an infinite or NaN mean makes it NaN (the cpu's inf - inf). */
template <typename L> struct Var {
    typedef typename L::V V;
    struct Acc {
        double n, mean, m2;
    };
    L loader;
    double correction;
    int64_t R;

    __device__ Acc identity() const { return Acc{0, 0, 0}; }
    __device__ Acc load(const char *p, int64_t) const { return Acc{1, (double)loader.load(p), 0}; }
    __device__ Acc operator()(Acc a, Acc b) const
    {
        if (a.n == 0)
            return b;
        if (b.n == 0)
            return a;
        double n = a.n + b.n, delta = b.mean - a.mean;
        return Acc{n, a.mean + delta * (b.n / n), a.m2 + b.m2 + delta * delta * (a.n * b.n / n)};
    }
    __device__ void write(Acc a, char *o0, char *) const
    {
        double divisor = (double)R - correction;
        double v = isfinite(a.mean) ? a.m2 / (divisor > 0 ? divisor : 0.0) : (double)NAN;
        loader.store(o0, (V)v);
    }
};

/* ---- the kernels ------------------------------------------------------------------------------ */

/* Output o (of group `slot`), reduced range split blockIdx.y of g.splits. With one split
 * the result is written, else the partial goes to partial[o * splits + split]. */
template <typename Op> __global__ void reduce_kernel(Geom g, Op op, typename Op::Acc *partial)
{
    typedef typename Op::Acc Acc;
    __shared__ Acc smem[32];
    const int G = g.group, per_block = blockDim.x / G;
    const int slot = threadIdx.x / G, lane = threadIdx.x % G;
    const int64_t split = blockIdx.y;
    const int64_t r0 = g.R * split / g.splits, r1 = g.R * (split + 1) / g.splits;
    /* the loop bounds are the same for the whole block: the reductions below need that */
    for (int64_t base = (int64_t)blockIdx.x * per_block; base < g.nout;
         base += (int64_t)gridDim.x * per_block) {
        int64_t o = base + slot;
        Acc acc = op.identity();
        int64_t off[3] = {0, 0, 0};
        if (o < g.nout) {
            iter_offsets<3>(g.outs, o, off);
            const char *in = g.outs.data[1] + off[1];
            for (int64_t r = r0 + lane; r < r1; r += G)
                acc = op(acc, op.load(in + reduced_offset(g.red, r), r));
        }
        if (G == 32)
            acc = warp_reduce(acc, op);
        else if (G > 32)
            acc = block_reduce(acc, op, smem);
        if (o < g.nout && lane == 0) {
            if (g.splits == 1)
                op.write(acc, g.outs.data[0] + off[0], g.has_o1 ? g.outs.data[2] + off[2] : nullptr);
            else
                partial[o * g.splits + split] = acc;
        }
    }
}

/* Combines each output's partials in split order and writes it. */
template <typename Op>
__global__ void finish_kernel(Geom g, Op op, const typename Op::Acc *partial)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < g.nout; o += step) {
        typename Op::Acc acc = partial[o * g.splits];
        for (int64_t s = 1; s < g.splits; s++)
            acc = op(acc, partial[o * g.splits + s]);
        int64_t off[3];
        iter_offsets<3>(g.outs, o, off);
        op.write(acc, g.outs.data[0] + off[0], g.has_o1 ? g.outs.data[2] + off[2] : nullptr);
    }
}

template <typename Op>
static int launch(const Geom &g, const Op &op, weft_device dev, cudaStream_t stream,
                  const char *what)
{
    typedef typename Op::Acc Acc;
    int64_t per_block = kThreads / g.group;
    int64_t blocks = (g.nout + per_block - 1) / per_block;
    dim3 grid((unsigned)(blocks < 65535 ? blocks : 65535), (unsigned)g.splits);
    if (g.splits == 1) {
        reduce_kernel<Op><<<grid, kThreads, 0, stream>>>(g, op, nullptr);
        return CUDA_CHECK_LAUNCH(what);
    }
    weft_scope_push();
    const int64_t bytes = g.nout * g.splits * (int64_t)sizeof(Acc);
    weft_tensor *scratch = weft_empty(1, &bytes, WEFT_U8, dev);
    int rc = scratch ? 0 : weft_error_code();
    if (rc == 0) {
        Acc *partial = static_cast<Acc *>(weft_tensor_data(scratch));
        reduce_kernel<Op><<<grid, kThreads, 0, stream>>>(g, op, partial);
        rc = CUDA_CHECK_LAUNCH(what);
        if (rc == 0) {
            finish_kernel<Op><<<grid_for(g.nout), kThreads, 0, stream>>>(g, op, partial);
            rc = CUDA_CHECK_LAUNCH(what);
        }
    }
    weft_scope_pop();
    return rc;
}

/* ---- geometry ---------------------------------------------------------------------------------- */

static int64_t abs64(int64_t x)
{
    return x < 0 ? -x : x;
}

/* Fills g for in[0] with its last k dims reduced into out[0] (and out[1]). */
static int setup(const struct weft_op_call *call, int k, Geom *g)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out0 = call->out[0], *out1 = call->nout > 1 ? call->out[1] : NULL;
    int nk = in->ndim - k;
    int64_t isz = (int64_t)weft_tensor_itemsize(in);
    memset(g, 0, sizeof *g);

    /* reduced dims, row-major; a dim merges into the one outside it when they are
     * contiguous together, which keeps every position's row-major index */
    weft_iter *red = &g->red;
    red->nops = 1;
    g->R = 1;
    int m = 0;
    for (int d = nk; d < in->ndim; d++) {
        g->R *= in->shape[d];
        if (in->shape[d] == 1)
            continue;
        int64_t stride = in->stride[d] * isz;
        if (m > 0 && red->strides[0][m - 1] == in->shape[d] * stride) {
            red->shape[m - 1] *= in->shape[d];
            red->strides[0][m - 1] = stride;
            continue;
        }
        red->shape[m] = in->shape[d];
        red->strides[0][m] = stride;
        m++;
    }
    red->ndim = m;
    red->numel = g->R;

    /* outputs: out0, in's kept dims, out1 */
    weft_tensor kept = *in;
    kept.ndim = nk;
    const weft_tensor *ops[3] = {out0, &kept, out1 ? out1 : out0};
    if (weft_iter_init(&g->outs, 3, ops) != 0)
        return weft_error_code();
    g->nout = g->outs.numel;
    g->has_o1 = out1 != NULL;

    /* threads per output */
    int64_t inner = m > 0 ? abs64(red->strides[0][m - 1]) : 0;
    bool column = false;
    for (int d = 0; d < nk && g->R > 1; d++)
        if (in->shape[d] > 1 && in->stride[d] != 0 && abs64(in->stride[d] * isz) < inner)
            column = true;
    if ((column && g->nout >= 128) || g->R <= 16)
        g->group = 1;
    else
        g->group = g->R <= 4096 ? 32 : kThreads;

    /* Split the reduced range when the outputs alone give too few blocks, keeping a
     * useful amount of work per thread. */
    const int64_t target_blocks = 1024;
    int64_t per_block = kThreads / g->group;
    int64_t blocks = (g->nout + per_block - 1) / per_block;
    int64_t min_chunk = g->group == 1 ? 256 : (int64_t)g->group * 64;
    g->splits = 1;
    if (blocks < target_blocks) {
        int64_t want = (target_blocks + blocks - 1) / blocks, most = g->R / min_chunk;
        g->splits = want < most ? want : most;
        if (g->splits < 1)
            g->splits = 1;
        if (g->splits > 65535)
            g->splits = 65535;
    }
    return 0;
}

/* ---- entry -------------------------------------------------------------------------------------- */

static int no_kernel(const struct weft_op_call *call, enum weft_dtype dt)
{
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                          weft_op_name(call->op), weft_dtype_torch_name(dt));
}

/* The dtype out[0] must have (the front end's choice, which the kernels write). */
static enum weft_dtype out_dtype(int op, enum weft_dtype in)
{
    switch (op) {
    case WEFT_OP_SUM:
    case WEFT_OP_PROD:
        return weft_dtype_is_floating(in) ? in : WEFT_I64;
    case WEFT_OP_ARGMAX:
    case WEFT_OP_ARGMIN:
        return WEFT_I64;
    case WEFT_OP_ALL:
    case WEFT_OP_ANY:
        return WEFT_BOOL;
    default:
        return in;
    }
}

static int check_call(const struct weft_op_call *call, int k)
{
    const weft_tensor *in = call->in[0];
    int nk = in->ndim - k;
    if (k < 0 || nk < 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "reduce kernel: %d reduced dims of a %d-dim input",
                              k, in->ndim);
    for (int o = 0; o < call->nout; o++) {
        const weft_tensor *out = call->out[o];
        if (out->ndim != nk || memcmp(out->shape, in->shape, (size_t)nk * sizeof(int64_t)) != 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "reduce kernel: output %d does not have the input's kept shape",
                                  o);
        enum weft_dtype want = o == 0 ? out_dtype(call->op, in->dtype) : WEFT_I64;
        if (out->dtype != want)
            return weft_error_set(WEFT_ERR_RUNTIME, "reduce kernel: output %d should be %s, not %s",
                                  o, weft_dtype_name(want), weft_dtype_name(out->dtype));
    }
    return 0;
}

static int reduce_op(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out0 = call->out[0];
    int k = (int)call->ints[0], op = call->op;
    const char *what = weft_op_name(op);
    if (check_call(call, k) != 0)
        return weft_error_code();
    if (weft_tensor_numel(out0) == 0)
        return 0;
    Geom g;
    if (setup(call, k, &g) != 0)
        return weft_error_code();
    bool is_extreme = op == WEFT_OP_MAX || op == WEFT_OP_MIN || op == WEFT_OP_ARGMAX ||
                      op == WEFT_OP_ARGMIN;
    if (g.R == 0 && is_extreme)
        return weft_error_set(WEFT_ERR_INDEX, "%s(): Expected reduction dim to have non-zero size.",
                              what);
    int dev = out0->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    weft_device device = out0->device;
    enum weft_dtype dt = in->dtype;

    bool floating = weft_dtype_is_floating(dt);
    switch (op) {
    case WEFT_OP_SUM:
    case WEFT_OP_PROD:
    case WEFT_OP_MEAN: {
        bool prod = op == WEFT_OP_PROD, mean = op == WEFT_OP_MEAN;
        if (!floating)
            return launch(g, SumProd<IntLoader>{{(int)dt}, prod, mean, g.R}, device, stream, what);
        switch (dt) {
#define WC_SUM_CASE(E, D)                                                                     \
    case E:                                                                                   \
        return launch(g, SumProd<FloatLoader<D>>{{}, prod, mean, g.R}, device, stream, what);
            WC_FLOATING_DTYPES(WC_SUM_CASE)
#undef WC_SUM_CASE
        default:
            return no_kernel(call, dt);
        }
    }
    case WEFT_OP_MAX:
    case WEFT_OP_MIN:
    case WEFT_OP_ARGMAX:
    case WEFT_OP_ARGMIN: {
        bool is_min = op == WEFT_OP_MIN || op == WEFT_OP_ARGMIN;
        bool arg = op == WEFT_OP_ARGMAX || op == WEFT_OP_ARGMIN;
        if (!floating)
            return launch(g, MaxMin<IntLoader>{{(int)dt}, is_min, arg}, device, stream, what);
        switch (dt) {
#define WC_MAXMIN_CASE(E, D)                                                                  \
    case E:                                                                                   \
        return launch(g, MaxMin<FloatLoader<D>>{{}, is_min, arg}, device, stream, what);
            WC_FLOATING_DTYPES(WC_MAXMIN_CASE)
#undef WC_MAXMIN_CASE
        default:
            return no_kernel(call, dt);
        }
    }
    case WEFT_OP_ALL:
    case WEFT_OP_ANY:
        return launch(g, AllAny{{(int)dt}, op == WEFT_OP_ALL}, device, stream, what);
    case WEFT_OP_VAR:
        switch (dt) {
#define WC_VAR_CASE(E, D)                                                                     \
    case E:                                                                                   \
        return launch(g, Var<FloatLoader<D>>{{}, call->scalar[0], g.R}, device, stream, what);
            WC_FLOATING_DTYPES(WC_VAR_CASE)
#undef WC_VAR_CASE
        default:
            return no_kernel(call, dt);
        }
    default:
        return weft_error_set(WEFT_ERR_RUNTIME, "reduce kernel called for op %s", what);
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_reduce_kernels[] = {
    {WEFT_OP_SUM, nullptr, WEFT_DTYPES_ALL, reduce_op},
    {WEFT_OP_PROD, nullptr, WEFT_DTYPES_ALL, reduce_op},
    {WEFT_OP_MEAN, nullptr, WEFT_DTYPES_FLOATING, reduce_op},
    {WEFT_OP_VAR, nullptr, WEFT_DTYPES_FLOATING, reduce_op},
    {WEFT_OP_MAX, nullptr, WEFT_DTYPES_ALL, reduce_op},
    {WEFT_OP_MIN, nullptr, WEFT_DTYPES_ALL, reduce_op},
    {WEFT_OP_ARGMAX, nullptr, WEFT_DTYPES_ALL & ~WEFT_DTYPE_BIT(WEFT_BOOL), reduce_op},
    {WEFT_OP_ARGMIN, nullptr, WEFT_DTYPES_ALL & ~WEFT_DTYPE_BIT(WEFT_BOOL), reduce_op},
    {WEFT_OP_ALL, nullptr, WEFT_DTYPES_ALL, reduce_op},
    {WEFT_OP_ANY, nullptr, WEFT_DTYPES_ALL, reduce_op},
    {0, nullptr, 0, nullptr},
};
