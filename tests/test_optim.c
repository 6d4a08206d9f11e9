/* tests/test_optim.c: optimizers against float64 reference trajectories written as plain
 * loops (PyTorch's formulas), the fused ops against the composite path, validation,
 * clip_grad_norm_, schedulers and state round trips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/backend.h>
#include <weft/nn.h>
#include <weft/optim.h>
#include <weft/optim_kernels.h>

#include "testutil.h"

TestSuite(optim, .init = tu_setup, .fini = tu_teardown);

#define N 37     /* elements of the test parameter (odd: no vector-width luck) */
#define STEPS 6
#define PI 3.14159265358979323846

/* ---- reference implementations (float64, plain loops) ----------------------------- */

struct ref {
    double lr, momentum, dampening, wd, b1, b2, eps, alpha;
    int nesterov, amsgrad, centered, adamw;
    double buf[3][N];
    int step;
};

static void ref_sgd(struct ref *r, double *p, const double *g0, int n)
{
    for (int i = 0; i < n; i++) {
        double g = g0[i] + r->wd * p[i];
        if (r->momentum != 0.0) {
            double b = r->step == 0 ? g : r->momentum * r->buf[0][i] + (1 - r->dampening) * g;
            r->buf[0][i] = b;
            g = r->nesterov ? g + r->momentum * b : b;
        }
        p[i] -= r->lr * g;
    }
    r->step++;
}

static void ref_adam(struct ref *r, double *p, const double *g0, int n)
{
    r->step++;
    double c1 = 1 - pow(r->b1, r->step), c2 = 1 - pow(r->b2, r->step);
    for (int i = 0; i < n; i++) {
        double g = g0[i];
        if (r->adamw)
            p[i] *= 1 - r->lr * r->wd;
        else
            g += r->wd * p[i];
        double *m = &r->buf[0][i], *v = &r->buf[1][i], *vmax = &r->buf[2][i];
        *m = *m + (1 - r->b1) * (g - *m);
        *v = r->b2 * *v + (1 - r->b2) * g * g;
        double vv = *v;
        if (r->amsgrad) {
            *vmax = fmax(*vmax, *v);
            vv = *vmax;
        }
        double denom = sqrt(vv) / sqrt(c2) + r->eps;
        p[i] -= (r->lr / c1) * *m / denom;
    }
}

static void ref_rmsprop(struct ref *r, double *p, const double *g0, int n)
{
    r->step++;
    for (int i = 0; i < n; i++) {
        double g = g0[i] + r->wd * p[i];
        double *sq = &r->buf[0][i], *buf = &r->buf[1][i], *ga = &r->buf[2][i];
        *sq = r->alpha * *sq + (1 - r->alpha) * g * g;
        double avg;
        if (r->centered) {
            *ga = *ga + (1 - r->alpha) * (g - *ga);
            avg = sqrt(*sq - *ga * *ga);
        } else {
            avg = sqrt(*sq);
        }
        avg += r->eps;
        if (r->momentum > 0) {
            *buf = r->momentum * *buf + g / avg;
            p[i] -= r->lr * *buf;
        } else {
            p[i] -= r->lr * g / avg;
        }
    }
}

/* ---- helpers ---------------------------------------------------------------------- */

/* Whether make() creates optimizers with the fused update ([optimizer] fused, PyTorch's
 * fused=): false takes the composite path, which the tests compare with it. */
static bool fused_mode = true;

static void set_fused(bool enabled)
{
    fused_mode = enabled;
}

static weft_tensor *param(const double *values, int64_t n, enum weft_dtype dt)
{
    weft_tensor *p = tu_tensor(1, &n, values, dt);
    cr_assert_eq(weft_requires_grad_(p, true), 0);
    return p;
}

static void give_grad(weft_tensor *p, const double *values)
{
    int64_t n = weft_tensor_numel(p);
    weft_tensor *g = tu_tensor(1, &n, values, p->dtype);
    cr_assert_eq(weft_set_grad(p, g), 0, "%s", weft_error_message());
    weft_tensor_release(g);
}

static weft_optimizer *make(const char *name, const char *ini, int n, weft_tensor **params)
{
    struct weft_config *cfg = weft_config_parse(ini, "test.ini");
    cr_assert_not_null(cfg, "%s", weft_error_message());
    if (!fused_mode)
        cr_assert_eq(weft_config_put(cfg, "optimizer", "fused", "false"), 0);
    weft_optimizer *opt = weft_optimizer_create(name, n, params, weft_config_options(cfg, "optimizer"));
    cr_assert_not_null(opt, "%s", weft_error_message());
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    weft_config_free(cfg);
    return opt;
}

typedef void (*ref_fn)(struct ref *, double *, const double *, int);

/* Runs STEPS updates of a random parameter with random gradients (values as stored in
 * dt, so the reference sees the same inputs) and compares after every step. */
static void check_trajectory(const char *name, const char *ini, struct ref r, ref_fn fn,
                             enum weft_dtype dt, bool fused, double rtol, double atol)
{
    uint64_t seed = 42;
    double p0[N], p[N], g[N];
    tu_random_values(p0, N, -1, 1, &seed);
    weft_tensor *w = param(p0, N, dt);
    tu_read(w, p);
    set_fused(fused);
    weft_optimizer *opt = make(name, ini, 1, &w);
    for (int s = 0; s < STEPS; s++) {
        tu_random_values(g, N, -1, 1, &seed);
        give_grad(w, g);
        weft_tensor *gt = weft_grad(w);
        tu_read(gt, g);
        weft_tensor_release(gt);
        cr_assert_eq(weft_optimizer_step(opt), 0, "%s", weft_error_message());
        fn(&r, p, g, N);
        tu_assert_close(w, p, N, rtol, atol);
    }
    set_fused(true);
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

/* Every dtype, fused and composite. */
static void check_all(const char *name, const char *ini, struct ref r, ref_fn fn)
{
    for (int fused = 0; fused < 2; fused++) {
        check_trajectory(name, ini, r, fn, WEFT_F64, fused, 1e-12, 1e-13);
        check_trajectory(name, ini, r, fn, WEFT_F32, fused, 2e-5, 2e-6);
    }
}

/* ---- SGD ------------------------------------------------------------------------------ */

Test(optim, sgd_plain_follows_p_minus_lr_g)
{
    check_all("sgd", "[optimizer]\nlr = 0.1\n", (struct ref){.lr = 0.1}, ref_sgd);
}

Test(optim, sgd_momentum_first_step_takes_the_gradient_undamped)
{
    check_all("sgd", "[optimizer]\nlr = 0.05\nmomentum = 0.9\ndampening = 0.3\n",
              (struct ref){.lr = 0.05, .momentum = 0.9, .dampening = 0.3}, ref_sgd);
}

Test(optim, sgd_nesterov_with_weight_decay)
{
    check_all("sgd", "[optimizer]\nlr = 0.05\nmomentum = 0.8\nnesterov = true\nweight_decay = 0.01\n",
              (struct ref){.lr = 0.05, .momentum = 0.8, .nesterov = 1, .wd = 0.01}, ref_sgd);
}

Test(optim, sgd_default_lr_is_1e_3)
{
    check_all("sgd", "[optimizer]\n", (struct ref){.lr = 1e-3}, ref_sgd);
}

/* ---- Adam / AdamW ----------------------------------------------------------------------- */

static struct ref adam_ref(double lr, double wd, int amsgrad, int adamw)
{
    return (struct ref){.lr = lr, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .wd = wd,
                        .amsgrad = amsgrad, .adamw = adamw};
}

Test(optim, adam_defaults_put_eps_after_bias_correction)
{
    check_all("adam", "[optimizer]\n", adam_ref(1e-3, 0, 0, 0), ref_adam);
}

Test(optim, adam_l2_weight_decay_and_betas_from_config)
{
    struct ref r = adam_ref(0.01, 0.1, 0, 0);
    r.b1 = 0.8;
    r.b2 = 0.99;
    r.eps = 1e-6;
    check_all("adam", "[optimizer]\nlr = 0.01\nbetas = 0.8, 0.99\neps = 1e-6\nweight_decay = 0.1\n",
              r, ref_adam);
}

Test(optim, adam_amsgrad_keeps_the_uncorrected_maximum)
{
    check_all("adam", "[optimizer]\nlr = 0.01\namsgrad = true\n", adam_ref(0.01, 0, 1, 0), ref_adam);
}

Test(optim, adamw_decays_the_parameter_before_the_moments)
{
    check_all("adamw", "[optimizer]\nlr = 0.01\n", adam_ref(0.01, 1e-2, 0, 1), ref_adam);
    check_all("adamw", "[optimizer]\nlr = 0.01\nweight_decay = 0.5\namsgrad = yes\n",
              adam_ref(0.01, 0.5, 1, 1), ref_adam);
}

/* ---- RMSprop ----------------------------------------------------------------------------- */

Test(optim, rmsprop_defaults)
{
    check_all("rmsprop", "[optimizer]\n",
              (struct ref){.lr = 1e-2, .alpha = 0.99, .eps = 1e-8}, ref_rmsprop);
}

Test(optim, rmsprop_centered_with_momentum_and_weight_decay)
{
    check_all("rmsprop",
              "[optimizer]\nlr = 0.005\nalpha = 0.9\ncentered = true\nmomentum = 0.7\n"
              "weight_decay = 0.02\neps = 1e-6\n",
              (struct ref){.lr = 0.005, .alpha = 0.9, .eps = 1e-6, .centered = 1,
                           .momentum = 0.7, .wd = 0.02},
              ref_rmsprop);
}

/* ---- fused op vs composite --------------------------------------------------------------- */

static void fused_matches_composite(const char *name, const char *ini, enum weft_dtype dt,
                                    int64_t n)
{
    double p0[40000], g[40000];
    cr_assert(n <= 40000);
    uint64_t seed = 7;
    tu_random_values(p0, n, -1, 1, &seed);
    weft_tensor *a = param(p0, n, dt), *b = param(p0, n, dt);
    weft_optimizer *oa = make(name, ini, 1, &a);
    set_fused(false);
    weft_optimizer *ob = make(name, ini, 1, &b);
    set_fused(true);
    for (int s = 0; s < 4; s++) {
        tu_random_values(g, n, -1, 1, &seed);
        give_grad(a, g);
        give_grad(b, g);
        cr_assert_eq(weft_optimizer_step(oa), 0, "%s", weft_error_message());
        cr_assert_eq(weft_optimizer_step(ob), 0, "%s", weft_error_message());
    }
    static double va[40000], vb[40000];
    tu_read(a, va);
    tu_read(b, vb);
    double tol = dt == WEFT_F64 ? 1e-14 : dt == WEFT_F32 ? 1e-6 : 1e-2;
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(va[i] - vb[i]) <= tol * (1 + fabs(vb[i])), "%s %s [%lld]: %g vs %g",
                  name, weft_dtype_name(dt), (long long)i, va[i], vb[i]);
    weft_optimizer_free(oa);
    weft_optimizer_free(ob);
    weft_tensor_release(a);
    weft_tensor_release(b);
}

