/* nn/sequential.c: nn.Sequential, the container that runs its children in order. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "weft/nn.h"

/* A Linear with a bias followed by a ReLU (the built-in types) run as one fused layer:
 * the same values, one pass fewer over the activations each way. */
static bool fuses_with_relu(const weft_module *linear, const weft_module *relu)
{
    return nn_is_linear(linear) && nn_is_relu(relu) &&
           weft_module_parameter(linear, "bias") != NULL;
}

/* The same for a Linear with a bias and a GELU: the GELU's approximate, or -1. */
static int fuses_with_gelu(const weft_module *linear, const weft_module *gelu)
{
    return nn_is_linear(linear) && weft_module_parameter(linear, "bias") != NULL
               ? nn_gelu_form(gelu)
               : -1;
}

static weft_tensor *sequential_forward(weft_module *m, weft_tensor *input)
{
    int n = weft_module_num_children(m);
    if (n == 0)
        return weft_autorelease(weft_tensor_retain(input)); /* PyTorch returns the input */
    /* Intermediate results die in this scope; only the last one is handed back. */
    weft_scope_push();
    weft_tensor *x = input;
    bool fuse = !nn_forward_hooked(); /* a hook sees every layer */
    for (int i = 0; i < n && x; i++) {
        weft_module *child = weft_module_child_at(m, i);
        if (fuse && i + 1 < n && fuses_with_relu(child, weft_module_child_at(m, i + 1))) {
            x = weft_linear_relu(x, weft_module_parameter(child, "weight"),
                                 weft_module_parameter(child, "bias"));
            i++;
            continue;
        }
        int gelu = fuse && i + 1 < n ? fuses_with_gelu(child, weft_module_child_at(m, i + 1)) : -1;
        if (gelu >= 0) {
            x = weft_linear_gelu(x, weft_module_parameter(child, "weight"),
                                 weft_module_parameter(child, "bias"),
                                 (enum weft_gelu_approximate)gelu);
            i++;
            continue;
        }
        x = weft_module_forward(child, x);
    }
    weft_tensor_retain(x);
    weft_scope_pop();
    return weft_autorelease(x);
}

/* Not registered: a Sequential is built from its children, not from options. */
static const struct weft_module_type sequential_type = {
    WEFT_VTABLE(WEFT_KIND_MODULE, "sequential", struct weft_module_type), "Sequential",
    sequential_forward,
    NULL, NULL,
    .onnx_export = nn_onnx_export_sequential,
};

weft_module *weft_nn_sequential(int n, weft_module *const *modules)
{
    weft_module *seq = n >= 0 ? weft_module_new(&sequential_type, NULL) : NULL;
    if (n < 0)
        weft_error_set(WEFT_ERR_VALUE, "weft_nn_sequential: n must be >= 0, got %d", n);
    /* Every module is consumed, also after a failure, so a caller never frees any. */
    int rc = seq ? 0 : WEFT_ERR_VALUE;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && !modules[i])
            rc = WEFT_ERR_VALUE; /* a constructor failed and set the error */
        if (rc == 0)
            rc = weft_nn_sequential_append(seq, modules[i]);
        else
            weft_module_free(modules[i]);
    }
    if (rc != 0) {
        weft_module_free(seq);
        return NULL;
    }
    return seq;
}

int weft_nn_sequential_append(weft_module *seq, weft_module *m)
{
    if (!seq || !m) {
        weft_module_free(m);
        return WEFT_ERR_VALUE;
    }
    if (strcmp(weft_module_type_name(seq), "Sequential") != 0) {
        weft_module_free(m);
        return weft_error_set(WEFT_ERR_TYPE, "weft_nn_sequential_append: expected a Sequential, "
                                             "got a %s", weft_module_type_name(seq));
    }
    char name[24];
    snprintf(name, sizeof name, "%d", weft_module_num_children(seq));
    return weft_module_add_child(seq, name, m);
}
