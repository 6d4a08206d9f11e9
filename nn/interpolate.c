/* nn/interpolate.c: F.interpolate (nearest, nearest-exact, linear, bilinear, bicubic, area)
 * over the upsample kernel op and its adjoint (weft/kernel.h), with one backward node.
 *
 * The argument handling is torch/nn/functional.py's interpolate (1.13) line by line, so
 * the same arguments fail with the same words in the same order; output sizes and the
 * scales handed to the kernel are ATen's (upsample::compute_output_size: a scale_factor
 * given and not recomputed also sets the source positions, as 1 / scale). A 3-D input is
 * a [N, C, 1, L] image to the kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "functional.h"

struct interp_plan {
    int mode;          /* WEFT_UPSAMPLE_* */
    bool align;
    int64_t out[2];    /* OH, OW (OH = 1 for 3-D) */
    double scale[2];   /* the kernel's scalars: <= 0 for none */
    const char *node;  /* PyTorch's grad_fn name */
    const char *what;  /* its kernel's name in dtype errors */
};

static int upsample_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_UPSAMPLE_NAME);
}

static int upsample_backward_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_UPSAMPLE_BACKWARD_NAME);
}

/* Python's repr of a float ("2.0", "0.1", "inf"), for the messages that print lists. */
static void float_repr(double v, char *buf, size_t size)
{
    if (isnan(v) || isinf(v)) {
        snprintf(buf, size, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".e"))
        strncat(buf, ".0", size - strlen(buf) - 1);
}

/* "[4, 5]" for ints, "[2.0, 2.0]" for doubles. */
static void list_str(int n, const int64_t *ints, const double *reals, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && used < size; i++) {
        char num[40];
        if (ints)
            snprintf(num, sizeof num, "%lld", (long long)ints[i]);
        else
            float_repr(reals[i], num, sizeof num);
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", num);
    }
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

/* ---- argument processing: functional.py's interpolate ---------------------------------- */

static int mode_error(const weft_tensor *x, const char *mode)
{
    static const struct {
        int ndim;
        const char *mode, *needs;
    } wrong_dims[] = {
        {3, "bilinear", "4D"}, {3, "trilinear", "5D"}, {4, "linear", "3D"},
        {4, "trilinear", "5D"}, {5, "linear", "3D"}, {5, "bilinear", "4D"},
    };
    for (size_t i = 0; i < sizeof wrong_dims / sizeof *wrong_dims; i++)
        if (x->ndim == wrong_dims[i].ndim && strcmp(mode, wrong_dims[i].mode) == 0)
            return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "Got %dD input, but %s mode needs %s input",
                                  x->ndim, mode, wrong_dims[i].needs);
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                          "Input Error: Only 3D, 4D and 5D input Tensors supported (got %dD) for "
                          "the modes: nearest | linear | bilinear | bicubic | trilinear | area | "
                          "nearest-exact (got %s)",
                          x->ndim, mode);
}

/* Output sizes (out[], dim of them) and scales (scales[], or none) as functional.py leaves
 * them; *have_scales says whether scale factors are passed on. */