Test(optim, fused_update_equals_composite_for_every_type_and_dtype)
{
    static const char *const cases[][2] = {
        {"sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\nnesterov = true\nweight_decay = 0.1\n"},
        {"adam", "[optimizer]\nlr = 0.01\namsgrad = true\nweight_decay = 0.1\n"},
        {"adamw", "[optimizer]\nlr = 0.01\n"},
        {"rmsprop", "[optimizer]\ncentered = true\nmomentum = 0.5\nweight_decay = 0.1\n"},
    };
    const enum weft_dtype dts[] = {WEFT_F64, WEFT_F32, WEFT_BF16, WEFT_F16};
    for (size_t c = 0; c < 4; c++)
        for (size_t d = 0; d < 4; d++) {
            fused_matches_composite(cases[c][0], cases[c][1], dts[d], 13);
            /* large enough for the parallel path */
            if (dts[d] == WEFT_F32)
                fused_matches_composite(cases[c][0], cases[c][1], dts[d], 40000);
        }
}

Test(optim, the_plugin_registers_cpu_kernels_for_the_fused_ops)
{
    cr_assert_not_null(weft_registry_get(WEFT_KIND_OPTIMIZER, "sgd"), "%s", weft_error_message());
    const int ops[3] = {weft_op_lookup(WEFT_OP_SGD_STEP_NAME), weft_op_lookup(WEFT_OP_ADAM_STEP_NAME),
                        weft_op_lookup(WEFT_OP_RMSPROP_STEP_NAME)};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(weft_kernel_dtypes(ops[i], WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED),
                     WEFT_DTYPES_FLOATING);
        cr_assert_str_eq(weft_op_name(ops[i]), i == 0 ? "sgd_step" : i == 1 ? "adam_step"
                                                                         : "rmsprop_step");
    }
}

Test(optim, non_contiguous_gradient_takes_the_composite_path)
{
    double p0[6] = {1, 2, 3, 4, 5, 6}, gt[6] = {1, 4, 2, 5, 3, 6};
    int64_t shape[2] = {2, 3}, tshape[2] = {3, 2};
    weft_tensor *p = tu_tensor(2, shape, p0, WEFT_F64);
    weft_requires_grad_(p, true);
    weft_tensor *g0 = tu_tensor(2, tshape, gt, WEFT_F64);
    weft_tensor *g = weft_transpose(g0, 0, 1); /* [[1,2,3],[4,5,6]], strided */
    cr_assert_eq(weft_set_grad(p, g), 0, "%s", weft_error_message());
    weft_tensor *w = p;
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 0.5\n", 1, &w);
    cr_assert_eq(weft_optimizer_step(opt), 0, "%s", weft_error_message());
    const double expect[6] = {0.5, 1, 1.5, 2, 2.5, 3};
    tu_assert_close(p, expect, 6, 0, 0);
    weft_optimizer_free(opt);
    weft_tensor_release(g);
    weft_tensor_release(g0);
    weft_tensor_release(p);
}

/* ---- the optimizer object ---------------------------------------------------------------- */

Test(optim, parameters_without_grad_are_skipped_and_zero_grad_clears)
{
    double v[3] = {1, 2, 3}, g[3] = {1, 1, 1};
    weft_tensor *ps[2] = {param(v, 3, WEFT_F32), param(v, 3, WEFT_F32)};
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 1\n", 2, ps);
    give_grad(ps[0], g);
    cr_assert_eq(weft_optimizer_step(opt), 0);
    const double moved[3] = {0, 1, 2};
    tu_assert_close(ps[0], moved, 3, 0, 0);
    tu_assert_close(ps[1], v, 3, 0, 0);
    cr_assert_eq(weft_optimizer_zero_grad(opt, false), 0);
    weft_tensor *z = weft_grad(ps[0]);
    const double zeros[3] = {0, 0, 0};
    tu_assert_close(z, zeros, 3, 0, 0);
    weft_tensor_release(z);
    cr_assert_eq(weft_optimizer_zero_grad(opt, true), 0);
    cr_assert_null(weft_grad(ps[0]));
    cr_assert_str_eq(weft_optimizer_name(opt), "sgd");
    cr_assert_eq(weft_optimizer_num_params(opt), 2);
    weft_optimizer_free(opt);
    weft_tensor_release(ps[0]);
    weft_tensor_release(ps[1]);
}

Test(optim, gradient_accumulation_steps_on_the_summed_gradient)
{
    /* loss = sum(w * x) twice before one step: grad = x1 + x2. */
    double v[2] = {1, 1}, x1[2] = {1, 2}, x2[2] = {3, 4};
    int64_t n = 2;
    weft_tensor *w = param(v, 2, WEFT_F64);
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 0.1\n", 1, &w);
    const double *xs[2] = {x1, x2};
    for (int k = 0; k < 2; k++) {
        weft_scope_push();
        weft_tensor *x = tu_tensor(1, &n, xs[k], WEFT_F64);
        cr_assert_eq(weft_backward(weft_sum(weft_mul(w, x), 0, NULL, false), NULL, false), 0,
                     "%s", weft_error_message());
        weft_scope_pop();
    }
    cr_assert_eq(weft_optimizer_step(opt), 0);
    const double expect[2] = {1 - 0.1 * 4, 1 - 0.1 * 6};
    tu_assert_close(w, expect, 2, 1e-15, 0);
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

Test(optim, lr_get_and_set)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    weft_optimizer *opt = make("adam", "[optimizer]\n", 1, &w);
    cr_assert_eq(weft_optimizer_get_lr(opt), 1e-3);
    cr_assert_eq(weft_optimizer_set_lr(opt, 0.25), 0);
    cr_assert_eq(weft_optimizer_get_lr(opt), 0.25);
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

Test(optim, type_read_from_the_section_when_no_name_is_given)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    weft_optimizer *opt = make(NULL, "[optimizer]\ntype = rmsprop\n", 1, &w);
    cr_assert_str_eq(weft_optimizer_name(opt), "rmsprop");
    cr_assert_eq(weft_optimizer_get_lr(opt), 1e-2);
    weft_optimizer_free(opt);
    weft_optimizer *d = weft_optimizer_create("sgd", 1, &w, NULL);
    cr_assert_not_null(d, "%s", weft_error_message());
    weft_optimizer_free(d);
    weft_tensor_release(w);
}

/* ---- validation -------------------------------------------------------------------------- */

static void expect_create_error(const char *name, const char *ini, int code, const char *text)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    struct weft_config *cfg = weft_config_parse(ini, "test.ini");
    cr_assert_not_null(cfg);
    cr_assert_null(weft_optimizer_create(name, 1, &w, weft_config_options(cfg, "optimizer")),
                   "%s accepted %s", name, ini);
    tu_assert_error(code, text);
    weft_config_free(cfg);
    weft_tensor_release(w);
}

