/* The C API a program uses without touching struct fields or INI text: tensor accessors,
 * a module's parameters as a borrowed array, torch.optim's constructors with option
 * structs, and the memory calls weft.h now declares. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TestSuite(api, .init = tu_setup, .fini = tu_teardown);

/* ---- tensor accessors ------------------------------------------------------------- */

Test(api, accessors_read_a_views_metadata)
{
    weft_scope_push();
    weft_tensor *x = weft_arange(0, 24, 1, WEFT_F64, WEFT_CPU);
    weft_tensor *v = weft_view(x, 3, (int64_t[]){2, 3, 4});
    weft_tensor *y = weft_narrow(weft_transpose(v, 0, 2), 1, 1, 2); /* shape [4, 2, 2] */
    cr_assert_not_null(y);
    cr_assert_eq(weft_tensor_ndim(y), 3);
    const int64_t *shape = weft_tensor_shape(y);
    const int64_t *stride = weft_tensor_strides(y);
    cr_assert(shape[0] == 4 && shape[1] == 2 && shape[2] == 2);
    cr_assert(stride[0] == 1 && stride[1] == 4 && stride[2] == 12);
    cr_assert_eq(weft_tensor_stride(y, -1), stride[2]);
    cr_assert_eq(weft_tensor_storage_offset(y), 4);
    cr_assert_eq(weft_tensor_numel(y), 16);
    cr_assert_eq(weft_tensor_dtype(y), WEFT_F64);
    cr_assert(weft_device_equal(weft_tensor_device(y), WEFT_CPU));
    weft_scope_pop();
}

Test(api, accessors_on_null_say_so_without_crashing)
{
    cr_assert_eq(weft_tensor_ndim(NULL), -1);
    cr_assert_null(weft_tensor_shape(NULL));
    cr_assert_null(weft_tensor_strides(NULL));
    cr_assert_eq(weft_tensor_storage_offset(NULL), -1);
    cr_assert_not(weft_dtype_valid(weft_tensor_dtype(NULL)));
    cr_assert_eq(weft_tensor_device(NULL).type, -1);
}

Test(api, accessors_on_a_scalar)
{
    weft_tensor *s = weft_scalar_tensor(3, WEFT_I32, WEFT_CPU);
    cr_assert_eq(weft_tensor_ndim(s), 0);
    cr_assert_not_null(weft_tensor_shape(s));
    cr_assert_eq(weft_tensor_numel(s), 1);
    cr_assert_eq(weft_tensor_dtype(s), WEFT_I32);
    weft_tensor_release(s);
}

/* ---- module parameters -------------------------------------------------------------- */

static weft_module *mlp(void)
{
    weft_module *layers[3] = {weft_nn_linear(4, 3, true), weft_nn_relu(),
                              weft_nn_linear(3, 2, false)};
    return weft_nn_sequential(3, layers);
}

Test(api, module_parameters_are_named_parameters_order_without_names)
{
    weft_module *m = mlp();
    cr_assert_not_null(m);
    int n = -1;
    weft_tensor *const *p = weft_module_parameters(m, &n);
    cr_assert_not_null(p);
    cr_assert_eq(n, 3);
    struct weft_named_tensor *named;
    cr_assert_eq(weft_module_named_parameters(m, &named), 3);
    for (int i = 0; i < n; i++)
        cr_assert_eq(p[i], named[i].tensor, "%s", named[i].name);
    free(named);
    cr_assert_null(p[n], "NULL-terminated");
    /* borrowed: the same array each time, no copy to free */
    int n2;
    cr_assert_eq(weft_module_parameters(m, &n2), p);
    weft_module_free(m);
}

Test(api, module_parameters_follow_a_new_parameter_below)
{
    weft_module *m = mlp();
    int n;
    weft_module_parameters(m, &n);
    cr_assert_eq(n, 3);
    weft_module *child = weft_module_child(m, "1"); /* the ReLU: no parameters yet */
    cr_assert_not_null(child);
    weft_tensor *extra = weft_zeros(1, (int64_t[]){5}, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_module_register_parameter(child, "scale", extra), 0);
    weft_tensor_release(extra);
    weft_tensor *const *p = weft_module_parameters(m, &n);
    cr_assert_eq(n, 4);
    cr_assert_eq(p[2], extra); /* "1.scale" comes between "0.*" and "2.weight" */
    cr_assert_eq(weft_module_num_parameters(m), 4 * 3 + 3 + 5 + 3 * 2);
    weft_module_free(m);
}

