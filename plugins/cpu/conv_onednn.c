/* plugins/cpu/conv_onednn.c: float32 conv2d through oneDNN's direct convolution (the named
 * ops CONV2D, CONV2D_BACKWARD_INPUT and CONV2D_BACKWARD_WEIGHT of weft/kernel.h).
 *
 * Why: weft's own conv2d is im2col + GEMM (nn/conv.c); its columns are kH*kW times the
 * input, written and read again every pass. oneDNN's JIT kernels compute the convolution
 * in place on blocked layouts (nChw16c and friends). weft-bench's conv_ group measured
 * the MNIST CNN's two layers, forward and backward, 2 threads: im2col 0.57 and 1.6 ms,
 * oneDNN on blocked layouts 0.24 and 0.58 ms (and 0.93, 1.87 ms on plain NCHW, where it
 * falls back to its own im2col + GEMM). So each pass asks oneDNN for the layouts it wants
 * (format_tag_any) and reorders weft's NCHW/OIHW tensors into them and the result back.
 *
 * Primitives (and their reorders) cost tens of microseconds to create, so they are kept
 * per pass and geometry, as onednn_matmul.c keeps its matmuls. Every call brings its own
 * scratchpad and blocked buffers (from the plugin's caching allocator): Debian's oneDNN
 * keeps a library-managed scratchpad in one global buffer (onednn_matmul.c). Without oneDNN
 * in the build nothing is registered and nn/conv.c keeps im2col.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef WEFT_HAVE_ONEDNN
#include "onednn_engine.h"
#endif

#include "cpu.h"

#ifdef WEFT_HAVE_ONEDNN

enum pass { PASS_FORWARD, PASS_BACKWARD_INPUT, PASS_BACKWARD_WEIGHT };

/* The three big operands of every pass (x, w, y or their gradients), in the order
 * operand_of() maps them to the call, and whether the pass writes it. */
enum { OPERANDS = 3 };

struct conv_key {
    int64_t pass, N, C, H, W, Cout, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, bias;
    int64_t threads; /* oneDNN splits the work among this many, fixed when it is made */
};

struct conv_prim {
    struct conv_key key;
    dnnl_primitive_t prim; /* NULL: empty slot */
    dnnl_memory_desc_t user_md[OPERANDS], prim_md[OPERANDS], bias_md, scratch_md;
    size_t prim_bytes[OPERANDS], scratch_bytes;
    dnnl_primitive_t reorder[OPERANDS]; /* NULL: the primitive takes weft's layout */
};

/* A training run has a handful of geometries; beyond this many a program pays the
 * creation on every call, nothing else. */
#define CONV_PRIMS 48
static struct conv_prim prims[CONV_PRIMS];
static int prims_used;
static pthread_mutex_t prims_lock = PTHREAD_MUTEX_INITIALIZER;

