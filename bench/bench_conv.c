/* bench/bench_conv.c: weft-bench's convolution group, the MNIST CNN's two Conv2d layers
 * (configs/mnist-cnn.ini, batch 64) through weft and through oneDNN's convolution
 * primitives called directly, side by side, to decide whether weft should hand them to
 * oneDNN (issue 12). Every name starts with "conv_", so `weft-bench --filter conv_` runs
 * the group alone:
 *   conv_<layer>_weft_ms     weft_conv2d forward and backward from a random gradient: the weight and
 *                            bias gradients, and the input's where the layer needs it
 *                            (conv2; conv1's input is the data)
 *   conv_<layer>_onednn_nchw_ms     the same passes as oneDNN primitives on plain
 *                                   NCHW/OIHW memory (what weft holds, so no reorders):
 *                                   forward_training, backward_data where needed,
 *                                   backward_weights with the bias
 *   conv_<layer>_onednn_blocked_ms  the same with the layouts oneDNN picks (format_tag_any:
 *                                   blocked, for its direct JIT kernels), the reorders into
 *                                   them left out: a lower bound of what weft would pay
 * The implementation oneDNN chose for each pass goes to stderr. Without oneDNN only the
 * weft lines are printed. And, from before the group:
 *   conv2d_fwd_bwd_64x8x26x26  GFLOP/s  Conv2d(8, 16, 3, padding=1) on 64 8x26x26 images,
 *                                       forward and the three gradients, through weft
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/nn.h>

#ifdef WEFT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

typedef double (*time_median_fn)(void (*fn)(void *), void *ctx, int repeats);
typedef void (*report_fn)(const char *name, double value, const char *unit);

void bench_conv(bool (*selected)(const char *name), time_median_fn time_median, report_fn report,
                int repeats);

struct conv_layer {
    const char *name;
    int64_t N, C, H, W, Cout, k, pad;
    bool input_grad;
};

static const struct conv_layer layers[] = {
    {"conv1_64x1x28x28_8", 64, 1, 28, 28, 8, 3, 1, false},
    {"conv2_64x8x14x14_16", 64, 8, 14, 14, 16, 3, 1, true},
};

/* ---- weft ---------------------------------------------------------------------------------- */

struct weft_ctx {
    weft_tensor *x, *w, *b, *gy;
    struct weft_conv2d_params p;
};

/* The output's gradient is a contiguous tensor, as a training step's is (a sum's would be
 * a broadcast one, copied before a named kernel reads it). */
static void run_weft(void *p)
{
    struct weft_ctx *c = p;
    weft_scope_push();
    weft_tensor *y = weft_conv2d(c->x, c->w, c->b, &c->p);
    weft_backward(y, c->gy, false);
    weft_scope_pop();
    weft_zero_grad(c->x, true);
    weft_zero_grad(c->w, true);
    weft_zero_grad(c->b, true);
}

/* l's forward and backward through weft (seconds, the median), or -1 with an error. */
static double time_weft(const struct conv_layer *l, time_median_fn time_median, int repeats)
{
    const int64_t xs[4] = {l->N, l->C, l->H, l->W}, ws[4] = {l->Cout, l->C, l->k, l->k},
                  bs[1] = {l->Cout};
    struct weft_ctx c = {.p = {.padding = {l->pad, l->pad}}};
    c.x = weft_rand(4, xs, WEFT_F32, WEFT_CPU);
    c.w = weft_rand(4, ws, WEFT_F32, WEFT_CPU);
    c.b = weft_rand(1, bs, WEFT_F32, WEFT_CPU);
    const int64_t ys[4] = {l->N, l->Cout, l->H + 2 * l->pad - l->k + 1, l->W + 2 * l->pad - l->k + 1};
    c.gy = weft_rand(4, ys, WEFT_F32, WEFT_CPU);
    double s = -1;
    if (c.x && c.w && c.b && c.gy && weft_requires_grad_(c.w, true) == 0 &&
        weft_requires_grad_(c.b, true) == 0 &&
        (!l->input_grad || weft_requires_grad_(c.x, true) == 0))
        s = time_median(run_weft, &c, repeats);
    weft_tensor_release(c.x);
    weft_tensor_release(c.w);
    weft_tensor_release(c.b);
    weft_tensor_release(c.gy);
    return weft_error_code() == WEFT_OK ? s : -1;
}

/* ---- oneDNN -------------------------------------------------------------------------------- */

