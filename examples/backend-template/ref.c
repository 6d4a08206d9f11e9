/* weft-ref.so: a reference backend built out of tree against an installed weft.
 *
 * Device "ref" keeps its memory in host memory (malloc), so every kernel is a plain loop.
 * Values travel through double: load() and store() convert one element, which keeps the
 * kernels dtype-agnostic and short. A real backend would write one loop per dtype (or
 * launch device code) instead; the registration and the contracts stay the same.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/backend.h>
#include <weft/error.h>
#include <weft/kernel.h>
#include <weft/plugin.h>

#define FLOATS (WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64))
/* Every dtype load()/store() know: all but the 16-bit floats. */
#define PLAIN (FLOATS | WEFT_DTYPE_BIT(WEFT_BOOL) | WEFT_DTYPE_BIT(WEFT_U8) |                  \
               WEFT_DTYPE_BIT(WEFT_I8) | WEFT_DTYPE_BIT(WEFT_I16) | WEFT_DTYPE_BIT(WEFT_I32) |   \
               WEFT_DTYPE_BIT(WEFT_I64))

/* ---- elements ------------------------------------------------------------------------- */

static double load(enum weft_dtype dt, const char *p)
{
    switch (dt) {
    case WEFT_BOOL: return *(const _Bool *)p;
    case WEFT_U8: return *(const uint8_t *)p;
    case WEFT_I8: return *(const int8_t *)p;
    case WEFT_I16: return *(const int16_t *)p;
    case WEFT_I32: return *(const int32_t *)p;
    case WEFT_I64: return (double)*(const int64_t *)p;
    case WEFT_F32: return *(const float *)p;
    default: return *(const double *)p; /* F64: the masks keep other dtypes out */
    }
}

static void store(enum weft_dtype dt, char *p, double v)
{
    switch (dt) {
    case WEFT_BOOL: *(_Bool *)p = v != 0; break;
    case WEFT_U8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
    case WEFT_I8: *(int8_t *)p = (int8_t)v; break;
    case WEFT_I16: *(int16_t *)p = (int16_t)v; break;
    case WEFT_I32: *(int32_t *)p = (int32_t)v; break;
    case WEFT_I64: *(int64_t *)p = (int64_t)v; break;
    case WEFT_F32: *(float *)p = (float)v; break;
    default: *(double *)p = v; break;
    }
}

/* Element offset (in elements) of the linear index over dims [first, first + count). */
static int64_t offset_of(const weft_tensor *t, int first, int count, int64_t linear)
{
    int64_t off = 0;
    for (int d = first + count - 1; d >= first; d--) {
        off += (linear % t->shape[d]) * t->stride[d];
        linear /= t->shape[d];
    }
    return off;
}

static char *at(const weft_tensor *t, int64_t elem_offset)
{
    return (char *)weft_tensor_data(t) + elem_offset * (int64_t)weft_dtype_size(t->dtype);
}

/* ---- elementwise: one loop over weft_iter for every op -------------------------------- */

struct ew {
    int op;
    int nops;                         /* operand 0 is the output */
    enum weft_dtype dt[3];
    double scalar;                    /* FILL's value, or the right operand when in[1] is NULL */
};

static double apply(int op, double a, double b)
{
    switch (op) {
    case WEFT_OP_NEG: return -a;
    case WEFT_OP_EXP: return exp(a);
    case WEFT_OP_RELU: return a > 0 || isnan(a) ? a : 0.0;
    case WEFT_OP_ADD: return a + b;
    case WEFT_OP_SUB: return a - b;
    case WEFT_OP_MUL: return a * b;
    case WEFT_OP_DIV: return a / b;
    default: return a; /* COPY */
    }
}

static void ew_loop(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    const struct ew *e = ctx;
    for (int64_t i = 0; i < n; i++) {
        double a = e->nops > 1 ? load(e->dt[1], data[1] + i * stride[1]) : e->scalar;
        double b = e->nops > 2 ? load(e->dt[2], data[2] + i * stride[2]) : e->scalar;
        store(e->dt[0], data[0] + i * stride[0], apply(e->op, a, b));
    }
}

/* The iterator walks the output first, so writes follow its memory order. */
static int ref_elementwise(const struct weft_op_call *call)
{
    const weft_tensor *ops[3] = {call->out[0]};
    struct ew e = {.op = call->op, .nops = 1, .scalar = call->scalar[0]};
    for (int i = 0; i < call->nin && call->in[i]; i++)
        ops[e.nops++] = call->in[i];
    for (int i = 0; i < e.nops; i++) {
        e.dt[i] = ops[i]->dtype;
        if (!(PLAIN & WEFT_DTYPE_BIT(e.dt[i])))
            return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on ref",
                                  weft_op_name(call->op), weft_dtype_torch_name(e.dt[i]));
    }
    if (weft_tensor_numel(call->out[0]) == 0)
        return 0;
    struct weft_iter it;
    int rc = weft_iter_init(&it, e.nops, ops);
    if (rc < 0)
        return rc;
    weft_iter_run(&it, 0, it.numel, ew_loop, &e);
    return 0;
}

/* ---- SUM: in[0]'s last k dims are reduced into out[0] (kernel.h) ---------------------- */