/* DNNL_ARG_* of operand k of a pass, and whether the pass writes it. */
static int operand_arg(enum pass p, int k, bool *written)
{
    static const int args[3][OPERANDS] = {
        {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
        {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST},
        {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST},
    };
    static const bool writes[3][OPERANDS] = {{false, false, true}, {true, false, false},
                                              {false, true, false}};
    *written = writes[p][k];
    return args[p][k];
}

static dnnl_status_t reorder_prim(dnnl_engine_t engine, dnnl_primitive_t *r,
                                  const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL);
    if (st != dnnl_success)
        return st;
    st = dnnl_primitive_create(r, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* Fills p for k: the pass's primitive on the layouts oneDNN chose, and a reorder for each
 * operand whose layout is not weft's. Needs prims_lock. */
static dnnl_status_t make_prim(struct conv_prim *p, const struct conv_key *k)
{
    dnnl_status_t st;
    dnnl_engine_t engine = cpu_onednn_engine(&st);
    if (!engine)
        return st;
    memset(p, 0, sizeof *p);
    p->key = *k;
    dnnl_dims_t xd = {k->N, k->C, k->H, k->W}, wd = {k->Cout, k->C, k->kh, k->kw},
                yd = {k->N, k->Cout, k->OH, k->OW}, bd = {k->Cout}, strides = {k->sh, k->sw},
                dilates = {k->dh - 1, k->dw - 1}, pad_l = {k->ph, k->pw};
    /* Padding as PyTorch's, the same on both sides: oneDNN's output size then rounds down
     * as PyTorch's does when the stride does not divide the padded image. */
    dnnl_dims_t pad_r = {k->ph, k->pw};
    dnnl_memory_desc_t any[OPERANDS];
    const dnnl_dims_t *dims[OPERANDS] = {&xd, &wd, &yd};
    const dnnl_format_tag_t tags[OPERANDS] = {dnnl_nchw, dnnl_oihw, dnnl_nchw};
    for (int i = 0; i < OPERANDS; i++)
        if ((st = dnnl_memory_desc_init_by_tag(&p->user_md[i], 4, *dims[i], dnnl_f32, tags[i])) !=
                dnnl_success ||
            (st = dnnl_memory_desc_init_by_tag(&any[i], 4, *dims[i], dnnl_f32,
                                               dnnl_format_tag_any)) != dnnl_success)
            return st;
    if ((st = dnnl_memory_desc_init_by_tag(&p->bias_md, 1, bd, dnnl_f32, dnnl_a)) != dnnl_success)
        return st;
    const dnnl_memory_desc_t *bias = k->bias ? &p->bias_md : NULL;
    dnnl_convolution_desc_t fwd, desc;
    if ((st = dnnl_dilated_convolution_forward_desc_init(
             &fwd, dnnl_forward_training, dnnl_convolution_direct, &any[0], &any[1], bias,
             &any[2], strides, dilates, pad_l, pad_r)) != dnnl_success)
        return st;
    if (k->pass == PASS_BACKWARD_INPUT)
        st = dnnl_dilated_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct,
                                                              &any[0], &any[1], &any[2], strides,
                                                              dilates, pad_l, pad_r);
    else if (k->pass == PASS_BACKWARD_WEIGHT)
        st = dnnl_dilated_convolution_backward_weights_desc_init(
            &desc, dnnl_convolution_direct, &any[0], &any[1], bias, &any[2], strides, dilates,
            pad_l, pad_r);
    else
        desc = fwd;
    if (st != dnnl_success)
        return st;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success)
        return st;
    st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && k->pass != PASS_FORWARD) /* the backward passes need a hint */
        st = dnnl_primitive_desc_create(&fwd_pd, &fwd, NULL, engine, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, fwd_pd);
    dnnl_primitive_attr_destroy(attr);
    if (fwd_pd)
        dnnl_primitive_desc_destroy(fwd_pd);
    if (st != dnnl_success)
        return st;
    for (int i = 0; i < OPERANDS && st == dnnl_success; i++) {
        bool written;
        int arg = operand_arg((enum pass)k->pass, i, &written);
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
        if (!md) {
            st = dnnl_runtime_error;
            break;
        }
        p->prim_md[i] = *md;
        p->prim_bytes[i] = dnnl_memory_desc_get_size(md);
        if (!dnnl_memory_desc_equal(md, &p->user_md[i]))
            st = written ? reorder_prim(engine, &p->reorder[i], md, &p->user_md[i])
                         : reorder_prim(engine, &p->reorder[i], &p->user_md[i], md);
    }
    const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
    if (scratch)
        p->scratch_md = *scratch;
    if (st == dnnl_success)
        st = dnnl_primitive_create(&p->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static void destroy_prim(struct conv_prim *p)
{
    for (int i = 0; i < OPERANDS; i++)
        if (p->reorder[i])
            dnnl_primitive_destroy(p->reorder[i]);
    if (p->prim)
        dnnl_primitive_destroy(p->prim);
    memset(p, 0, sizeof *p);
}

/* The cached primitive for k, or one made into *tmp (the caller destroys it). */
static const struct conv_prim *find_prim(const struct conv_key *k, struct conv_prim *tmp,
                                         dnnl_status_t *st)
{
    *st = dnnl_success;
    pthread_mutex_lock(&prims_lock);
    for (int i = 0; i < prims_used; i++)
        if (memcmp(&prims[i].key, k, sizeof *k) == 0) {
            pthread_mutex_unlock(&prims_lock);
            return &prims[i];
        }
    struct conv_prim *p = prims_used < CONV_PRIMS ? &prims[prims_used] : tmp;
#ifdef _OPENMP
    /* oneDNN sizes a primitive for the calling thread's OpenMP count: the key's */
    int icv = omp_get_max_threads();
    omp_set_num_threads((int)k->threads);
#endif
    *st = make_prim(p, k);
#ifdef _OPENMP
    omp_set_num_threads(icv);
#endif
    if (*st != dnnl_success)
        destroy_prim(p);
    else if (p != tmp)
        prims_used++;
    pthread_mutex_unlock(&prims_lock);
    return *st == dnnl_success ? p : NULL;
}

/* ---- running a pass ------------------------------------------------------------------------ */

struct run {
    dnnl_memory_t user[OPERANDS], blocked[OPERANDS], bias, scratch;
    void *buf[OPERANDS], *scratch_buf;
    size_t buf_bytes[OPERANDS];
};

static void run_release(struct run *r, const struct conv_prim *p)
{
    for (int i = 0; i < OPERANDS; i++) {
        if (r->user[i])
            dnnl_memory_destroy(r->user[i]);
        if (r->blocked[i])
            dnnl_memory_destroy(r->blocked[i]);
        cpu_free(0, r->buf[i], r->buf_bytes[i]);
    }
    if (r->bias)
        dnnl_memory_destroy(r->bias);
    if (r->scratch)
        dnnl_memory_destroy(r->scratch);
    cpu_free(0, r->scratch_buf, p->scratch_bytes);
}

/* Runs pass p over data[i] (weft's contiguous NCHW/OIHW buffers of the three operands)
 * and bias (the forward's input or the weight pass's output; NULL when none). */
static dnnl_status_t run_pass(const struct conv_prim *p, void *const data[OPERANDS], void *bias)
{
    struct run r = {0};
    dnnl_stream_t stream = NULL;
    dnnl_status_t st;
    dnnl_engine_t engine = cpu_onednn_engine(&st); /* made with p */
    if (engine)
        st = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    for (int i = 0; i < OPERANDS && st == dnnl_success; i++) {
        st = dnnl_memory_create(&r.user[i], &p->user_md[i], engine, data[i]);
        if (st != dnnl_success || !p->reorder[i])
            continue;
        r.buf_bytes[i] = p->prim_bytes[i];
        if (!(r.buf[i] = cpu_alloc(0, r.buf_bytes[i] ? r.buf_bytes[i] : 1)))
            st = dnnl_out_of_memory;
        else
            st = dnnl_memory_create(&r.blocked[i], &p->prim_md[i], engine, r.buf[i]);
    }
    if (st == dnnl_success && bias)
        st = dnnl_memory_create(&r.bias, &p->bias_md, engine, bias);
    if (st == dnnl_success && p->scratch_bytes > 0) {
        if (!(r.scratch_buf = cpu_alloc(0, p->scratch_bytes)))
            st = dnnl_out_of_memory;
        else
            st = dnnl_memory_create(&r.scratch, &p->scratch_md, engine, r.scratch_buf);
    }
    dnnl_exec_arg_t args[OPERANDS + 2];
    int nargs = 0;
    for (int i = 0; i < OPERANDS && st == dnnl_success; i++) {
        bool written;
        int arg = operand_arg((enum pass)p->key.pass, i, &written);
        dnnl_memory_t m = p->reorder[i] ? r.blocked[i] : r.user[i];
        args[nargs++] = (dnnl_exec_arg_t){arg, m};
        if (p->reorder[i] && !written) {
            dnnl_exec_arg_t io[2] = {{DNNL_ARG_FROM, r.user[i]}, {DNNL_ARG_TO, r.blocked[i]}};
            st = dnnl_primitive_execute(p->reorder[i], stream, 2, io);
        }
    }
    if (r.bias)
        args[nargs++] = (dnnl_exec_arg_t){p->key.pass == PASS_FORWARD ? DNNL_ARG_BIAS
                                                                       : DNNL_ARG_DIFF_BIAS,
                                          r.bias};
    if (r.scratch)
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, r.scratch};
    if (st == dnnl_success)
        st = dnnl_primitive_execute(p->prim, stream, nargs, args);
    for (int i = 0; i < OPERANDS && st == dnnl_success; i++) {
        bool written;
        operand_arg((enum pass)p->key.pass, i, &written);
        if (p->reorder[i] && written) {
            dnnl_exec_arg_t io[2] = {{DNNL_ARG_FROM, r.blocked[i]}, {DNNL_ARG_TO, r.user[i]}};
            st = dnnl_primitive_execute(p->reorder[i], stream, 2, io);
        }
    }
    if (st == dnnl_success && stream)
        st = dnnl_stream_wait(stream);
    if (stream)
        dnnl_stream_destroy(stream);
    run_release(&r, p);
    return st;
}