Test(optim, invalid_hyperparameters_fail_with_pytorch_messages)
{
    expect_create_error("sgd", "[optimizer]\nlr = -0.1\n", WEFT_ERR_VALUE,
                        "test.ini: [optimizer] Invalid learning rate: -0.1");
    expect_create_error("sgd", "[optimizer]\nmomentum = -1\n", WEFT_ERR_VALUE,
                        "Invalid momentum value: -1.0");
    expect_create_error("sgd", "[optimizer]\nweight_decay = -1e-5\n", WEFT_ERR_VALUE,
                        "Invalid weight_decay value: -1e-05");
    expect_create_error("sgd", "[optimizer]\nnesterov = true\n", WEFT_ERR_VALUE,
                        "Nesterov momentum requires a momentum and zero dampening");
    expect_create_error("sgd", "[optimizer]\nnesterov = true\nmomentum = 0.9\ndampening = 0.1\n",
                        WEFT_ERR_VALUE, "Nesterov momentum requires a momentum and zero dampening");
    expect_create_error("adam", "[optimizer]\nlr = -2\n", WEFT_ERR_VALUE,
                        "Invalid learning rate: -2.0");
    expect_create_error("adam", "[optimizer]\neps = -1e-8\n", WEFT_ERR_VALUE,
                        "Invalid epsilon value: -1e-08");
    expect_create_error("adam", "[optimizer]\nbetas = 1.0, 0.999\n", WEFT_ERR_VALUE,
                        "Invalid beta parameter at index 0: 1.0");
    expect_create_error("adamw", "[optimizer]\nbetas = 0.9, -0.5\n", WEFT_ERR_VALUE,
                        "Invalid beta parameter at index 1: -0.5");
    expect_create_error("adamw", "[optimizer]\nweight_decay = -0.01\n", WEFT_ERR_VALUE,
                        "Invalid weight_decay value: -0.01");
    expect_create_error("adam", "[optimizer]\nbetas = 0.9\n", WEFT_ERR_CONFIG,
                        "betas = '0.9': expected two numbers");
    expect_create_error("rmsprop", "[optimizer]\nalpha = -0.5\n", WEFT_ERR_VALUE,
                        "Invalid alpha value: -0.5");
    expect_create_error("rmsprop", "[optimizer]\nmomentum = -0.5\n", WEFT_ERR_VALUE,
                        "Invalid momentum value: -0.5");
    expect_create_error("rmsprop", "[optimizer]\neps = -1\n", WEFT_ERR_VALUE,
                        "Invalid epsilon value: -1.0");
    expect_create_error("rmsprop", "[optimizer]\nweight_decay = -3\n", WEFT_ERR_VALUE,
                        "Invalid weight_decay value: -3.0");
    expect_create_error("sgd", "[optimizer]\nlr = fast\n", WEFT_ERR_CONFIG, "lr");
    expect_create_error("adagrad", "[optimizer]\n", WEFT_ERR_CONFIG,
                        "test.ini: [optimizer] type = 'adagrad': no optimizer 'adagrad' (known: sgd, "
                        "adam, adamw, rmsprop)");
    expect_create_error(NULL, "[optimizer]\n", WEFT_ERR_CONFIG, "[optimizer] missing key 'type'");
}

Test(optim, bad_parameter_lists_are_refused)
{
    cr_assert_null(weft_optimizer_create("sgd", 0, NULL, NULL));
    tu_assert_error(WEFT_ERR_VALUE, "empty parameter list");
    double v[1] = {1};
    int64_t n = 1;
    weft_tensor *i = tu_tensor(1, &n, v, WEFT_I64);
    cr_assert_null(weft_optimizer_create("sgd", 1, &i, NULL));
    tu_assert_error(WEFT_ERR_TYPE, "floating point");
    weft_tensor_release(i);
    weft_tensor *none = NULL;
    cr_assert_null(weft_optimizer_create("sgd", 1, &none, NULL));
    cr_assert_eq(weft_error_code(), WEFT_OK);
}

/* ---- clip_grad_norm_ --------------------------------------------------------------------- */

Test(optim, clip_grad_norm_scales_every_grad_and_returns_the_total)
{
    double a[2] = {3, 0}, b[2] = {0, 4}, v[2] = {0, 0};
    weft_tensor *ps[3] = {param(v, 2, WEFT_F32), param(v, 2, WEFT_F64), param(v, 2, WEFT_F32)};
    give_grad(ps[0], a);
    give_grad(ps[1], b); /* ps[2] has no grad: skipped */
    double total = -1;
    cr_assert_eq(weft_clip_grad_norm_(3, ps, 1.0, 2.0, &total), 0, "%s", weft_error_message());
    cr_assert_float_eq(total, 5.0, 1e-6);
    double coef = 1.0 / (5.0 + 1e-6);
    weft_tensor *ga = weft_grad(ps[0]), *gb = weft_grad(ps[1]);
    const double ea[2] = {3 * coef, 0}, eb[2] = {0, 4 * coef};
    tu_assert_close(ga, ea, 2, 1e-6, 0);
    tu_assert_close(gb, eb, 2, 1e-12, 0);
    cr_assert_null(weft_grad(ps[2]));
    /* Below max_norm nothing changes. */
    cr_assert_eq(weft_clip_grad_norm_(3, ps, 10.0, 2.0, &total), 0);
    cr_assert_float_eq(total, 1.0, 1e-5);
    tu_assert_close(gb, eb, 2, 1e-12, 0);
    weft_tensor_release(ga);
    weft_tensor_release(gb);
    for (int i = 0; i < 3; i++)
        weft_tensor_release(ps[i]);
}

Test(optim, clip_grad_norm_inf_and_p_norms)
{
    double a[3] = {-7, 2, 1}, b[2] = {5, -6}, v[3] = {0, 0, 0};
    weft_tensor *ps[2] = {param(v, 3, WEFT_F64), param(v, 2, WEFT_F64)};
    give_grad(ps[0], a);
    give_grad(ps[1], b);
    double total;
    cr_assert_eq(weft_clip_grad_norm_(2, ps, 100.0, INFINITY, &total), 0);
    cr_assert_eq(total, 7.0);
    cr_assert_eq(weft_clip_grad_norm_(2, ps, 100.0, 1.0, &total), 0);
    cr_assert_float_eq(total, 21.0, 1e-12);
    cr_assert_eq(weft_clip_grad_norm_(2, ps, 100.0, 3.0, &total), 0);
    cr_assert_float_eq(total, cbrt(343.0 + 8 + 1 + 125 + 216), 1e-12);
    cr_assert_eq(weft_clip_grad_norm_(2, ps, 3.5, INFINITY, &total), 0);
    weft_tensor *g = weft_grad(ps[0]);
    double c = 3.5 / (7.0 + 1e-6);
    const double e[3] = {-7 * c, 2 * c, 1 * c};
    tu_assert_close(g, e, 3, 1e-14, 0);
    weft_tensor_release(g);
    weft_tensor_release(ps[0]);
    weft_tensor_release(ps[1]);
}

/* Gradients past one piece of the norm's walk (2^16 elements: 3 pieces and a remainder),
 * in float64 so the expected totals are exact to rounding: every p-norm, the largest
 * element in the last piece, and a NaN anywhere poisoning the total and the grads. */
Test(optim, clip_grad_norm_of_large_gradients_counts_every_piece)
{
    const int64_t n = 3 * 65536 + 1001;
    double *g = malloc((size_t)n * sizeof *g), *v = calloc((size_t)n, sizeof *v), want[4] = {0};
    cr_assert(g && v);
    uint64_t st = 11;
    tu_random_values(g, n, -1, 1, &st);
    g[n - 3] = -9.5; /* the largest |g|, in the remainder */
    for (int64_t i = 0; i < n; i++) {
        want[0] += fabs(g[i]);
        want[1] += g[i] * g[i];
        want[2] += fabs(g[i]) * g[i] * g[i];
    }
    const double ps[4] = {1, 2, 3, INFINITY}, totals[4] = {want[0], sqrt(want[1]),
                                                              cbrt(want[2]), 9.5};
    weft_tensor *w = param(v, n, WEFT_F64);
    for (int k = 0; k < 4; k++) {
        give_grad(w, g);
        double total;
        cr_assert_eq(weft_clip_grad_norm_(1, &w, 1.0, ps[k], &total), 0, "%s",
                     weft_error_message());
        cr_assert_float_eq(total, totals[k], 1e-12 * totals[k], "p %g: %.17g, want %.17g",
                           ps[k], total, totals[k]);
        double c = 1.0 / (totals[k] + 1e-6), got[2];
        weft_tensor *gr = weft_grad(w);
        weft_tensor *tail = weft_slice(gr, 0, n - 4, n - 2, 1);
        tu_read(tail, got);
        weft_tensor_release(tail);
        cr_assert_float_eq(got[1], -9.5 * c, 1e-12, "p %g: the grads scaled", ps[k]);
        weft_tensor_release(gr);
    }
    g[70000] = NAN; /* in the second piece */
    for (int k = 0; k < 4; k++) {
        give_grad(w, g);
        double total;
        cr_assert_eq(weft_clip_grad_norm_(1, &w, 1.0, ps[k], &total), 0);
        cr_assert(isnan(total), "p %g: a NaN gradient gives a NaN total, got %g", ps[k], total);
    }
    weft_tensor_release(w);
    free(g);
    free(v);
}

