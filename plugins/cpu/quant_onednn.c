/* plugins/cpu/quant_onednn.c: quantized_linear and quantized_conv2d (weft/kernel_quant.h)
 * through oneDNN's int8 matmul and convolution: uint8 activations x int8 weights into int32
 * on the processor's int8 dot-product units (AVX-512 VNNI, AMX where present).
 *
 * The contract's epilogue is the primitive's: the int32 bias is added in the accumulator
 * (oneDNN 2.x adds a bias before its scales), then post-ops multiply by the per-channel
 * multipliers (a binary mul reading them as runtime data), add the float bias, apply the
 * ReLU, and add the output zero point (eltwise linear); the conversion to uint8 rounds half
 * to even and saturates. That is the reference's arithmetic, and the tests compare bit for
 * bit. The multipliers could be oneDNN's output scales, but those are baked into the
 * primitive; as data, one primitive per shape serves every layer of that shape.
 *
 * Weights are packed once: the caller's slot (params->packed) receives a uint8 tensor
 * holding the layout oneDNN asked for (format_tag_any: blocked for the VNNI/AMX kernels,
 * with the compensation a source zero point needs) behind a header with its descriptor,
 * made on the first call. Later calls hand the packed weights straight to the primitive; a
 * primitive that wants another layout (another batch size can pick another kernel) gets a
 * per-call reorder, and so does a call without a slot.
 *
 * Primitives are kept per shape and attributes, as onednn_matmul.c keeps its matmuls, and
 * each call brings its own scratchpad (Debian's oneDNN shares a global one). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <weft/kernel_quant.h>

#ifdef WEFT_HAVE_ONEDNN
#include "onednn_engine.h"
#endif

#include "cpu.h"

#ifdef WEFT_HAVE_ONEDNN

/* What a primitive is made for: all int64, no padding, compared with memcmp. The strides
 * are the activations' (conv: NCHW or channels-last, or anything else). */
struct qkey {
    int64_t conv; /* 0 matmul, 1 conv */
    int64_t threads, dst_f32, relu, out_zp, in_zp, float_bias;
    int64_t M, N, K;                     /* matmul: x [M, K], w [N, K] */
    int64_t B, C, H, W, Co, OH, OW;      /* conv */
    int64_t g[8];                        /* conv geometry */
    int64_t xs[4], ys[4];                /* conv strides of x and y */
};

struct qprim {
    struct qkey key;
    dnnl_primitive_t prim; /* NULL: empty slot */
    dnnl_memory_desc_t src, wei, dst, bias, mul, add, scratch, plain_wei;
    size_t scratch_bytes;
};

#define QPRIMS 64
static struct qprim prims[QPRIMS];
static int prims_used;
static pthread_mutex_t prims_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- making a primitive -------------------------------------------------------------------- */

static dnnl_status_t md_strided(dnnl_memory_desc_t *md, int nd, const int64_t *dims,
                                const int64_t *strides, dnnl_data_type_t dt)
{
    dnnl_dims_t d, s;
    for (int i = 0; i < nd; i++) {
        d[i] = dims[i];
        s[i] = strides[i];
    }
    return dnnl_memory_desc_init_by_strides(md, nd, d, dt, s);
}

/* The attributes: user scratchpad, the source zero point (conv), and the post-ops chain
 * multiplier [, float bias] [, relu] [, + output zero point]. */
static dnnl_status_t make_attr(const struct qkey *k, const dnnl_memory_desc_t *mul,
                               const dnnl_memory_desc_t *add, dnnl_primitive_attr_t *attr)
{
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && k->in_zp) {
        const int32_t zp = (int32_t)k->in_zp;
        st = dnnl_primitive_attr_set_zero_points(*attr, DNNL_ARG_SRC, 1, 0, &zp);
    }
    if (st == dnnl_success)
        st = dnnl_post_ops_create(&po);
    if (st == dnnl_success)
        st = dnnl_post_ops_append_binary(po, dnnl_binary_mul, mul);
    if (st == dnnl_success && k->float_bias)
        st = dnnl_post_ops_append_binary(po, dnnl_binary_add, add);
    if (st == dnnl_success && k->relu)
        st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    if (st == dnnl_success && !k->dst_f32 && k->out_zp)
        st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, 1.0f, (float)k->out_zp);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_post_ops(*attr, po);
    if (po)
        dnnl_post_ops_destroy(po);
    return st;
}