/* ---- the kernels ----------------------------------------------------------------------------- */

static bool all_contiguous(int n, const weft_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (t[i] && (!weft_tensor_is_contiguous(t[i]) || t[i]->dtype != WEFT_F32))
            return false;
    return true;
}

static int pass_error(const struct conv_key *k, dnnl_status_t st)
{
    return cpu_onednn_error(st, "conv2d: oneDNN's convolution for input [%lld, %lld, %lld, "
                                "%lld] and weight [%lld, %lld, %lld, %lld]",
                            (long long)k->N, (long long)k->C, (long long)k->H, (long long)k->W,
                            (long long)k->Cout, (long long)k->C, (long long)k->kh,
                            (long long)k->kw);
}

/* ---- the weight gradient, in pieces of the batch ------------------------------------------ */

/* The weight gradient sums over the batch, and oneDNN splits that sum among its threads:
 * its bits would follow how many run (1 against 2 threads moved the MNIST CNN's first
 * layer in the 9th digit). So the batch is cut here into cpu_split_threads() pieces, each
 * summed on one thread by a primitive made for one, and the pieces' gradients are added in
 * order: the same bits whether one thread runs the pieces or several. */
struct weight_pieces {
    const struct conv_prim *prim[2]; /* for the pieces of N / P images and of one more */
    int64_t N, P, lo;                /* lo = N / P */
    char *x, *y;
    size_t x_image, y_image;         /* bytes of one image of x and of y */
    float **dw, **db;                /* [P]: piece k's weight and bias gradients */
    dnnl_status_t *st;               /* [P] */
};