Test(api, module_without_parameters_gives_an_empty_array)
{
    weft_module *m = weft_nn_relu();
    int n = -1;
    weft_tensor *const *p = weft_module_parameters(m, &n);
    cr_assert_not_null(p);
    cr_assert_eq(n, 0);
    weft_module_free(m);
    cr_assert_null(weft_module_parameters(NULL, &n));
    tu_assert_error(WEFT_ERR_VALUE, "weft_module_parameters");
}

/* ---- optimizers from C -------------------------------------------------------------------- */

/* Two parameters with gradients: [1, -2, 3] and [[0.5, 0.25]]. */
static void make_params(weft_tensor **p)
{
    p[0] = tu_tensor(1, (int64_t[]){3}, (double[]){1, -2, 3}, WEFT_F32);
    p[1] = tu_tensor(2, (int64_t[]){1, 2}, (double[]){0.5, 0.25}, WEFT_F32);
    for (int i = 0; i < 2; i++)
        weft_requires_grad_(p[i], true);
}

static void give_grads(weft_tensor **p)
{
    weft_scope_push();
    weft_tensor *loss = weft_add(weft_sum(weft_mul(p[0], p[0]), 0, NULL, false),
                                 weft_sum(weft_mul_scalar(p[1], 3), 0, NULL, false));
    cr_assert_eq(weft_backward(loss, NULL, false), 0);
    weft_scope_pop();
}

/* Three steps of the optimizer made from C and of the one made from INI text agree
 * exactly: the structs are torch.optim's arguments, the INI keys the same ones. */
static void same_as_ini(weft_optimizer *(*make)(weft_tensor **), const char *type,
                        const char *const *kv)
{
    weft_tensor *a[2], *b[2];
    make_params(a);
    make_params(b);
    weft_optimizer *oa = make(a);
    cr_assert_not_null(oa, "%s", weft_error_message());
    weft_options *o = weft_options_new("optim", "test");
    for (int i = 0; kv[i]; i += 2)
        weft_options_set(o, kv[i], kv[i + 1]);
    weft_optimizer *ob = weft_optimizer_create(type, 2, b, o);
    weft_options_free(o);
    cr_assert_not_null(ob, "%s", weft_error_message());
    cr_assert_str_eq(weft_optimizer_name(oa), type);
    cr_assert_eq(weft_optimizer_get_lr(oa), weft_optimizer_get_lr(ob));
    for (int s = 0; s < 3; s++) {
        give_grads(a);
        give_grads(b);
        cr_assert_eq(weft_optimizer_step(oa), 0);
        cr_assert_eq(weft_optimizer_step(ob), 0);
        weft_optimizer_zero_grad(oa, true);
        weft_optimizer_zero_grad(ob, true);
    }
    for (int i = 0; i < 2; i++) {
        double va[3], vb[3];
        tu_read(a[i], va);
        tu_read(b[i], vb);
        for (int k = 0; k < weft_tensor_numel(a[i]); k++)
            cr_assert_eq(va[k], vb[k], "%s param %d[%d]: %g vs %g", type, i, k, va[k], vb[k]);
        double orig = i == 0 ? (double[]){1, -2, 3}[0] : 0.5;
        cr_assert_neq(va[0], orig, "%s did not move the parameter", type);
    }
    weft_optimizer_free(oa);
    weft_optimizer_free(ob);
    for (int i = 0; i < 2; i++) {
        weft_tensor_release(a[i]);
        weft_tensor_release(b[i]);
    }
}

static weft_optimizer *make_sgd(weft_tensor **p)
{
    struct weft_sgd_options o = WEFT_SGD_OPTIONS_INIT;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.nesterov = true;
    o.weight_decay = 0.01;
    return weft_sgd(2, p, &o);
}

static weft_optimizer *make_adam(weft_tensor **p)
{
    struct weft_adam_options o = WEFT_ADAM_OPTIONS_INIT;
    o.lr = 0.01;
    o.betas[1] = 0.99;
    o.amsgrad = true;
    return weft_adam(2, p, &o);
}

static weft_optimizer *make_adamw(weft_tensor **p)
{
    return weft_adamw(2, p, NULL); /* PyTorch's defaults: weight_decay 1e-2 */
}

static weft_optimizer *make_rmsprop(weft_tensor **p)
{
    struct weft_rmsprop_options o = WEFT_RMSPROP_OPTIONS_INIT;
    o.momentum = 0.5;
    o.centered = true;
    o.fused = false;
    return weft_rmsprop(2, p, &o);
}

Test(api, sgd_from_a_struct_steps_as_from_ini)
{
    same_as_ini(make_sgd, "sgd",
                (const char *const[]){"lr", "0.1", "momentum", "0.9", "nesterov", "true",
                                      "weight_decay", "0.01", NULL});
}