/* Fills p for k (needs prims_lock). */
static dnnl_status_t make_prim(struct qprim *p, const struct qkey *k)
{
    dnnl_status_t st;
    dnnl_engine_t engine = cpu_onednn_engine(&st);
    if (!engine)
        return st;
    memset(p, 0, sizeof *p);
    p->key = *k;
    const dnnl_data_type_t dst_dt = k->dst_f32 ? dnnl_f32 : dnnl_u8;
    dnnl_memory_desc_t wei_any;
    union {
        dnnl_matmul_desc_t mm;
        dnnl_convolution_desc_t conv;
    } desc;
    const int64_t per_channel[4] = {1, k->conv ? k->Co : k->N, 1, 1};
    if (!k->conv) {
        /* y [M, N] = x [M, K] w^T: the weights as a [K, N] matrix with strides (1, K). */
        const int64_t xd[2] = {k->M, k->K}, xs[2] = {k->K, 1}, yd[2] = {k->M, k->N},
                      ys[2] = {k->N, 1}, wd[2] = {k->K, k->N}, ws[2] = {1, k->K};
        const int64_t row[2] = {1, k->N}, rows[2] = {k->N, 1};
        if ((st = md_strided(&p->src, 2, xd, xs, dnnl_u8)) != dnnl_success ||
            (st = md_strided(&p->dst, 2, yd, ys, dst_dt)) != dnnl_success ||
            (st = md_strided(&p->plain_wei, 2, wd, ws, dnnl_s8)) != dnnl_success ||
            (st = md_strided(&p->bias, 2, row, rows, dnnl_s32)) != dnnl_success ||
            (st = md_strided(&p->mul, 2, row, rows, dnnl_f32)) != dnnl_success ||
            (st = md_strided(&p->add, 2, row, rows, dnnl_f32)) != dnnl_success ||
            (st = dnnl_memory_desc_init_by_tag(&wei_any, 2, (dnnl_dims_t){k->K, k->N}, dnnl_s8,
                                               dnnl_format_tag_any)) != dnnl_success ||
            (st = dnnl_matmul_desc_init(&desc.mm, &p->src, &wei_any, &p->bias, &p->dst)) !=
                dnnl_success)
            return st;
    } else {
        const int64_t xd[4] = {k->B, k->C, k->H, k->W}, yd[4] = {k->B, k->Co, k->OH, k->OW};
        const int64_t wd[4] = {k->Co, k->C, k->g[0], k->g[1]};
        const int64_t ws[4] = {k->C * k->g[0] * k->g[1], k->g[0] * k->g[1], k->g[1], 1};
        const int64_t one = 1, mul_s[4] = {k->Co, 1, 1, 1};
        const int64_t *g = k->g;
        dnnl_dims_t strides = {g[2], g[3]}, dil = {g[6] - 1, g[7] - 1}, pad = {g[4], g[5]};
        if ((st = md_strided(&p->src, 4, xd, k->xs, dnnl_u8)) != dnnl_success ||
            (st = md_strided(&p->dst, 4, yd, k->ys, dst_dt)) != dnnl_success ||
            (st = md_strided(&p->plain_wei, 4, wd, ws, dnnl_s8)) != dnnl_success ||
            (st = md_strided(&p->bias, 1, &k->Co, &one, dnnl_s32)) != dnnl_success ||
            (st = md_strided(&p->mul, 4, per_channel, mul_s, dnnl_f32)) != dnnl_success ||
            (st = md_strided(&p->add, 4, per_channel, mul_s, dnnl_f32)) != dnnl_success ||
            (st = dnnl_memory_desc_init_by_tag(&wei_any, 4, (dnnl_dims_t){k->Co, k->C, g[0], g[1]},
                                               dnnl_s8, dnnl_format_tag_any)) != dnnl_success ||
            (st = dnnl_dilated_convolution_forward_desc_init(
                 &desc.conv, dnnl_forward_inference, dnnl_convolution_direct, &p->src, &wei_any,
                 &p->bias, &p->dst, strides, dil, pad, pad)) != dnnl_success)
            return st;
    }
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    st = make_attr(k, &p->mul, &p->add, &attr);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return st;
    const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (!w)
        st = dnnl_runtime_error;
    else
        p->wei = *w;
    p->scratch_bytes = s ? dnnl_memory_desc_get_size(s) : 0;
    if (s)
        p->scratch = *s;
    if (st == dnnl_success)
        st = dnnl_primitive_create(&p->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* The cached primitive for k, or one made into *tmp (the caller destroys tmp->prim). */
static const struct qprim *find_prim(const struct qkey *k, struct qprim *tmp, dnnl_status_t *st)
{
    *st = dnnl_success;
    pthread_mutex_lock(&prims_lock);
    for (int i = 0; i < prims_used; i++)
        if (memcmp(&prims[i].key, k, sizeof *k) == 0) {
            pthread_mutex_unlock(&prims_lock);
            return &prims[i];
        }
    struct qprim *p = prims_used < QPRIMS ? &prims[prims_used] : tmp;
    *st = make_prim(p, k);
    if (*st != dnnl_success) {
        if (p->prim)
            dnnl_primitive_destroy(p->prim);
        p->prim = NULL;
    } else if (p != tmp) {
        prims_used++;
    }
    pthread_mutex_unlock(&prims_lock);
    return *st == dnnl_success ? p : NULL;
}

/* ---- packed weights ---------------------------------------------------------------------- */

/* The slot's tensor: this header, then the packed weights from byte PACK_DATA. */
struct pack_header {
    char magic[8];          /* "weftqpk" */
    dnnl_memory_desc_t md;  /* the layout of the bytes that follow */
};
#define PACK_DATA ((sizeof(struct pack_header) + 63) / 64 * 64)

/* w (plain) reordered into md's layout at dst. */
static dnnl_status_t reorder_weights(const struct qprim *p, const dnnl_memory_desc_t *md,
                                     const void *w, void *dst)
{
    dnnl_status_t st;
    dnnl_engine_t engine = cpu_onednn_engine(&st);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t from = NULL, to = NULL;
    dnnl_stream_t stream = NULL;
    if (engine &&
        (st = dnnl_reorder_primitive_desc_create(&pd, &p->plain_wei, engine, md, engine, NULL)) ==
            dnnl_success &&
        (st = dnnl_primitive_create(&r, pd)) == dnnl_success &&
        (st = dnnl_memory_create(&from, &p->plain_wei, engine, (void *)w)) == dnnl_success &&
        (st = dnnl_memory_create(&to, md, engine, dst)) == dnnl_success &&
        (st = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags)) == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        st = dnnl_primitive_execute(r, stream, 2, args);
        if (st == dnnl_success)
            st = dnnl_stream_wait(stream);
    }
    if (stream)
        dnnl_stream_destroy(stream);
    if (from)
        dnnl_memory_destroy(from);
    if (to)
        dnnl_memory_destroy(to);
    if (r)
        dnnl_primitive_destroy(r);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return st;
}

static pthread_mutex_t pack_lock = PTHREAD_MUTEX_INITIALIZER;

/* The packed weights for p: the slot's when their layout is p's (packing w into an empty
 * slot first), else NULL (the caller reorders). */
static const void *packed_weights(const struct qprim *p, weft_tensor **slot, const void *w,
                                  dnnl_status_t *st)
{
    *st = dnnl_success;
    if (!slot)
        return NULL;
    pthread_mutex_lock(&pack_lock);
    weft_tensor *t = *slot;
    if (!t) {
        int64_t bytes = (int64_t)(PACK_DATA + dnnl_memory_desc_get_size(&p->wei));
        weft_scope_push(); /* one reference, the slot's, whatever scope the caller has open */
        t = weft_tensor_retain(weft_empty(1, &bytes, WEFT_U8, WEFT_CPU));
        weft_scope_pop();
        char *d = t ? weft_tensor_data(t) : NULL;
        if (!t) {
            *st = dnnl_out_of_memory;
        } else {
            struct pack_header h = {.magic = "weftqpk", .md = p->wei};
            memcpy(d, &h, sizeof h);
            *st = reorder_weights(p, &p->wei, w, d + PACK_DATA);
        }
        if (*st == dnnl_success)
            *slot = t;
        else
            weft_tensor_release(t);
        t = *slot;
    }
    const char *d = t ? weft_tensor_data(t) : NULL;
    struct pack_header h;
    if (d)
        memcpy(&h, d, sizeof h);
    pthread_mutex_unlock(&pack_lock);
    if (!d || memcmp(h.magic, "weftqpk", 8) != 0 || !dnnl_memory_desc_equal(&h.md, &p->wei))
        return NULL;
    return d + PACK_DATA;
}

/* ---- running ----------------------------------------------------------------------------- */

struct qargs {
    const void *x, *w, *bias, *mul, *add;
    void *y;
    weft_tensor **slot;
};

static dnnl_status_t run(const struct qprim *p, const struct qargs *a)
{
    dnnl_status_t st;
    dnnl_engine_t engine = cpu_onednn_engine(&st);
    const void *wei = engine ? packed_weights(p, a->slot, a->w, &st) : NULL;
    void *own = NULL, *scratch_buf = NULL;
    size_t own_bytes = 0;
    if (st == dnnl_success && !wei) {
        own_bytes = dnnl_memory_desc_get_size(&p->wei);
        if (!(own = cpu_alloc(0, own_bytes ? own_bytes : 1)))
            st = dnnl_out_of_memory;
        else if ((st = reorder_weights(p, &p->wei, a->w, own)) == dnnl_success)
            wei = own;
    }
    if (st == dnnl_success && p->scratch_bytes && !(scratch_buf = cpu_alloc(0, p->scratch_bytes)))
        st = dnnl_out_of_memory;
    enum { SRC, WEI, DST, BIAS, MUL, ADD, SCRATCH, COUNT };
    const dnnl_memory_desc_t *mds[COUNT] = {&p->src, &p->wei, &p->dst, &p->bias, &p->mul,
                                            &p->add, &p->scratch};
    void *data[COUNT] = {(void *)a->x, (void *)wei, a->y, (void *)a->bias, (void *)a->mul,
                         (void *)a->add, scratch_buf};
    const int arg[COUNT] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS,
                            DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                            DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
                            DNNL_ARG_SCRATCHPAD};
    dnnl_memory_t mem[COUNT] = {0};
    dnnl_exec_arg_t args[COUNT];
    int nargs = 0;
    for (int i = 0; i < COUNT && st == dnnl_success; i++) {
        if ((i == ADD && !p->key.float_bias) || (i == SCRATCH && !scratch_buf))
            continue;
        if ((st = dnnl_memory_create(&mem[i], mds[i], engine, data[i])) == dnnl_success)
            args[nargs++] = (dnnl_exec_arg_t){arg[i], mem[i]};
    }
    dnnl_stream_t stream = NULL;
    if (st == dnnl_success &&
        (st = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags)) == dnnl_success &&
        (st = dnnl_primitive_execute(p->prim, stream, nargs, args)) == dnnl_success)
        st = dnnl_stream_wait(stream);
    if (stream)
        dnnl_stream_destroy(stream);
    for (int i = 0; i < COUNT; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    cpu_free(0, scratch_buf, p->scratch_bytes);
    cpu_free(0, own, own_bytes ? own_bytes : 1);
    return st;
}