static void weight_piece_range(void *ctx, int64_t begin, int64_t end)
{
    const struct weight_pieces *j = ctx;
    for (int64_t k = begin; k < end; k++) {
        int64_t n0 = j->N * k / j->P, n1 = j->N * (k + 1) / j->P;
        void *data[OPERANDS] = {j->x + (size_t)n0 * j->x_image, j->dw[k],
                                j->y + (size_t)n0 * j->y_image};
        j->st[k] = run_pass(j->prim[n1 - n0 > j->lo], data, j->db ? j->db[k] : NULL);
    }
}

static int weight_pass(const struct conv_key *k, const weft_tensor *x, const weft_tensor *w,
                       const weft_tensor *y, const weft_tensor *bias)
{
    int64_t P = cpu_split_threads();
    if (P > k->N)
        P = k->N;
    struct conv_key kp[2] = {*k, *k};
    kp[0].N = k->N / P;
    kp[1].N = kp[0].N + 1;
    kp[0].threads = kp[1].threads = 1;
    struct conv_prim tmp[2];
    memset(tmp, 0, sizeof tmp);
    const struct conv_prim *prim[2] = {NULL, NULL};
    dnnl_status_t st = dnnl_success;
    bool uneven = k->N % P != 0;
    for (int i = 0; i < 1 + uneven && st == dnnl_success; i++)
        prim[i] = find_prim(&kp[i], &tmp[i], &st);
    size_t wn = (size_t)weft_tensor_numel(w), bn = bias ? (size_t)weft_tensor_numel(bias) : 0;
    size_t extra = (size_t)(P - 1) * (wn + bn) * sizeof(float);
    float **dw = calloc((size_t)P, sizeof *dw), **db = calloc((size_t)P, sizeof *db);
    dnnl_status_t *pst = calloc((size_t)P, sizeof *pst);
    float *more = extra ? cpu_alloc(0, extra) : NULL;
    if (st == dnnl_success && (!dw || !db || !pst || (extra && !more)))
        st = dnnl_out_of_memory;
    if (st == dnnl_success) {
        dw[0] = weft_tensor_data(w);
        db[0] = bias ? weft_tensor_data(bias) : NULL;
        for (int64_t p = 1; p < P; p++) {
            dw[p] = more + (size_t)(p - 1) * (wn + bn);
            db[p] = bias ? dw[p] + wn : NULL;
        }
        struct weight_pieces j = {
            .prim = {prim[0], uneven ? prim[1] : prim[0]}, .N = k->N, .P = P, .lo = kp[0].N,
            .x = weft_tensor_data(x), .y = weft_tensor_data(y),
            .x_image = (size_t)(k->C * k->H * k->W) * sizeof(float),
            .y_image = (size_t)(k->Cout * k->OH * k->OW) * sizeof(float),
            .dw = dw, .db = bias ? db : NULL, .st = pst};
        cpu_parallel_for(P, 1, weight_piece_range, &j);
        for (int64_t p = 0; p < P && st == dnnl_success; p++)
            st = pst[p];
        /* piece 0 wrote the output; the others add to it one after another */
        for (int64_t p = 1; p < P && st == dnnl_success; p++) {
            for (size_t i = 0; i < wn; i++)
                dw[0][i] += dw[p][i];
            for (size_t i = 0; i < bn; i++)
                db[0][i] += db[p][i];
        }
    }
    if (more)
        cpu_free(0, more, extra);
    free(dw);
    free(db);
    free(pst);
    for (int i = 0; i < 2; i++)
        if (tmp[i].prim)
            destroy_prim(&tmp[i]);
    return st == dnnl_success ? 0 : pass_error(k, st);
}