Test(optim, clip_grad_norm_without_grads_is_zero)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    double total = -1;
    cr_assert_eq(weft_clip_grad_norm_(1, &w, 1.0, 2.0, &total), 0);
    cr_assert_eq(total, 0.0);
    weft_tensor_release(w);
}

/* ---- schedulers -------------------------------------------------------------------------- */

static void check_schedule(const char *ini, double lr0, const double *expect, int n)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    char opt_ini[64];
    snprintf(opt_ini, sizeof opt_ini, "[optimizer]\nlr = %.17g\n", lr0);
    weft_optimizer *opt = make("sgd", opt_ini, 1, &w);
    struct weft_config *cfg = weft_config_parse(ini, "sched.ini");
    weft_scheduler *s = weft_scheduler_create(opt, weft_config_options(cfg, "scheduler"));
    cr_assert_not_null(s, "%s", weft_error_message());
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    for (int e = 0; e < n; e++) {
        cr_assert(fabs(weft_optimizer_get_lr(opt) - expect[e]) <= 1e-12,
                  "%s epoch %d: lr %.17g, expected %.17g", ini, e, weft_optimizer_get_lr(opt),
                  expect[e]);
        cr_assert_eq(weft_scheduler_step(s), 0);
    }
    weft_scheduler_free(s);
    weft_config_free(cfg);
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

Test(optim, step_scheduler_matches_steplr)
{
    /* StepLR(step_size=2, gamma=0.5) from lr 1 */
    const double e[7] = {1, 1, 0.5, 0.5, 0.25, 0.25, 0.125};
    check_schedule("[scheduler]\ntype = step\nstep_size = 2\ngamma = 0.5\n", 1.0, e, 7);
}

Test(optim, multistep_scheduler_matches_multisteplr)
{
    /* MultiStepLR(milestones=[2, 5], gamma=0.1) from lr 0.05 */
    const double e[7] = {0.05, 0.05, 0.005, 0.005, 0.005, 0.0005, 0.0005};
    check_schedule("[scheduler]\ntype = multistep\nmilestones = 2, 5\n", 0.05, e, 7);
}

Test(optim, cosine_scheduler_matches_cosineannealinglr)
{
    /* torch: CosineAnnealingLR(SGD(lr=0.1), T_max=10, eta_min=0) */
    const double e[11] = {0.1,
                          0.09755282581475769,
                          0.09045084971874738,
                          0.07938926261462367,
                          0.06545084971874738,
                          0.05,
                          0.03454915028125263,
                          0.02061073738537634,
                          0.009549150281252633,
                          0.0024471741852423235,
                          0.0};
    check_schedule("[scheduler]\ntype = cosine\nT_max = 10\n", 0.1, e, 11);
    /* eta_min lifts the floor: eta_min + (0.1 - eta_min)(1 + cos(pi e / 4)) / 2 */
    const double f[5] = {0.1, 0.1 - 0.09 * (1 - cos(PI / 4)) / 2, 0.055,
                         0.01 + 0.09 * (1 + cos(3 * PI / 4)) / 2, 0.01};
    check_schedule("[scheduler]\ntype = cosine\nT_max = 4\neta_min = 0.01\n", 0.1, f, 5);
}

Test(optim, linear_warmup_then_main_schedule)
{
    /* LinearLR(start_factor=0.25, total_iters=3) then StepLR(step_size=2, gamma=0.1). */
    const double e[8] = {0.25, 0.5, 0.75, 1, 1, 0.1, 0.1, 0.01};
    check_schedule("[scheduler]\ntype = step\nstep_size = 2\nwarmup_steps = 3\n"
                   "warmup_start_factor = 0.25\n",
                   1.0, e, 8);
    const double c[5] = {0.1 / 3, 0.2 / 3, 0.1, 0.05, 0.0};
    check_schedule("[scheduler]\ntype = cosine\nT_max = 2\nwarmup_steps = 2\n"
                   "warmup_start_factor = 0.3333333333333333\n",
                   0.1, c, 5);
    const double none[3] = {0.5, 1, 1};
    check_schedule("[scheduler]\nwarmup_steps = 1\nwarmup_start_factor = 0.5\n", 1.0, none, 3);
}

Test(optim, scheduler_config_errors)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    weft_optimizer *opt = make("sgd", "[optimizer]\n", 1, &w);
    static const char *const bad[][2] = {
        {"[scheduler]\ntype = step\n", "needs a positive step_size"},
        {"[scheduler]\ntype = cosine\n", "needs a positive T_max"},
        {"[scheduler]\ntype = multistep\n", "missing key 'milestones'"},
        {"[scheduler]\ntype = multistep\nmilestones = 5, 2\n", "increasing"},
        {"[scheduler]\ntype = exp\n", "type"},
        {"[scheduler]\nwarmup_steps = 2\nwarmup_start_factor = 0\n",
         "Starting multiplicative factor expected to be greater than 0 and less or equal to 1."},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct weft_config *cfg = weft_config_parse(bad[i][0], "sched.ini");
        cr_assert_null(weft_scheduler_create(opt, weft_config_options(cfg, "scheduler")), "accepted %s", bad[i][0]);
        cr_assert_neq(weft_error_code(), WEFT_OK);
        cr_assert(strstr(weft_error_message(), bad[i][1]), "%s", weft_error_message());
        weft_error_clear();
        weft_config_free(cfg);
    }
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

Test(optim, scheduler_state_round_trip)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 0.1\n", 1, &w);
    struct weft_config *cfg = weft_config_parse("[scheduler]\ntype = cosine\nT_max = 10\n", "s");
    weft_scheduler *s = weft_scheduler_create(opt, weft_config_options(cfg, "scheduler"));
    for (int i = 0; i < 3; i++)
        weft_scheduler_step(s);
    struct weft_metadata *m = weft_metadata_new();
    cr_assert_eq(weft_scheduler_state_export(s, m), 0);
    weft_scheduler *t = weft_scheduler_create(opt, weft_config_options(cfg, "scheduler"));
    cr_assert_eq(weft_scheduler_state_import(t, m), 0);
    cr_assert_eq(weft_scheduler_last_epoch(t), 3);
    cr_assert_float_eq(weft_optimizer_get_lr(opt), 0.07938926261462367, 1e-15);
    weft_scheduler_step(t);
    cr_assert_float_eq(weft_optimizer_get_lr(opt), 0.06545084971874738, 1e-15);
    weft_metadata_free(m);
    weft_scheduler_free(s);
    weft_scheduler_free(t);
    weft_config_free(cfg);
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

/* ---- optimizer state round trip ---------------------------------------------------------- */

static void check_resume(const char *name, const char *ini, enum weft_dtype dt)
{
    uint64_t seed = 3;
    double p0[N], g[5][N];
    tu_random_values(p0, N, -1, 1, &seed);
    for (int s = 0; s < 5; s++)
        tu_random_values(g[s], N, -1, 1, &seed);
    weft_tensor *w = param(p0, N, dt);
    weft_optimizer *opt = make(name, ini, 1, &w);
    for (int s = 0; s < 3; s++) {
        give_grad(w, g[s]);
        cr_assert_eq(weft_optimizer_step(opt), 0);
    }
    weft_optimizer_set_lr(opt, 0.003); /* a scheduler moved it */
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    struct weft_metadata *m = weft_metadata_new();
    cr_assert_eq(weft_optimizer_state_export(opt, d, m), 0, "%s", weft_error_message());
    cr_assert_str_eq(weft_metadata_get(m, "optimizer"), name);
    cr_assert_str_eq(weft_metadata_get(m, "param_groups.0.lr"), "0.0030000000000000001");
    double mid[N];
    tu_read(w, mid);

    /* Save and load through a file, as a checkpoint does. */
    char path[] = "/tmp/weft-optim-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(weft_safetensors_save(path, d, m), 0, "%s", weft_error_message());
    struct weft_tensor_dict *d2;
    struct weft_metadata *m2;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &d2, &m2), 0, "%s", weft_error_message());
    unlink(path);

    weft_tensor *r = param(mid, N, dt);
    weft_optimizer *resumed = make(name, "[optimizer]\n", 1, &r);
    cr_assert_eq(weft_optimizer_state_import(resumed, d2, m2), 0, "%s", weft_error_message());
    cr_assert_eq(weft_optimizer_get_lr(resumed), 0.003);
    weft_optimizer_free(resumed);
    resumed = make(name, ini, 1, &r);
    cr_assert_eq(weft_optimizer_state_import(resumed, d2, m2), 0, "%s", weft_error_message());
    for (int s = 3; s < 5; s++) {
        give_grad(w, g[s]);
        give_grad(r, g[s]);
        cr_assert_eq(weft_optimizer_step(opt), 0);
        cr_assert_eq(weft_optimizer_step(resumed), 0);
        double a[N];
        tu_read(w, a);
        tu_assert_close(r, a, N, 0, 0);
    }
    weft_tensor_dict_free(d);
    weft_tensor_dict_free(d2);
    weft_metadata_free(m);
    weft_metadata_free(m2);
    weft_optimizer_free(opt);
    weft_optimizer_free(resumed);
    weft_tensor_release(w);
    weft_tensor_release(r);
}