#ifdef WEFT_HAVE_ONEDNN
enum { FWD, BWD_DATA, BWD_WEIGHTS, PASSES };

struct onednn_ctx {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t prim[PASSES]; /* NULL: pass not run */
    int nargs[PASSES];
    dnnl_exec_arg_t args[PASSES][4];
    dnnl_memory_t mem[16];
    int nmem;
};

static void run_onednn(void *p)
{
    struct onednn_ctx *c = p;
    for (int k = 0; k < PASSES; k++)
        if (c->prim[k])
            dnnl_primitive_execute(c->prim[k], c->stream, c->nargs[k], c->args[k]);
    dnnl_stream_wait(c->stream);
}

/* A memory object over fresh host memory filled with small values. */
static dnnl_memory_t new_memory(struct onednn_ctx *c, const dnnl_memory_desc_t *md)
{
    size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
    float *data = malloc((n ? n : 1) * sizeof *data);
    dnnl_memory_t m = NULL;
    if (!data || c->nmem == (int)(sizeof c->mem / sizeof *c->mem)) {
        free(data);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        data[i] = (float)((i * 37 % 101) - 50) / 64.0f;
    if (dnnl_memory_create(&m, md, c->engine, data) != dnnl_success) {
        free(data);
        return NULL;
    }
    c->mem[c->nmem++] = m;
    return m;
}

/* A memory object for what the primitive descriptor pd queries with `what`. */
static dnnl_memory_t pd_memory(struct onednn_ctx *c, const_dnnl_primitive_desc_t pd,
                               dnnl_query_t what)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
    return md ? new_memory(c, md) : NULL;
}

/* Pass k's primitive for desc with its arguments (memory in the layouts it asks for), its
 * implementation named on stderr; false when oneDNN refuses. */
static bool make_pass(struct onednn_ctx *c, int k, const void *desc,
                      const_dnnl_primitive_desc_t hint, const char *what, int nargs,
                      const int *arg_ids, const dnnl_query_t *queries)
{
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_primitive_desc_create(&pd, desc, NULL, c->engine, hint) != dnnl_success)
        return false;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    fprintf(stderr, "# oneDNN %s: %s\n", what, impl ? impl : "?");
    bool ok = dnnl_primitive_create(&c->prim[k], pd) == dnnl_success;
    for (int a = 0; ok && a < nargs; a++) {
        c->args[k][a] = (dnnl_exec_arg_t){arg_ids[a], pd_memory(c, pd, queries[a])};
        ok = c->args[k][a].memory != NULL;
    }
    c->nargs[k] = nargs;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* One more argument of pass k: memory of md (the bias's plain layout); false without it. */
static bool add_arg(struct onednn_ctx *c, int k, int arg_id, const dnnl_memory_desc_t *md)
{
    dnnl_exec_arg_t *arg = &c->args[k][c->nargs[k]++];
    *arg = (dnnl_exec_arg_t){arg_id, new_memory(c, md)};
    return arg->memory != NULL;
}

/* tag: dnnl_nchw for weft's own layouts (no reorders), dnnl_format_tag_any to let oneDNN
 * choose (blocked layouts; the reorders into them are not timed: a lower bound). */
static double time_onednn(const struct conv_layer *l, dnnl_format_tag_t tag,
                          time_median_fn time_median, int repeats)
{
    struct onednn_ctx c = {0};
    double s = -1;
    int64_t OH = l->H + 2 * l->pad - l->k + 1, OW = l->W + 2 * l->pad - l->k + 1;
    dnnl_dims_t xd = {l->N, l->C, l->H, l->W}, wd = {l->Cout, l->C, l->k, l->k}, bd = {l->Cout},
                yd = {l->N, l->Cout, OH, OW}, strides = {1, 1}, pad = {l->pad, l->pad};
    dnnl_format_tag_t wtag = tag == dnnl_nchw ? dnnl_oihw : tag;
    dnnl_memory_desc_t x_md, w_md, b_md, y_md;
    dnnl_convolution_desc_t fd, dd, wdesc;
    dnnl_primitive_desc_t fwd_pd = NULL;
    if (dnnl_engine_create(&c.engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&c.stream, c.engine, dnnl_stream_default_flags) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&x_md, 4, xd, dnnl_f32, tag) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&w_md, 4, wd, dnnl_f32, wtag) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&y_md, 4, yd, dnnl_f32, tag) != dnnl_success ||
        dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                           &x_md, &w_md, &b_md, &y_md, strides, pad,
                                           pad) != dnnl_success ||
        dnnl_primitive_desc_create(&fwd_pd, &fd, NULL, c.engine, NULL) != dnnl_success)
        goto done;
    /* The bias is the forward's second weights md and the backward's second diff weights
     * md: b_md itself, which is plain. */
    if (!make_pass(&c, FWD, &fd, NULL, "forward", 3,
                   (const int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                   (const dnnl_query_t[]){dnnl_query_src_md, dnnl_query_weights_md,
                                          dnnl_query_dst_md}))
        goto done;
    if (!add_arg(&c, FWD, DNNL_ARG_BIAS, &b_md))
        goto done;
    if (l->input_grad &&
        (dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &x_md, &w_md,
                                                  &y_md, strides, pad, pad) != dnnl_success ||
         !make_pass(&c, BWD_DATA, &dd, fwd_pd, "backward data", 3,
                    (const int[]){DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                    (const dnnl_query_t[]){dnnl_query_diff_dst_md, dnnl_query_weights_md,
                                           dnnl_query_diff_src_md})))
        goto done;
    if (dnnl_convolution_backward_weights_desc_init(&wdesc, dnnl_convolution_direct, &x_md, &w_md,
                                                    &b_md, &y_md, strides, pad,
                                                    pad) != dnnl_success ||
        !make_pass(&c, BWD_WEIGHTS, &wdesc, fwd_pd, "backward weights", 3,
                   (const int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS},
                   (const dnnl_query_t[]){dnnl_query_src_md, dnnl_query_diff_dst_md,
                                          dnnl_query_diff_weights_md}))
        goto done;
    if (!add_arg(&c, BWD_WEIGHTS, DNNL_ARG_DIFF_BIAS, &b_md))
        goto done;
    s = time_median(run_onednn, &c, repeats);
done:
    for (int k = 0; k < PASSES; k++)
        if (c.prim[k])
            dnnl_primitive_destroy(c.prim[k]);
    for (int k = 0; k < c.nmem; k++) {
        void *data = NULL;
        dnnl_memory_get_data_handle(c.mem[k], &data);
        dnnl_memory_destroy(c.mem[k]);
        free(data);
    }
    if (fwd_pd)
        dnnl_primitive_desc_destroy(fwd_pd);
    if (c.stream)
        dnnl_stream_destroy(c.stream);
    if (c.engine)
        dnnl_engine_destroy(c.engine);
    return s;
}
#endif

