/* nn/sequential.c: nn.Sequential, the container that runs its children in order. */
#include <stdio.h>
#include <stdlib.h>
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

/* checkpoint_segments: torch.utils.checkpoint.checkpoint_sequential's split, each
 * segment's children [start, end) run through weft_checkpoint with its entry as ctx. */
struct segment {
    weft_module *seq;
    int start, end;
};

struct sequential_state {
    int segments;
    struct segment *seg; /* [segments], made at the forward for the children it has */
    int seg_children;
};

static void sequential_state_free(void *state)
{
    struct sequential_state *s = state;
    if (s)
        free(s->seg);
    free(s);
}

/* Children [start, end) on x, a linear and the activation after it fused. */
static weft_tensor *run_children(weft_module *m, int start, int end, weft_tensor *x)
{
    bool fuse = !nn_forward_hooked(); /* a hook sees every layer */
    for (int i = start; i < end && x; i++) {
        weft_module *child = weft_module_child_at(m, i);
        if (fuse && i + 1 < end && fuses_with_relu(child, weft_module_child_at(m, i + 1))) {
            x = weft_linear_relu(x, weft_module_parameter(child, "weight"),
                                 weft_module_parameter(child, "bias"));
            i++;
            continue;
        }
        int gelu = fuse && i + 1 < end ? fuses_with_gelu(child, weft_module_child_at(m, i + 1)) : -1;
        if (gelu >= 0) {
            x = weft_linear_gelu(x, weft_module_parameter(child, "weight"),
                                 weft_module_parameter(child, "bias"),
                                 (enum weft_gelu_approximate)gelu);
            i++;
            continue;
        }
        x = weft_module_forward(child, x);
    }
    return x;
}

static weft_tensor *segment_forward(void *ctx, int n, weft_tensor *const *x)
{
    (void)n;
    const struct segment *seg = ctx;
    return run_children(seg->seq, seg->start, seg->end, x[0]);
}

/* PyTorch's split: segments of n / segments children (the last takes the rest), all but
 * the last checkpointed. */
static weft_tensor *run_segments(weft_module *m, struct sequential_state *st, int n, weft_tensor *x)
{
    int k = st->segments < n ? st->segments : n;
    if (!st->seg || st->seg_children != n) {
        struct segment *seg = calloc((size_t)k, sizeof *seg);
        if (!seg) {
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "Sequential: out of host memory");
            return NULL;
        }
        int size = n / k;
        for (int i = 0; i < k; i++)
            seg[i] = (struct segment){m, i * size, i + 1 == k ? n : (i + 1) * size};
        free(st->seg);
        st->seg = seg;
        st->seg_children = n;
    }
    for (int i = 0; i + 1 < k && x; i++)
        x = weft_checkpoint(segment_forward, &st->seg[i], 1, &x);
    return x ? run_children(m, st->seg[k - 1].start, n, x) : NULL;
}

static weft_tensor *sequential_forward(weft_module *m, weft_tensor *input)
{
    int n = weft_module_num_children(m);
    if (n == 0)
        return weft_autorelease(weft_tensor_retain(input)); /* PyTorch returns the input */
    struct sequential_state *st = weft_module_state(m);
    /* Intermediate results die in this scope; only the last one is handed back. */
    weft_scope_push();
    weft_tensor *x = st && st->segments > 1 ? run_segments(m, st, n, input)
                                            : run_children(m, 0, n, input);
    weft_tensor_retain(x);
    weft_scope_pop();
    return weft_autorelease(x);
}

/* Not registered: a Sequential is built from its children, not from options. */
static const struct weft_module_type sequential_type = {
    WEFT_VTABLE(WEFT_KIND_MODULE, "sequential", struct weft_module_type), "Sequential",
    sequential_forward,
    sequential_state_free, NULL,
    .onnx_export = nn_onnx_export_sequential,
};

weft_module *weft_nn_sequential(int n, weft_module *const *modules)
{
    struct sequential_state *st = n >= 0 ? calloc(1, sizeof *st) : NULL;
    weft_module *seq = st ? weft_module_new(&sequential_type, st) : NULL;
    if (n >= 0 && !seq) {
        if (!st)
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "Sequential: out of host memory");
        free(st);
    }
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

int weft_nn_sequential_checkpoint(weft_module *seq, int segments)
{
    if (!seq || strcmp(weft_module_type_name(seq), "Sequential") != 0)
        return weft_error_set(WEFT_ERR_TYPE, "weft_nn_sequential_checkpoint: expected a Sequential");
    if (segments < 0)
        return weft_error_set(WEFT_ERR_VALUE, "checkpoint_segments must be 0 (off) or more, got %d",
                              segments);
    struct sequential_state *st = weft_module_state(seq);
    st->segments = segments;
    return 0;
}