static int execute(const struct qkey *k, const struct qargs *a, const char *what)
{
    struct qprim tmp = {0};
    dnnl_status_t st;
    const struct qprim *p = find_prim(k, &tmp, &st);
    if (p)
        st = run(p, a);
    if (tmp.prim)
        dnnl_primitive_destroy(tmp.prim);
    if (st == dnnl_success)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "%s: oneDNN's int8 %s failed (status %d)", what,
                          k->conv ? "convolution" : "matmul", (int)st);
}

static bool contiguous_of(const weft_tensor *t, enum weft_dtype dt, int ndim)
{
    return t && t->dtype == dt && t->ndim == ndim && weft_tensor_is_contiguous(t);
}

static int linear_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0], *w = call->in[1], *b = call->in[2], *m = call->in[3];
    weft_tensor *y = call->out[0];
    const struct weft_quantized_linear_params *p = call->params;
    if (call->params_size != sizeof *p || !contiguous_of(x, WEFT_U8, 2) ||
        !contiguous_of(w, WEFT_I8, 2) || !contiguous_of(b, WEFT_I32, 1) ||
        !contiguous_of(m, WEFT_F32, 1) || !y || y->ndim != 2 || !weft_tensor_is_contiguous(y) ||
        (y->dtype != WEFT_U8 && y->dtype != WEFT_F32) ||
        (p->bias && !contiguous_of(p->bias, WEFT_F32, 1)))
        return weft_error_set(WEFT_ERR_RUNTIME, "quantized_linear: operands outside the contract "
                                                "of weft/kernel_quant.h");
    if (weft_tensor_numel(y) == 0)
        return 0;
    const bool f32 = y->dtype == WEFT_F32;
    struct qkey k = {.conv = 0, .threads = cpu_run_threads(), .dst_f32 = f32,
                     .relu = call->ints[0] != 0, .out_zp = f32 ? 0 : call->ints[1],
                     .float_bias = f32 && p->bias, .M = x->shape[0], .N = w->shape[0],
                     .K = x->shape[1]};
    struct qargs a = {weft_tensor_data(x), weft_tensor_data(w), weft_tensor_data(b),
                      weft_tensor_data(m), k.float_bias ? weft_tensor_data(p->bias) : NULL,
                      weft_tensor_data(y), p->packed};
    return execute(&k, &a, WEFT_OP_QUANTIZED_LINEAR_NAME);
}