Test(optim, state_export_import_resumes_identically)
{
    check_resume("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n", WEFT_F32);
    check_resume("adam", "[optimizer]\nlr = 0.01\namsgrad = true\n", WEFT_F32);
    check_resume("adamw", "[optimizer]\nlr = 0.01\n", WEFT_F64);
    check_resume("rmsprop", "[optimizer]\ncentered = true\nmomentum = 0.5\n", WEFT_F32);
}

Test(optim, state_names_follow_pytorch_state_dict)
{
    double v[2] = {1, 2}, g[2] = {0.5, -0.5};
    weft_tensor *ps[2] = {param(v, 2, WEFT_F32), param(v, 2, WEFT_F32)};
    weft_optimizer *opt = make("adam", "[optimizer]\namsgrad = true\n", 2, ps);
    give_grad(ps[1], g);
    weft_optimizer_step(opt);
    weft_optimizer_step(opt);
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    cr_assert_eq(weft_optimizer_state_export(opt, d, NULL), 0);
    cr_assert_eq(weft_tensor_dict_len(d), 4); /* parameter 0 never had a grad */
    cr_assert_str_eq(weft_tensor_dict_name(d, 0), "state.1.step");
    cr_assert_str_eq(weft_tensor_dict_name(d, 1), "state.1.exp_avg");
    cr_assert_str_eq(weft_tensor_dict_name(d, 2), "state.1.exp_avg_sq");
    cr_assert_str_eq(weft_tensor_dict_name(d, 3), "state.1.max_exp_avg_sq");
    weft_tensor *step = weft_tensor_dict_get(d, "state.1.step");
    cr_assert_eq(step->dtype, WEFT_F32);
    cr_assert_eq(step->ndim, 0);
    double sv;
    weft_tensor_item(step, &sv);
    cr_assert_eq(sv, 2.0);
    weft_tensor_release(step);

    /* A wrong shape or another optimizer's state is refused. */
    struct weft_tensor_dict *bad = weft_tensor_dict_new();
    int64_t three = 3;
    double z[3] = {0};
    weft_tensor *t3 = tu_tensor(1, &three, z, WEFT_F32);
    weft_tensor *st = weft_scalar_tensor(1, WEFT_F32, WEFT_CPU);
    weft_tensor_dict_add(bad, "state.0.step", st);
    weft_tensor_dict_add(bad, "state.0.exp_avg", t3);
    cr_assert_lt(weft_optimizer_state_import(opt, bad, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE,
                    "'state.0.exp_avg' has shape [3] but the parameter has shape [2]");
    struct weft_metadata *m = weft_metadata_new();
    weft_metadata_set(m, "optimizer", "sgd");
    cr_assert_lt(weft_optimizer_state_import(opt, d, m), 0);
    tu_assert_error(WEFT_ERR_VALUE, "saved by 'sgd' and cannot be loaded into 'adam'");
    weft_metadata_free(m);
    weft_tensor_release(t3);
    weft_tensor_release(st);
    weft_tensor_dict_free(bad);
    weft_tensor_dict_free(d);
    weft_optimizer_free(opt);
    weft_tensor_release(ps[0]);
    weft_tensor_release(ps[1]);
}

/* ---- the fused path is the one taken ------------------------------------------------------ */

static int sgd_step_calls;
static weft_kernel_fn real_sgd_step;

/* Counts, then runs the real kernel. */
static int counting_sgd_step(const struct weft_op_call *c)
{
    sgd_step_calls++;
    return real_sgd_step(c);
}

Test(optim, a_linear_layers_parameters_take_the_fused_step)
{
    /* The gradient of Linear's weight comes out of backward transposed, (x^T g)^T; the
     * .grad must still be contiguous (PyTorch's layout contract), or the optimizer would
     * fall back to its composite path for every weight matrix. */
    weft_scope_push();
    weft_module *m = weft_nn_linear(5, 3, true);
    weft_tensor *x = weft_randn(2, (int64_t[]){4, 5}, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_backward(weft_sum(weft_module_forward(m, x), 0, NULL, false), NULL, false), 0);
    weft_tensor *w = weft_module_parameter(m, "weight"), *b = weft_module_parameter(m, "bias");
    cr_assert(weft_tensor_is_contiguous(weft_grad(w)), "the weight's .grad is not contiguous");
    weft_tensor *ps[2] = {w, b};
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n", 2, ps);
    int op = weft_op_lookup(WEFT_OP_SGD_STEP_NAME);
    real_sgd_step = weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32);
    cr_assert_not_null(real_sgd_step);
    cr_assert_eq(weft_kernel_register(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED,
                                      WEFT_DTYPE_BIT(WEFT_F32), counting_sgd_step),
                 0);
    cr_assert_eq(weft_optimizer_step(opt), 0, "%s", weft_error_message());
    cr_assert_eq(sgd_step_calls, 2, "the fused kernel ran for %d of 2 parameters",
                 sgd_step_calls);
    weft_optimizer_free(opt);
    weft_module_free(m);
    weft_scope_pop();
}

/* ---- a training step's memory ----------------------------------------------------------- */

static void mlp_step(weft_module *model, weft_optimizer *opt, weft_tensor *x, weft_tensor *y)
{
    weft_scope_push();
    struct weft_cross_entropy_params ce = weft_cross_entropy_defaults();
    weft_tensor *loss = weft_cross_entropy(weft_module_forward(model, x), y, &ce);
    cr_assert_not_null(loss, "%s", weft_error_message());
    cr_assert_eq(weft_optimizer_zero_grad(opt, true), 0);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    cr_assert_eq(weft_optimizer_step(opt), 0, "%s", weft_error_message());
    weft_scope_pop();
}

/* After the first steps, a step of the MNIST MLP (forward, loss, backward, SGD with
 * momentum) takes every block from the cpu allocator's cache: nothing from the system,
 * so no page faults and no zeroing by the kernel in steady state. */
Test(optim, a_steady_state_training_step_allocates_nothing_from_the_system)
{
    weft_module *layers[] = {weft_nn_linear(784, 256, true), weft_nn_relu(),
                             weft_nn_linear(256, 128, true), weft_nn_relu(),
                             weft_nn_linear(128, 10, true)};
    weft_module *model = weft_nn_sequential(5, layers);
    cr_assert_not_null(model, "%s", weft_error_message());
    struct weft_named_tensor *named;
    int n = weft_module_named_parameters(model, &named);
    cr_assert_eq(n, 6);
    weft_tensor *params[6];
    for (int i = 0; i < n; i++)
        params[i] = named[i].tensor;
    free(named);
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 0.05\nmomentum = 0.9\n", n, params);
    weft_tensor *x = weft_randn(2, (const int64_t[]){64, 784}, WEFT_F32, WEFT_CPU);
    weft_tensor *y = weft_randint(0, 10, 1, (const int64_t[]){64}, WEFT_I64, WEFT_CPU);
    cr_assert(x && y, "%s", weft_error_message());
    for (int s = 0; s < 3; s++)
        mlp_step(model, opt, x, y);
    struct weft_memory_stats before = {.struct_size = sizeof before}, after = before;
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &before), 0);
    for (int s = 0; s < 10; s++)
        mlp_step(model, opt, x, y);
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &after), 0);
    uint64_t requests = after.num_allocs - before.num_allocs;
    uint64_t from_system = requests - (after.num_cache_hits - before.num_cache_hits);
    cr_assert_gt(requests, 100, "ten steps made only %llu requests", (unsigned long long)requests);
    cr_expect_eq(from_system, 0, "%llu of %llu requests in ten steady steps went to the system",
                 (unsigned long long)from_system, (unsigned long long)requests);
    cr_expect_eq(after.reserved_bytes, before.reserved_bytes);
    weft_tensor_release(x);
    weft_tensor_release(y);
    weft_optimizer_free(opt);
    weft_module_free(model);
}

/* ---- parameter groups ---------------------------------------------------------------------- */

/* A parameter of the given shape with values from *seed. */
static weft_tensor *shaped_param(int ndim, const int64_t *shape, uint64_t *seed)
{
    double v[64];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    cr_assert_leq(n, 64);
    tu_random_values(v, n, -1, 1, seed);
    weft_tensor *p = tu_tensor(ndim, shape, v, WEFT_F32);
    cr_assert_eq(weft_requires_grad_(p, true), 0);
    return p;
}