Test(api, adam_from_a_struct_steps_as_from_ini)
{
    same_as_ini(make_adam, "adam",
                (const char *const[]){"lr", "0.01", "betas", "0.9, 0.99", "amsgrad", "true",
                                      NULL});
}

Test(api, adamw_defaults_are_pytorchs)
{
    same_as_ini(make_adamw, "adamw", (const char *const[]){"weight_decay", "0.01", NULL});
}

Test(api, rmsprop_from_a_struct_steps_as_from_ini)
{
    same_as_ini(make_rmsprop, "rmsprop",
                (const char *const[]){"momentum", "0.5", "centered", "true", "fused", "false",
                                      NULL});
}

Test(api, option_struct_defaults_are_torch_optims)
{
    struct weft_sgd_options s = WEFT_SGD_OPTIONS_INIT;
    cr_assert(s.lr == 1e-3 && s.momentum == 0 && s.dampening == 0 && s.weight_decay == 0 &&
              !s.nesterov);
    struct weft_adam_options a = WEFT_ADAM_OPTIONS_INIT, w = WEFT_ADAMW_OPTIONS_INIT;
    cr_assert(a.lr == 1e-3 && a.betas[0] == 0.9 && a.betas[1] == 0.999 && a.eps == 1e-8 &&
              a.weight_decay == 0 && !a.amsgrad);
    cr_assert_eq(w.weight_decay, 1e-2);
    struct weft_rmsprop_options r = WEFT_RMSPROP_OPTIONS_INIT;
    cr_assert(r.lr == 1e-2 && r.alpha == 0.99 && r.eps == 1e-8 && r.momentum == 0 &&
              !r.centered);
    weft_tensor *p[2];
    make_params(p);
    weft_optimizer *opt = weft_rmsprop(2, p, NULL);
    cr_assert_eq(weft_optimizer_get_lr(opt), 1e-2);
    weft_optimizer_free(opt);
    weft_tensor_release(p[0]);
    weft_tensor_release(p[1]);
}

Test(api, bad_hyperparameters_give_pytorchs_message)
{
    weft_tensor *p[2];
    make_params(p);
    struct weft_adam_options o = WEFT_ADAM_OPTIONS_INIT;
    o.lr = -0.1;
    cr_assert_null(weft_adam(2, p, &o));
    tu_assert_error(WEFT_ERR_VALUE, "Invalid learning rate: -0.1");
    o = WEFT_ADAM_OPTIONS_INIT;
    o.betas[0] = 1.5;
    cr_assert_null(weft_adam(2, p, &o));
    tu_assert_error(WEFT_ERR_VALUE, "Invalid beta parameter at index 0: 1.5");
    weft_tensor_release(p[0]);
    weft_tensor_release(p[1]);
}

Test(api, optimizer_over_module_parameters_trains)
{
    weft_manual_seed(0);
    weft_module *m = weft_nn_linear(2, 1, true);
    int n;
    weft_tensor *const *params = weft_module_parameters(m, &n);
    struct weft_sgd_options o = WEFT_SGD_OPTIONS_INIT;
    o.lr = 0.1;
    weft_optimizer *opt = weft_sgd(n, params, &o);
    cr_assert_not_null(opt);
    weft_tensor *x = tu_tensor(2, (int64_t[]){4, 2}, (double[]){0, 0, 0, 1, 1, 0, 1, 1}, WEFT_F32);
    weft_tensor *y = tu_tensor(2, (int64_t[]){4, 1}, (double[]){1, 3, 2, 4}, WEFT_F32);
    double first = 0, last = 0;
    for (int step = 0; step < 200; step++) {
        weft_scope_push();
        weft_tensor *loss = weft_mse_loss(weft_module_forward(m, x), y, WEFT_REDUCTION_MEAN);
        double v;
        weft_tensor_item(loss, &v);
        if (step == 0)
            first = v;
        last = v;
        weft_backward(loss, NULL, false);
        weft_optimizer_step(opt);
        weft_optimizer_zero_grad(opt, true);
        weft_scope_pop();
    }
    tu_assert_no_error();
    cr_assert_lt(last, first / 100, "loss %g -> %g", first, last);
    weft_optimizer_free(opt);
    weft_tensor_release(x);
    weft_tensor_release(y);
    weft_module_free(m);
}

/* ---- memory calls through weft.h ------------------------------------------------------ */

Test(api, memory_summary_and_empty_cache_on_the_cpu)
{
    char *s = weft_memory_summary(WEFT_CPU, true);
    cr_assert_not_null(s, "%s", weft_error_message());
    cr_assert_gt(strlen(s), 0);
    free(s);
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats st = {.struct_size = sizeof st};
    weft_memory_stats(WEFT_CPU, &st);
    weft_error_clear();
}