static int conv_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0], *w = call->in[1], *b = call->in[2], *m = call->in[3];
    weft_tensor *y = call->out[0];
    const struct weft_quantized_conv2d_params *p = call->params;
    if (call->params_size != sizeof *p || !x || x->dtype != WEFT_U8 || x->ndim != 4 ||
        !contiguous_of(w, WEFT_I8, 4) || !contiguous_of(b, WEFT_I32, 1) ||
        !contiguous_of(m, WEFT_F32, 1) || !y || y->ndim != 4 ||
        (y->dtype != WEFT_U8 && y->dtype != WEFT_F32))
        return weft_error_set(WEFT_ERR_RUNTIME, "quantized_conv2d: operands outside the contract "
                                                "of weft/kernel_quant.h");
    if (weft_tensor_numel(y) == 0)
        return 0;
    bool done; /* a 1-channel input, which oneDNN would pad to 4 */
    int rc = cpu_quant_conv_direct(call, &done);
    if (done || rc != 0)
        return rc;
    const bool f32 = y->dtype == WEFT_F32;
    struct qkey k = {.conv = 1, .threads = cpu_run_threads(), .dst_f32 = f32,
                     .relu = call->ints[8] != 0, .out_zp = f32 ? 0 : call->ints[9],
                     .in_zp = call->ints[10], .B = x->shape[0], .C = x->shape[1],
                     .H = x->shape[2], .W = x->shape[3], .Co = w->shape[0], .OH = y->shape[2],
                     .OW = y->shape[3]};
    memcpy(k.g, call->ints, sizeof k.g);
    memcpy(k.xs, x->stride, sizeof k.xs);
    memcpy(k.ys, y->stride, sizeof k.ys);
    struct qargs a = {weft_tensor_data(x), weft_tensor_data(w), weft_tensor_data(b),
                      weft_tensor_data(m), NULL, weft_tensor_data(y), p->packed};
    return execute(&k, &a, WEFT_OP_QUANTIZED_CONV2D_NAME);
}

const struct weft_kernel_entry cpu_quant_onednn_kernels[] = {
    {-1, WEFT_OP_QUANTIZED_LINEAR_NAME, WEFT_DTYPE_BIT(WEFT_U8), linear_kernel},
    {-1, WEFT_OP_QUANTIZED_CONV2D_NAME, WEFT_DTYPE_BIT(WEFT_U8), conv_kernel},
    {0},
};

#else

/* Without oneDNN nothing is registered: libweft-quant's reference loops run the products. */
const struct weft_kernel_entry cpu_quant_onednn_kernels[] = {{0}};

#endif