static int resolve_sizes(const weft_tensor *x, const struct weft_interpolate_params *p,
                         const char *mode, int dim, int64_t *out, double *scales, bool *have_scales)
{
    char a[96], b[160];
    int nsize = p->nsize, nscale = p->nscale;
    if (nsize < -1 || nsize > WEFT_INTERPOLATE_MAX_DIMS || nscale < -1 ||
        nscale > WEFT_INTERPOLATE_MAX_DIMS)
        return weft_error_set(WEFT_ERR_VALUE,
                              "interpolate: nsize and nscale must be -1 (one value), 0 (None) or "
                              "a list length up to %d, but got %d and %d",
                              WEFT_INTERPOLATE_MAX_DIMS, nsize, nscale);
    int n = dim > 0 ? dim : 0;
    *have_scales = false;
    if (nsize != 0 && nscale != 0)
        return weft_error_set(WEFT_ERR_VALUE, "only one of size or scale_factor should be defined");
    if (nsize > 0 && nsize != dim) {
        list_str(dim > 0 ? dim : 0, x->shape + 2, NULL, a, sizeof a);
        list_str(nsize, p->size, NULL, b, sizeof b);
        return weft_error_set(WEFT_ERR_VALUE,
                              "Input and output must have the same number of spatial dimensions, "
                              "but got input with spatial dimensions of %s and output size of %s. "
                              "Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                              "output size in (o1, o2, ...,oK) format.",
                              a, b);
    }
    if (nscale > 0 && nscale != dim) {
        list_str(dim > 0 ? dim : 0, x->shape + 2, NULL, a, sizeof a);
        list_str(nscale, NULL, p->scale_factor, b, sizeof b);
        return weft_error_set(WEFT_ERR_VALUE,
                              "Input and scale_factor must have the same number of spatial "
                              "dimensions, but got input with spatial dimensions of %s and "
                              "scale_factor of shape %s. Please provide input tensor in (N, C, d1, "
                              "d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format.",
                              a, b);
    }
    if (nsize == 0 && nscale == 0)
        return weft_error_set(WEFT_ERR_VALUE, "either size or scale_factor should be defined");
    if (p->recompute_scale_factor == 1 && nsize != 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "recompute_scale_factor is not meaningful with an explicit size.");
    bool recompute = p->recompute_scale_factor == 1 || (strcmp(mode, "area") == 0 && nsize == 0);
    for (int i = 0; i < n && i < WEFT_INTERPOLATE_MAX_DIMS; i++) {
        if (nsize != 0) {
            out[i] = p->size[nsize == -1 ? 0 : i];
            continue;
        }
        double s = p->scale_factor[nscale == -1 ? 0 : i], in = (double)x->shape[i + 2];
        if (!(fabs(in * s) < 9.0e18)) /* NaN or no int64: PyTorch would overflow */
            return weft_error_set(WEFT_ERR_VALUE,
                                  "interpolate: scale_factor %g gives no output size for an "
                                  "input of size %lld",
                                  s, (long long)x->shape[i + 2]);
        /* recomputed: Python's floor(in * s); else ATen's int64 conversion of in * s */
        out[i] = recompute ? (int64_t)floor(in * s) : (int64_t)(in * s);
        scales[i] = s;
    }
    *have_scales = nscale != 0 && !recompute;
    return 0;
}

/* The checks of ATen's upsample_{1,2}d_common_check and the dtype dispatch. */
static int check_sizes(const weft_tensor *x, const struct interp_plan *pl)
{
    char s[160];
    if (x->ndim == 3) {
        if (x->shape[2] <= 0 || pl->out[1] <= 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "Input and output sizes should be greater than 0, but got input "
                                  "(W: %lld) and output (W: %lld)",
                                  (long long)x->shape[2], (long long)pl->out[1]);
    } else if (x->shape[2] <= 0 || x->shape[3] <= 0 || pl->out[0] <= 0 || pl->out[1] <= 0) {
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Input and output sizes should be greater than 0, but got input "
                              "(H: %lld, W: %lld) output (H: %lld, W: %lld)",
                              (long long)x->shape[2], (long long)x->shape[3],
                              (long long)pl->out[0], (long long)pl->out[1]);
    }
    if (weft_tensor_numel(x) == 0 && x->shape[1] == 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Non-empty %dD data tensor expected but got a tensor with sizes %s",
                              x->ndim, weft_shape_str(x->ndim, x->shape, s, sizeof s));
    if (!weft_dtype_is_floating(x->dtype))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'", pl->what,
                              weft_dtype_torch_name(x->dtype));
    if (x->layout != WEFT_LAYOUT_STRIDED)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "interpolate: only strided tensors are supported");
    return 0;
}

/* ---- the op and its node ------------------------------------------------------------------ */

static void plan_ints(const struct interp_plan *pl, struct weft_op_call *call)
{
    call->ints[0] = pl->mode;
    call->ints[1] = pl->align;
    call->scalar[0] = pl->scale[0];
    call->scalar[1] = pl->scale[1];
}