/* p.grad = values, in p's shape. */
static void give_grad_shaped(weft_tensor *p, const double *values)
{
    weft_tensor *g = tu_tensor(p->ndim, p->shape, values, p->dtype);
    cr_assert_eq(weft_set_grad(p, g), 0, "%s", weft_error_message());
    weft_tensor_release(g);
}

static void random_grad(weft_tensor *p, uint64_t *seed)
{
    double g[64];
    tu_random_values(g, weft_tensor_numel(p), -1, 1, seed);
    give_grad_shaped(p, g);
}

static void assert_same(weft_tensor *a, weft_tensor *b)
{
    double v[64];
    tu_read(b, v);
    tu_assert_close(a, v, weft_tensor_numel(a), 0, 0);
}

/* Optimizer options of their own (weft_options_new), as a C program would make them. */
static weft_options *opts(const char *lr, const char *wd)
{
    weft_options *o = weft_options_new("optim", NULL);
    cr_assert_not_null(o);
    cr_assert_eq(weft_options_set(o, "lr", lr), 0);
    cr_assert_eq(weft_options_set(o, "weight_decay", wd), 0);
    cr_assert_eq(weft_options_set(o, "betas", "0.9, 0.99"), 0);
    return o;
}

Test(optim, two_groups_step_bit_for_bit_as_two_separate_optimizers)
{
    uint64_t seed = 11;
    const int64_t sw[2] = {3, 5}, sb[1] = {7};
    weft_tensor *w = shaped_param(2, sw, &seed), *b = shaped_param(1, sb, &seed);
    weft_tensor *w2 = weft_clone(w), *b2 = weft_clone(b);
    weft_requires_grad_(w2, true);
    weft_requires_grad_(b2, true);
    weft_options *o1 = opts("0.01", "0.1"), *o2 = opts("0.02", "0");
    struct weft_param_group groups[2] = {{1, &w, o1}, {1, &b, o2}};
    weft_optimizer *grouped = weft_optimizer_create_groups("adamw", 2, groups);
    cr_assert_not_null(grouped, "%s", weft_error_message());
    weft_optimizer *alone1 = weft_optimizer_create("adamw", 1, &w2, o1);
    weft_optimizer *alone2 = weft_optimizer_create("adamw", 1, &b2, o2);
    cr_assert(alone1 && alone2, "%s", weft_error_message());
    cr_assert_eq(weft_optimizer_num_groups(grouped), 2);
    cr_assert_eq(weft_optimizer_num_params(grouped), 2);
    cr_assert_eq(weft_optimizer_group_lr(grouped, 1), 0.02);
    for (int s = 0; s < 5; s++) {
        uint64_t gs = seed + (uint64_t)s;
        random_grad(w, &gs);
        random_grad(b, &gs);
        gs = seed + (uint64_t)s;
        random_grad(w2, &gs);
        random_grad(b2, &gs);
        cr_assert_eq(weft_optimizer_step(grouped), 0, "%s", weft_error_message());
        cr_assert_eq(weft_optimizer_step(alone1), 0);
        cr_assert_eq(weft_optimizer_step(alone2), 0);
        assert_same(w, w2);
        assert_same(b, b2);
    }
    /* set_lr reaches every group; zero_grad clears every group. */
    cr_assert_eq(weft_optimizer_set_lr(grouped, 0.5), 0);
    cr_assert_eq(weft_optimizer_group_lr(grouped, 0), 0.5);
    cr_assert_eq(weft_optimizer_group_lr(grouped, 1), 0.5);
    cr_assert_eq(weft_optimizer_zero_grad(grouped, true), 0);
    cr_assert_null(weft_grad(w));
    cr_assert_null(weft_grad(b));
    weft_optimizer_free(grouped);
    weft_optimizer_free(alone1);
    weft_optimizer_free(alone2);
    weft_options_free(o1);
    weft_options_free(o2);
    weft_tensor_release(w);
    weft_tensor_release(b);
    weft_tensor_release(w2);
    weft_tensor_release(b2);
}

Test(optim, decay_matrices_puts_dim_2_and_up_in_a_decayed_group_first)
{
    uint64_t seed = 5;
    const int64_t s1[1] = {4}, s2[2] = {4, 3}, s3[3] = {2, 2, 2};
    /* model order: bias, weight, ln gain, conv-like 3-d weight */
    weft_tensor *ps[4] = {shaped_param(1, s1, &seed), shaped_param(2, s2, &seed),
                          shaped_param(1, s1, &seed), shaped_param(3, s3, &seed)};
    cr_assert(!weft_param_decays(ps[0]) && weft_param_decays(ps[1]) && weft_param_decays(ps[3]));
    weft_optimizer *opt = make("adamw", "[optimizer]\nlr = 0.01\nweight_decay = 0.1\ndecay = matrices\n",
                               4, ps);
    cr_assert_eq(weft_optimizer_num_groups(opt), 2);
    cr_assert_eq(weft_optimizer_group_size(opt, 0), 2);
    cr_assert_eq(weft_optimizer_group_size(opt, 1), 2);
    cr_assert_eq(weft_optimizer_group_offset(opt, 1), 2);
    cr_assert_eq(weft_optimizer_param(opt, 0), ps[1]);
    cr_assert_eq(weft_optimizer_param(opt, 1), ps[3]);
    cr_assert_eq(weft_optimizer_param(opt, 2), ps[0]);
    cr_assert_eq(weft_optimizer_param(opt, 3), ps[2]);
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    struct weft_metadata *m = weft_metadata_new();
    for (int i = 0; i < 4; i++)
        random_grad(ps[i], &seed);
    cr_assert_eq(weft_optimizer_step(opt), 0);
    cr_assert_eq(weft_optimizer_state_export(opt, d, m), 0, "%s", weft_error_message());
    cr_assert_str_eq(weft_metadata_get(m, "param_groups.0.weight_decay"), "0.10000000000000001");
    cr_assert_str_eq(weft_metadata_get(m, "param_groups.1.weight_decay"), "0");
    cr_assert_str_eq(weft_metadata_get(m, "param_groups.1.lr"), "0.01");
    cr_assert_str_eq(weft_metadata_get(m, "param_groups.0.params"), "0, 1");
    cr_assert_str_eq(weft_metadata_get(m, "param_groups.1.params"), "2, 3");
    /* Global indices, as PyTorch: the 3-d weight is state 1, the second bias state 3. */
    weft_tensor *e1 = weft_tensor_dict_get(d, "state.1.exp_avg");
    weft_tensor *e3 = weft_tensor_dict_get(d, "state.3.exp_avg");
    cr_assert(e1 && e3);
    cr_assert_eq(e1->ndim, 3);
    cr_assert_eq(e3->ndim, 1);
    weft_tensor_release(e1);
    weft_tensor_release(e3);
    weft_tensor_dict_free(d);
    weft_metadata_free(m);
    weft_optimizer_free(opt);
    /* Only vectors: one group, without decay; default decay = all: one group. */
    opt = make("adamw", "[optimizer]\ndecay = matrices\n", 1, ps);
    cr_assert_eq(weft_optimizer_num_groups(opt), 1);
    cr_assert_eq(weft_optimizer_group_size(opt, 0), 1);
    weft_optimizer_free(opt);
    opt = make("adamw", "[optimizer]\n", 4, ps);
    cr_assert_eq(weft_optimizer_num_groups(opt), 1);
    cr_assert_eq(weft_optimizer_param(opt, 0), ps[0]);
    weft_optimizer_free(opt);
    for (int i = 0; i < 4; i++)
        weft_tensor_release(ps[i]);
}

Test(optim, the_no_decay_group_does_not_decay)
{
    /* A zero gradient: AdamW moves a parameter only by its decay. */
    uint64_t seed = 9;
    const int64_t s1[1] = {3}, s2[2] = {2, 2};
    weft_tensor *ps[2] = {shaped_param(1, s1, &seed), shaped_param(2, s2, &seed)};
    double b0[3], w0[4], zero[4] = {0};
    tu_read(ps[0], b0);
    tu_read(ps[1], w0);
    weft_optimizer *opt = make("adamw", "[optimizer]\nlr = 0.5\nweight_decay = 0.1\ndecay = matrices\n",
                               2, ps);
    give_grad_shaped(ps[0], zero);
    give_grad_shaped(ps[1], zero);
    cr_assert_eq(weft_optimizer_step(opt), 0);
    tu_assert_close(ps[0], b0, 3, 0, 0);
    for (int i = 0; i < 4; i++)
        w0[i] *= 1 - 0.5 * 0.1;
    tu_assert_close(ps[1], w0, 4, 1e-7, 0);
    weft_optimizer_free(opt);
    weft_tensor_release(ps[0]);
    weft_tensor_release(ps[1]);
}