/* x: the [N, C, H, W] side, w the weight, y the [N, Cout, OH, OW] side of the call. */
static int conv_pass(const struct weft_op_call *call, enum pass pass, const weft_tensor *x,
                     const weft_tensor *w, const weft_tensor *y, const weft_tensor *bias)
{
    const weft_tensor *all[4] = {x, w, y, bias};
    if (!all_contiguous(4, all) || x->ndim != 4 || w->ndim != 4 || y->ndim != 4)
        return weft_error_set(WEFT_ERR_VALUE,
                              "conv2d (oneDNN): expects contiguous float32 4-d operands");
    const int64_t *g = call->ints; /* kh kw sh sw ph pw dh dw */
    struct conv_key k = {pass,         x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                         w->shape[0],  g[0],        g[1],        g[2],        g[3],
                         g[4],         g[5],        g[6],        g[7],        y->shape[2],
                         y->shape[3],  bias != NULL, 1};
    if (weft_tensor_numel(x) == 0 || weft_tensor_numel(y) == 0 || weft_tensor_numel(w) == 0)
        return weft_error_set(WEFT_ERR_VALUE, "conv2d (oneDNN): empty operands take im2col");
    if (pass == PASS_BACKWARD_WEIGHT)
        return weight_pass(&k, x, w, y, bias);
    k.threads = cpu_run_threads(); /* each output is one thread's sum: any count gives its bits */
    struct conv_prim tmp = {0};
    dnnl_status_t st;
    const struct conv_prim *p = find_prim(&k, &tmp, &st);
    if (p) {
        void *data[OPERANDS] = {weft_tensor_data(x), weft_tensor_data(w), weft_tensor_data(y)};
        st = run_pass(p, data, bias ? weft_tensor_data(bias) : NULL);
    }
    if (tmp.prim)
        destroy_prim(&tmp);
    return st == dnnl_success ? 0 : pass_error(&k, st);
}

static int conv2d_kernel(const struct weft_op_call *call)
{
    return conv_pass(call, PASS_FORWARD, call->in[0], call->in[1], call->out[0],
                     call->nin > 2 ? call->in[2] : NULL);
}

static int conv2d_backward_input_kernel(const struct weft_op_call *call)
{
    return conv_pass(call, PASS_BACKWARD_INPUT, call->out[0], call->in[1], call->in[0], NULL);
}

static int conv2d_backward_weight_kernel(const struct weft_op_call *call)
{
    return conv_pass(call, PASS_BACKWARD_WEIGHT, call->in[1], call->out[0], call->in[0],
                     call->nout > 1 ? call->out[1] : NULL);
}

const struct weft_kernel_entry cpu_onednn_conv_kernels[] = {
    {-1, WEFT_OP_CONV2D_NAME, WEFT_DTYPE_BIT(WEFT_F32), conv2d_kernel},
    {-1, WEFT_OP_CONV2D_BACKWARD_INPUT_NAME, WEFT_DTYPE_BIT(WEFT_F32), conv2d_backward_input_kernel},
    {-1, WEFT_OP_CONV2D_BACKWARD_WEIGHT_NAME, WEFT_DTYPE_BIT(WEFT_F32), conv2d_backward_weight_kernel},
    {0},
};

#else

/* Without oneDNN, conv2d is nn's im2col + GEMM. */
const struct weft_kernel_entry cpu_onednn_conv_kernels[] = {{0}};

#endif