void bench_conv(bool (*selected)(const char *name), time_median_fn time_median, report_fn report,
                int repeats)
{
    if (selected("conv2d_fwd_bwd_64x8x26x26")) {
        const struct conv_layer l = {"", 64, 8, 26, 26, 16, 3, 1, true};
        double s = time_weft(&l, time_median, repeats);
        if (s < 0) {
            fprintf(stderr, "weft-bench: conv2d: %s\n", weft_error_message());
            exit(1);
        }
        /* forward 2*N*Cout*OH*OW*Cin*kh*kw; backward (input and weight grads) twice that */
        double fwd = 2.0 * (double)(l.N * l.Cout * l.H * l.W * l.C * l.k * l.k);
        report("conv2d_fwd_bwd_64x8x26x26", 3 * fwd / s / 1e9, "GFLOP/s");
    }
    for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
        const struct conv_layer *l = &layers[i];
        char name[96];
        snprintf(name, sizeof name, "conv_%s_weft_ms", l->name);
        if (selected(name)) {
            double s = time_weft(l, time_median, repeats);
            if (s < 0) {
                fprintf(stderr, "weft-bench: %s: %s\n", name, weft_error_message());
                exit(1);
            }
            report(name, s * 1e3, "ms");
        }
#ifdef WEFT_HAVE_ONEDNN
        static const struct {
            const char *suffix;
            dnnl_format_tag_t tag;
        } kinds[] = {{"onednn_nchw", dnnl_nchw}, {"onednn_blocked", dnnl_format_tag_any}};
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            snprintf(name, sizeof name, "conv_%s_%s_ms", l->name, kinds[k].suffix);
            if (!selected(name))
                continue;
            double s = time_onednn(l, kinds[k].tag, time_median, repeats);
            if (s < 0) {
                fprintf(stderr, "weft-bench: %s: a oneDNN call failed\n", name);
                exit(1);
            }
            report(name, s * 1e3, "ms");
        }
#endif
    }
}