Test(optim, grouped_state_round_trip_resumes_identically)
{
    uint64_t seed = 21;
    const int64_t s1[1] = {5}, s2[2] = {3, 4};
    weft_tensor *ps[3] = {shaped_param(1, s1, &seed), shaped_param(2, s2, &seed),
                          shaped_param(1, s1, &seed)};
    const char *ini = "[optimizer]\nlr = 0.01\nweight_decay = 0.1\ndecay = matrices\n";
    weft_optimizer *opt = make("adamw", ini, 3, ps);
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 3; i++)
            random_grad(ps[i], &seed);
        cr_assert_eq(weft_optimizer_step(opt), 0);
    }
    weft_optimizer_set_lr(opt, 0.004);
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    struct weft_metadata *m = weft_metadata_new();
    cr_assert_eq(weft_optimizer_state_export(opt, d, m), 0, "%s", weft_error_message());
    tu_tmpdir_create("optim");
    const char *path = tu_tmp_path("grouped.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, m), 0, "%s", weft_error_message());
    struct weft_tensor_dict *d2;
    struct weft_metadata *m2;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &d2, &m2), 0, "%s", weft_error_message());
    tu_tmpdir_remove();

    weft_tensor *qs[3];
    for (int i = 0; i < 3; i++) {
        qs[i] = weft_clone(ps[i]);
        weft_requires_grad_(qs[i], true);
    }
    weft_optimizer *resumed = make("adamw", "[optimizer]\nweight_decay = 0.1\ndecay = matrices\n", 3, qs);
    cr_assert_eq(weft_optimizer_state_import(resumed, d2, m2), 0, "%s", weft_error_message());
    cr_assert_eq(weft_optimizer_group_lr(resumed, 0), 0.004);
    cr_assert_eq(weft_optimizer_group_lr(resumed, 1), 0.004);
    for (int s = 0; s < 3; s++) {
        uint64_t gs = seed + (uint64_t)s;
        for (int i = 0; i < 3; i++)
            random_grad(ps[i], &gs);
        gs = seed + (uint64_t)s;
        for (int i = 0; i < 3; i++)
            random_grad(qs[i], &gs);
        cr_assert_eq(weft_optimizer_step(opt), 0);
        cr_assert_eq(weft_optimizer_step(resumed), 0);
        for (int i = 0; i < 3; i++)
            assert_same(qs[i], ps[i]);
    }
    /* One group cannot take the state of two, as PyTorch's load_state_dict. */
    weft_optimizer *single = make("adamw", "[optimizer]\n", 3, qs);
    cr_assert_lt(weft_optimizer_state_import(single, d2, m2), 0);
    tu_assert_error(WEFT_ERR_VALUE, "loaded state dict has a different number of parameter groups");
    weft_optimizer_free(single);
    weft_tensor_dict_free(d);
    weft_tensor_dict_free(d2);
    weft_metadata_free(m);
    weft_metadata_free(m2);
    weft_optimizer_free(opt);
    weft_optimizer_free(resumed);
    for (int i = 0; i < 3; i++) {
        weft_tensor_release(ps[i]);
        weft_tensor_release(qs[i]);
    }
}

Test(optim, group_errors_follow_pytorch)
{
    uint64_t seed = 2;
    const int64_t s1[1] = {3};
    weft_tensor *p = shaped_param(1, s1, &seed);
    struct weft_param_group twice[2] = {{1, &p, NULL}, {1, &p, NULL}};
    cr_assert_null(weft_optimizer_create_groups("sgd", 2, twice));
    tu_assert_error(WEFT_ERR_VALUE, "some parameters appear in more than one parameter group");
    cr_assert_null(weft_optimizer_create_groups("sgd", 0, twice));
    tu_assert_error(WEFT_ERR_VALUE, "parameter groups");
    struct weft_param_group empty[1] = {{0, &p, NULL}};
    cr_assert_null(weft_optimizer_create_groups("sgd", 1, empty));
    tu_assert_error(WEFT_ERR_VALUE, "empty parameter list");
    struct weft_config *cfg = weft_config_parse("[optimizer]\ndecay = odd\n", "test.ini");
    cr_assert_null(weft_optimizer_create("adamw", 1, &p, weft_config_options(cfg, "optimizer")));
    tu_assert_error(WEFT_ERR_CONFIG, "decay");
    weft_config_free(cfg);
    weft_tensor_release(p);
}

/* ---- OneCycleLR and ReduceLROnPlateau against PyTorch (tests/sched/gen.py) ---------------- */

static bool close_to(double got, double want)
{
    if (isnan(want))
        return isnan(got);
    return fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want));
}

/* One case of tests/sched/fixtures/schedulers.txt being replayed. */
struct sched_case {
    char name[128];
    double pv[3];
    weft_tensor *p;
    weft_optimizer *opt;
    struct weft_config *cfg;
    weft_scheduler *s;
    bool expect_error;
};

static void sched_case_free(struct sched_case *c)
{
    weft_scheduler_free(c->s);
    weft_config_free(c->cfg);
    weft_optimizer_free(c->opt);
    weft_tensor_release(c->p);
    memset(c, 0, sizeof *c);
}

static void check_lr_momentum(const struct sched_case *c, int line, double lr, double m)
{
    cr_assert(close_to(weft_optimizer_get_lr(c->opt), lr), "%s (line %d): lr %.17g, PyTorch %.17g",
              c->name, line, weft_optimizer_get_lr(c->opt), lr);
    cr_assert(close_to(weft_optimizer_get_momentum(c->opt), m),
              "%s (line %d): momentum %.17g, PyTorch %.17g", c->name, line,
              weft_optimizer_get_momentum(c->opt), m);
}

/* "s G0 G1 G2 LR M P0 P1 P2": a step of the optimizer, then of the schedule. */
static void replay_step(struct sched_case *c, int line, const char *args)
{
    double v[8];
    cr_assert_eq(sscanf(args, "%lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3],
                        &v[4], &v[5], &v[6], &v[7]), 8, "line %d", line);
    give_grad(c->p, v);
    cr_assert_eq(weft_optimizer_step(c->opt), 0, "%s", weft_error_message());
    cr_assert_eq(weft_scheduler_step(c->s), 0, "%s (line %d): %s", c->name, line,
                 weft_error_message());
    check_lr_momentum(c, line, v[3], v[4]);
    double got[3];
    tu_read(c->p, got);
    for (int i = 0; i < 3; i++)
        cr_assert(close_to(got[i], v[5 + i]), "%s (line %d): parameter %d = %.17g, PyTorch %.17g",
                  c->name, line, i, got[i], v[5 + i]);
}

Test(optim, onecycle_and_plateau_match_pytorch_fixtures)
{
    const char *dir = getenv("WEFT_TEST_SOURCE_DIR");
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/sched/fixtures/schedulers.txt", dir ? dir : "tests");
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s (written by tests/sched/gen.py, checked in)", path);
    struct sched_case c = {0};
    int n = 0, cases = 0, events = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        line[strcspn(line, "\n")] = '\0';
        char *args = strchr(line, ' ');
        args = args ? args + 1 : line + strlen(line);
        if (!strncmp(line, "case ", 5)) {
            snprintf(c.name, sizeof c.name, "%s", args);
        } else if (!strncmp(line, "opt ", 4)) {
            char type[16], ini[128];
            double lr, m;
            cr_assert_eq(sscanf(args, "%15s %lf %lf", type, &lr, &m), 3, "line %d", n);
            snprintf(ini, sizeof ini, "[optimizer]\nlr = %.17g\n%s%.17g\n", lr,
                     strcmp(type, "sgd") ? "; " : "momentum = ", m);
            c.p = tu_tensor(1, (int64_t[]){3}, c.pv, WEFT_F64);
            cr_assert_eq(weft_requires_grad_(c.p, true), 0);
            c.opt = make(type, ini, 1, &c.p);
        } else if (!strncmp(line, "ini ", 4)) {
            char ini[1024] = "[scheduler]\n";
            for (char *save = NULL, *kv = strtok_r(args, ";", &save); kv;
                 kv = strtok_r(NULL, ";", &save))
                snprintf(ini + strlen(ini), sizeof ini - strlen(ini), "%s\n", kv);
            cr_assert_not_null(c.cfg = weft_config_parse(ini, "sched.ini"));
            c.s = weft_scheduler_create(c.opt, weft_config_options(c.cfg, "scheduler"));
            cr_assert_not_null(c.s, "%s: %s", c.name, weft_error_message());
            cr_assert_eq(weft_config_check_unknown(c.cfg), 0, "%s", weft_error_message());
        } else if (!strncmp(line, "init ", 5)) {
            double lr, m;
            cr_assert_eq(sscanf(args, "%lf %lf", &lr, &m), 2, "line %d", n);
            check_lr_momentum(&c, n, lr, m);
        } else if (!strncmp(line, "s ", 2)) {
            replay_step(&c, n, args);
            events++;
        } else if (!strncmp(line, "m ", 2)) {
            double metric, lr, m;
            cr_assert_eq(sscanf(args, "%lf %lf %lf", &metric, &lr, &m), 3, "line %d", n);
            cr_assert_eq(weft_scheduler_step_metric(c.s, metric), 0, "%s", weft_error_message());
            check_lr_momentum(&c, n, lr, m);
            events++;
        } else if (!strncmp(line, "err ", 4)) {
            cr_assert_neq(weft_scheduler_step(c.s), 0, "%s: stepped past total_steps", c.name);
            cr_assert(strstr(weft_error_message(), args), "%s: error '%s', PyTorch's '%s'", c.name,
                      weft_error_message(), args);
            weft_error_clear();
        } else if (!strcmp(line, "end")) {
            sched_case_free(&c);
            cases++;
        }
    }
    fclose(f);
    sched_case_free(&c);
    cr_assert_geq(cases, 12, "only %d cases in %s", cases, path);
    cr_assert_geq(events, 190, "only %d events in %s", events, path);
}