/* ints[0] mode, ints[1] align; scalars[0..1] the scales; input 0's shape from the node. */
static int interp_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    int ndim = weft_node_input_ndim(node, 0);
    weft_tensor *gx = weft_empty(ndim, weft_node_input_shape(node, 0), g->dtype, g->device);
    /* 3-D: the kernel sees [N, C, 1, L] views */
    weft_tensor *gx4 = gx && ndim == 3 ? weft_unsqueeze(gx, 2) : gx;
    g = weft_contiguous(g); /* a channels-last result's gradient, in the kernel's layout */
    weft_tensor *g4 = g && g->ndim == 3 ? weft_unsqueeze(g, 2) : g;
    if (!gx4 || !g4)
        return weft_error_code();
    struct weft_op_call call = {.op = upsample_backward_op(), .nin = 1, .nout = 1};
    call.in[0] = g4;
    call.out[0] = gx4;
    call.ints[0] = weft_node_ints(node)[0];
    call.ints[1] = weft_node_ints(node)[1];
    call.scalar[0] = weft_node_scalars(node)[0];
    call.scalar[1] = weft_node_scalars(node)[1];
    if (weft_dispatch(&call) != 0)
        return weft_error_code();
    grad_inputs[0] = gx;
    return 0;
}

static weft_tensor *upsample(weft_tensor *x, const struct interp_plan *pl)
{
    /* PyTorch's nearest kernels take uint8 images too: nearest copies values, which float32
     * holds exactly, so they go through the float kernel and back. */
    if (x->dtype == WEFT_U8 &&
        (pl->mode == WEFT_UPSAMPLE_NEAREST || pl->mode == WEFT_UPSAMPLE_NEAREST_EXACT)) {
        weft_tensor *y = upsample(weft_to_dtype(x, WEFT_F32), pl);
        return y ? weft_to_dtype(y, WEFT_U8) : NULL;
    }
    if (check_sizes(x, pl) != 0)
        return NULL;
    /* 3-D: the kernel sees [N, C, 1, L] views, made outside the graph; y is the result */
    const int64_t shape[4] = {x->shape[0], x->shape[1], pl->out[0], pl->out[1]};
    const int64_t shape3[3] = {x->shape[0], x->shape[1], pl->out[1]};
    weft_tensor *y = x->ndim == 3 ? weft_empty(3, shape3, x->dtype, x->device)
                                  : weft_empty(4, shape, x->dtype, x->device);
    bool prev = weft_no_grad_begin();
    weft_tensor *x4 = x->ndim == 3 ? weft_unsqueeze(x, 2) : x;
    weft_tensor *y4 = y && x->ndim == 3 ? weft_unsqueeze(y, 2) : y;
    weft_grad_mode_restore(prev);
    if (!x4 || !y4)
        return NULL;
    struct weft_op_call call = {.op = upsample_op(), .nin = 1, .nout = 1};
    call.in[0] = x4;
    call.out[0] = y4;
    plan_ints(pl, &call);
    if (weft_dispatch(&call) != 0)
        return NULL;
    /* channels-last in, channels-last out, as PyTorch's upsampling but bicubic */
    if (pl->mode != WEFT_UPSAMPLE_CUBIC && !(y = nn_like_memory_format(x, y)))
        return NULL;
    if (!weft_autograd_needed(1, &x))
        return y;
    struct weft_node *node = weft_node_create(pl->node, interp_backward, 1, &x, 0);
    if (!node)
        return NULL;
    weft_node_ints(node)[0] = pl->mode;
    weft_node_ints(node)[1] = pl->align;
    weft_node_scalars(node)[0] = pl->scale[0];
    weft_node_scalars(node)[1] = pl->scale[1];
    return weft_nn_attach(node, y);
}

/* mode "area": adaptive average pooling to the output size (functional.py's choice). */
static weft_tensor *area(weft_tensor *x, const int64_t *out)
{
    if (x->ndim == 4)
        return weft_adaptive_avg_pool2d(x, out[0], out[1]);
    return weft_squeeze_dim(weft_adaptive_avg_pool2d(weft_unsqueeze(x, 2), 1, out[1]), 2);
}