static int ref_sum(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out = call->out[0];
    int k = (int)call->ints[0], lead = in->ndim - k;
    int64_t outer = weft_tensor_numel(out), inner = 1;
    for (int d = lead; d < in->ndim; d++)
        inner *= in->shape[d];
    for (int64_t o = 0; o < outer; o++) {
        int64_t base = offset_of(in, 0, lead, o);
        double acc = 0.0;
        for (int64_t i = 0; i < inner; i++)
            acc += load(in->dtype, at(in, base + offset_of(in, lead, k, i)));
        store(out->dtype, at(out, offset_of(out, 0, out->ndim, o)), acc);
    }
    return 0;
}

/* ---- MATMUL: [B, M, K] x [B, K, N] -> [B, M, N], any strides --------------------------- */

static int ref_matmul(const struct weft_op_call *call)
{
    const weft_tensor *a = call->in[0], *b = call->in[1];
    weft_tensor *c = call->out[0];
    int64_t B = c->shape[0], M = c->shape[1], N = c->shape[2], K = a->shape[2];
    if (weft_tensor_numel(c) == 0)
        return 0;
    for (int64_t p = 0; p < B; p++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0.0;
                for (int64_t x = 0; x < K; x++) {
                    int64_t ao = p * a->stride[0] + i * a->stride[1] + x * a->stride[2];
                    int64_t bo = p * b->stride[0] + x * b->stride[1] + j * b->stride[2];
                    acc += load(a->dtype, at(a, ao)) * load(b->dtype, at(b, bo));
                }
                store(c->dtype, at(c, p * c->stride[0] + i * c->stride[1] + j * c->stride[2]),
                      acc);
            }
    return 0;
}

/* ---- the device ----------------------------------------------------------------------- */

static int ref_device_count(void *context)
{
    return 1;
}

static int ref_device_name(void *context, int index, char *buf, size_t size)
{
    snprintf(buf, size, "reference device %d (host memory)", index);
    return 0;
}

static void *ref_alloc(void *context, int index, size_t nbytes)
{
    void *p = malloc(nbytes ? nbytes : 1); /* a valid pointer even for 0 bytes */
    if (!p)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ref: tried to allocate %zu bytes", nbytes);
    return p;
}

static void ref_free(void *context, int index, void *ptr, size_t nbytes)
{
    free(ptr);
}

/* Host <-> device and device <-> device are all memcpy here: the memory is the host's.
 * The core hands over dense blocks of one dtype and numel. */
static int ref_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    size_t nbytes = (size_t)weft_tensor_numel(src) * weft_dtype_size(src->dtype);
    if (nbytes)
        memcpy(weft_tensor_data(dst), weft_tensor_data(src), nbytes);
    return 0;
}

/* The vtable header: kind, name (the device type), and the ABI and size it was built for,
 * which weft_register() checks. */
static const struct weft_backend ref_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "ref", struct weft_backend),
    .device_count = ref_device_count,
    .device_name = ref_device_name,
    .alloc = ref_alloc,
    .free = ref_free,
    .copy = ref_copy,
};

/* ---- registration --------------------------------------------------------------------- */

/* options: the host's settings for this plugin ([ref] in weft-train's INI); the template
 * has none. */
static int ref_init(const weft_options *options)
{
    (void)options;
    /* One row per op (or name, for named ops): dtypes the function takes, the function;
     * a row of fn NULL ends it. */
    static const struct weft_kernel_entry kernels[] = {
        {WEFT_OP_COPY, NULL, PLAIN, ref_elementwise},  {WEFT_OP_FILL, NULL, PLAIN, ref_elementwise},
        {WEFT_OP_NEG, NULL, FLOATS, ref_elementwise},  {WEFT_OP_EXP, NULL, FLOATS, ref_elementwise},
        {WEFT_OP_RELU, NULL, FLOATS, ref_elementwise}, {WEFT_OP_ADD, NULL, FLOATS, ref_elementwise},
        {WEFT_OP_SUB, NULL, FLOATS, ref_elementwise},  {WEFT_OP_MUL, NULL, FLOATS, ref_elementwise},
        {WEFT_OP_DIV, NULL, FLOATS, ref_elementwise},  {WEFT_OP_SUM, NULL, FLOATS, ref_sum},
        {WEFT_OP_MATMUL, NULL, FLOATS, ref_matmul},    {0},
    };
    int type = weft_register(&ref_backend); /* the device type id */
    if (type < 0)
        return type;
    return weft_kernel_register_table(type, WEFT_LAYOUT_STRIDED, kernels);
}

/* What this plugin provides, read from the file without loading it: naming device "ref"
 * (runtime.backend = ref, weft_device_parse("ref:0")) finds and loads weft-ref.so. */
WEFT_PLUGIN_MANIFEST("provides backend:ref\n");

static const struct weft_plugin ref_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "ref", struct weft_plugin),
    .version = "0.1.0",
    .manifest = weft_plugin_manifest,
    .description = "reference backend: host memory, plain loops (out-of-tree template)",
    .probe = NULL, /* always usable: it needs nothing but the host */
    .init = ref_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &ref_plugin;
}