Test(optim, onecycle_and_plateau_config_errors)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 0.1\n", 1, &w);
    static const char *const bad[][2] = {
        {"[scheduler]\ntype = onecycle\n", "You must define either total_steps OR (epochs AND steps_per_epoch)"},
        {"[scheduler]\ntype = onecycle\ntotal_steps = 0\n", "Expected positive integer total_steps, but got 0"},
        {"[scheduler]\ntype = onecycle\nepochs = 2\n", "Expected positive integer steps_per_epoch"},
        {"[scheduler]\ntype = onecycle\ntotal_steps = 10\npct_start = 1.5\n", "Expected float between 0 and 1 pct_start"},
        {"[scheduler]\ntype = onecycle\ntotal_steps = 10\npct_start = 0.1\n", "leaves phase 1 of the cycle without a step"},
        {"[scheduler]\ntype = onecycle\ntotal_steps = 10\nanneal_strategy = exp\n", "anneal_strategy"},
        {"[scheduler]\ntype = plateau\nfactor = 1.0\n", "Factor should be < 1.0."},
        {"[scheduler]\ntype = plateau\nmode = lowest\n", "mode"},
        {"[scheduler]\ntype = plateau\nthreshold_mode = pct\n", "threshold_mode"},
        {"[scheduler]\ntype = plateau\npatience = -1\n", "patience"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct weft_config *cfg = weft_config_parse(bad[i][0], "sched.ini");
        cr_assert_null(weft_scheduler_create(opt, weft_config_options(cfg, "scheduler")),
                       "accepted %s", bad[i][0]);
        cr_assert(strstr(weft_error_message(), bad[i][1]), "%s: '%s', expected '%s'", bad[i][0],
                  weft_error_message(), bad[i][1]);
        cr_assert(strstr(weft_error_message(), "sched.ini: [scheduler]"), "%s", weft_error_message());
        weft_error_clear();
        weft_config_free(cfg);
    }
    /* a metric for a scheduler that takes none */
    struct weft_config *cfg = weft_config_parse("[scheduler]\ntype = step\nstep_size = 2\n", "s.ini");
    weft_scheduler *s = weft_scheduler_create(opt, weft_config_options(cfg, "scheduler"));
    cr_assert_not_null(s);
    cr_assert(!weft_scheduler_wants_metric(s));
    cr_assert_eq(weft_scheduler_step_metric(s, 1.0), WEFT_ERR_VALUE);
    weft_error_clear();
    weft_scheduler_free(s);
    weft_config_free(cfg);
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

Test(optim, plateau_and_onecycle_state_round_trip)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    weft_optimizer *opt = make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n", 1, &w);
    static const char *const inis[] = {
        "[scheduler]\ntype = plateau\npatience = 0\nfactor = 0.5\ncooldown = 1\n",
        "[scheduler]\ntype = onecycle\ntotal_steps = 10\nmax_lr = 1\n",
    };
    for (int k = 0; k < 2; k++) {
        struct weft_config *cfg = weft_config_parse(inis[k], "s.ini");
        weft_scheduler *a = weft_scheduler_create(opt, weft_config_options(cfg, "scheduler"));
        cr_assert_not_null(a, "%s", weft_error_message());
        const double metrics[] = {1.0, 2.0, 3.0, 0.5};
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(weft_scheduler_step(a), 0);
            if (weft_scheduler_wants_metric(a))
                cr_assert_eq(weft_scheduler_step_metric(a, metrics[i]), 0);
        }
        double lr = weft_optimizer_get_lr(opt), m = weft_optimizer_get_momentum(opt);
        struct weft_metadata *meta = weft_metadata_new();
        cr_assert_eq(weft_scheduler_state_export(a, meta), 0);
        weft_scheduler *b = weft_scheduler_create(opt, weft_config_options(cfg, "scheduler"));
        cr_assert_not_null(b, "%s", weft_error_message());
        cr_assert_eq(weft_scheduler_state_import(b, meta), 0, "%s", weft_error_message());
        cr_assert_eq(weft_optimizer_get_lr(opt), lr, "%s: lr %g after import, %g before", inis[k],
                     weft_optimizer_get_lr(opt), lr);
        cr_assert_eq(weft_optimizer_get_momentum(opt), m);
        /* both go on alike */
        cr_assert_eq(weft_scheduler_step(a), 0);
        if (weft_scheduler_wants_metric(a))
            cr_assert_eq(weft_scheduler_step_metric(a, 4.0), 0);
        double next = weft_optimizer_get_lr(opt);
        cr_assert_eq(weft_scheduler_step(b), 0);
        if (weft_scheduler_wants_metric(b))
            cr_assert_eq(weft_scheduler_step_metric(b, 4.0), 0);
        cr_assert_eq(weft_optimizer_get_lr(opt), next);
        weft_metadata_free(meta);
        weft_scheduler_free(a);
        weft_scheduler_free(b);
        weft_config_free(cfg);
    }
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}

/* ---- nanoGPT's schedule -------------------------------------------------------------------- */

/* nanoGPT's get_lr(it), written as in train.py. */
static double nanogpt_lr(int it, double lr, int warmup, int decay, double min_lr)
{
    if (it < warmup)
        return lr * (it + 1) / (warmup + 1);
    if (it > decay)
        return min_lr;
    double ratio = (double)(it - warmup) / (decay - warmup);
    double coeff = 0.5 * (1.0 + cos(PI * ratio));
    return min_lr + coeff * (lr - min_lr);
}

Test(optim, warmup_cosine_is_nanogpts_get_lr)
{
    double e[40];
    for (int it = 0; it < 40; it++)
        e[it] = nanogpt_lr(it, 1e-3, 5, 30, 1e-4);
    check_schedule("[scheduler]\ntype = warmup_cosine\nwarmup_iters = 5\nlr_decay_iters = 30\n"
                   "min_lr = 1e-4\n", 1e-3, e, 40);
    /* spot checks of the formula itself */
    cr_assert_float_eq(e[0], 1e-3 / 6, 1e-18);
    cr_assert_float_eq(e[5], 1e-3, 1e-18);
    cr_assert_float_eq(e[30], 1e-4, 1e-18);
    cr_assert_float_eq(e[31], 1e-4, 1e-18);
    for (int it = 0; it < 12; it++)
        e[it] = nanogpt_lr(it, 0.5, 0, 10, 0);
    check_schedule("[scheduler]\ntype = warmup_cosine\nlr_decay_iters = 10\n", 0.5, e, 12);
}

Test(optim, warmup_cosine_config_errors)
{
    double v[1] = {1};
    weft_tensor *w = param(v, 1, WEFT_F32);
    weft_optimizer *opt = make("sgd", "[optimizer]\n", 1, &w);
    static const char *const bad[][2] = {
        {"[scheduler]\ntype = warmup_cosine\n", "missing key 'lr_decay_iters'"},
        {"[scheduler]\ntype = warmup_cosine\nwarmup_iters = 10\nlr_decay_iters = 10\n",
         "expected more than warmup_iters (10)"},
        {"[scheduler]\ntype = warmup_cosine\nwarmup_iters = -1\nlr_decay_iters = 10\n", ">= 0"},
        {"[scheduler]\ntype = warmup_cosine\nlr_decay_iters = 10\nwarmup_steps = 3\n",
         "set warmup_iters instead"},
        {"[scheduler]\ntype = warmup_cosine\nlr_decay_iters = 10\nmin_lr = -1\n", "min_lr"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct weft_config *cfg = weft_config_parse(bad[i][0], "sched.ini");
        cr_assert_null(weft_scheduler_create(opt, weft_config_options(cfg, "scheduler")),
                       "accepted %s", bad[i][0]);
        cr_assert(strstr(weft_error_message(), bad[i][1]), "%s", weft_error_message());
        weft_error_clear();
        weft_config_free(cfg);
    }
    weft_optimizer_free(opt);
    weft_tensor_release(w);
}