static weft_tensor *interp_in_scope(weft_tensor *x, const struct weft_interpolate_params *p)
{
    static const struct weft_interpolate_params defaults = {.align_corners = -1,
                                                            .recompute_scale_factor = -1};
    if (!p)
        p = &defaults;
    const char *mode = p->mode ? p->mode : "nearest";
    bool nearest_like = strcmp(mode, "nearest") == 0 || strcmp(mode, "area") == 0 ||
                        strcmp(mode, "nearest-exact") == 0;
    if (nearest_like && p->align_corners != -1) {
        weft_error_set(WEFT_ERR_VALUE, "align_corners option can only be set with the "
                                       "interpolating modes: linear | bilinear | bicubic | trilinear");
        return NULL;
    }
    int dim = x->ndim - 2;
    int64_t out[WEFT_INTERPOLATE_MAX_DIMS] = {0};
    double scales[WEFT_INTERPOLATE_MAX_DIMS] = {0};
    bool have_scales;
    if (resolve_sizes(x, p, mode, dim, out, scales, &have_scales) != 0)
        return NULL;
    static const struct {
        int ndim;
        const char *mode;
        int kernel_mode;
        const char *node, *what;
    } table[] = {
        {3, "nearest", WEFT_UPSAMPLE_NEAREST, "UpsampleNearest1DBackward1", "compute_indices_weights_nearest"},
        {4, "nearest", WEFT_UPSAMPLE_NEAREST, "UpsampleNearest2DBackward1", "compute_indices_weights_nearest"},
        {3, "nearest-exact", WEFT_UPSAMPLE_NEAREST_EXACT, "UpsampleNearestExact1DBackward1",
         "compute_indices_weights_nearest"},
        {4, "nearest-exact", WEFT_UPSAMPLE_NEAREST_EXACT, "UpsampleNearestExact2DBackward1",
         "compute_indices_weights_nearest"},
        {3, "linear", WEFT_UPSAMPLE_LINEAR, "UpsampleLinear1DBackward1", "compute_indices_weights_linear"},
        {4, "bilinear", WEFT_UPSAMPLE_LINEAR, "UpsampleBilinear2DBackward1", "compute_indices_weights_linear"},
        {4, "bicubic", WEFT_UPSAMPLE_CUBIC, "UpsampleBicubic2DBackward1", "compute_indices_weights_cubic"},
    };
    if ((x->ndim == 3 || x->ndim == 4) && strcmp(mode, "area") == 0)
        return area(x, x->ndim == 3 ? (int64_t[2]){1, out[0]} : out);
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        if (x->ndim != table[i].ndim || strcmp(mode, table[i].mode) != 0)
            continue;
        struct interp_plan pl = {table[i].kernel_mode, p->align_corners > 0, {1, out[0]},
                                 {0, have_scales ? scales[0] : 0}, table[i].node, table[i].what};
        if (x->ndim == 4) {
            pl.out[0] = out[0];
            pl.out[1] = out[1];
            pl.scale[0] = have_scales ? scales[0] : 0;
            pl.scale[1] = have_scales ? scales[1] : 0;
        }
        return upsample(x, &pl);
    }
    static const char *const volumetric[] = {"nearest", "nearest-exact", "area", "trilinear"};
    for (size_t i = 0; x->ndim == 5 && i < sizeof volumetric / sizeof *volumetric; i++)
        if (strcmp(mode, volumetric[i]) == 0) {
            weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                           "interpolate: 5-D (volumetric) inputs are not implemented in weft "
                           "(mode %s)", mode);
            return NULL;
        }
    mode_error(x, mode);
    return NULL;
}

weft_tensor *weft_interpolate(weft_tensor *x, const struct weft_interpolate_params *params)
{
    if (!x)
        return NULL;
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(interp_in_scope(x, params));
    weft_scope_pop();
    return weft_autorelease(y);
}
