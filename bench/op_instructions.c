/* bench/op_instructions.c: N calls of one tiny op, for counting the instructions a call
 * costs (bench/op-instructions.sh runs it under callgrind at two N and divides the
 * difference). Built by that script against a build tree's libraries, so it compiles
 * against any commit whose public API has these calls.
 *
 *   op_instructions KIND N      KIND: add_16 | view_16 | mul_scalar_16 | chain_fwd_bwd |
 *                                     gelu_tanh_4096 | gelu_tanh_backward_4096
 *
 * add_16, view_16: the calls weft-bench times (a [16] float32 tensor, released at once).
 * chain_fwd_bwd: weft-bench's autograd chain, counted per op: mul, add, tanh in turn on
 * [16], recorded, then backward through the chain of 100 (N chains).
 * gelu_tanh_4096, gelu_tanh_backward_4096: the cpu kernels of tanh-GELU and its backward on
 * [4096] float32 values in [-6, 6) (the kernel's cost, not the front end's), called through
 * the dispatcher as nn's gelu does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/kernel.h>

static void die(const char *what)
{
    fprintf(stderr, "op_instructions: %s: %s\n", what, weft_error_message());
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: op_instructions add_16|view_16|mul_scalar_16|chain_fwd_bwd|"
                        "gelu_tanh_4096|gelu_tanh_backward_4096 N\n");
        return 2;
    }
    const char *kind = argv[1];
    long n = atol(argv[2]);
    const int64_t shape[1] = {16}, shape2[2] = {4, 4};
    weft_tensor *a = weft_rand(1, shape, WEFT_F32, WEFT_CPU);
    weft_tensor *b = weft_rand(1, shape, WEFT_F32, WEFT_CPU);
    if (!a || !b)
        die("setting up");
    if (strcmp(kind, "add_16") == 0) {
        for (long i = 0; i < n; i++)
            weft_tensor_release(weft_add(a, b));
    } else if (strcmp(kind, "view_16") == 0) {
        for (long i = 0; i < n; i++)
            weft_tensor_release(weft_view(a, 2, shape2));
    } else if (strcmp(kind, "mul_scalar_16") == 0) {
        for (long i = 0; i < n; i++)
            weft_tensor_release(weft_mul_scalar(a, 0.5));
    } else if (strcmp(kind, "chain_fwd_bwd") == 0) {
        weft_requires_grad_(a, true);
        for (long r = 0; r < n; r++) {
            weft_scope_push();
            weft_tensor *y = a;
            for (int i = 0; i < 100; i++)
                y = i % 3 == 0 ? weft_mul(y, b) : i % 3 == 1 ? weft_add(y, b) : weft_tanh(y);
            weft_backward(weft_sum(y, 0, NULL, false), NULL, false);
            weft_zero_grad(a, true);
            weft_scope_pop();
        }
    } else if (strncmp(kind, "gelu_tanh", 9) == 0) {
        const int64_t big[1] = {4096};
        weft_tensor *x = weft_add_scalar(weft_mul_scalar(weft_rand(1, big, WEFT_F32, WEFT_CPU), 12), -6);
        weft_tensor *g = weft_ones(1, big, WEFT_F32, WEFT_CPU), *y = weft_empty_like(x);
        int op = weft_op_register(WEFT_OP_GELU_TANH_NAME);
        bool backward = strcmp(kind, "gelu_tanh_backward_4096") == 0;
        if (!x || !g || !y || op < 0)
            die("setting up");
        struct weft_op_call c = {.op = op, .nin = 1, .nout = 1, .in = {x}, .out = {y}};
        for (long i = 0; i < n; i++) {
            if (backward)
                weft_tensor_release(weft_gelu_backward(g, x, 1));
            else if (weft_dispatch(&c) != 0)
                break;
        }
    } else {
        fprintf(stderr, "op_instructions: unknown kind %s\n", kind);
        return 2;
    }
    if (weft_error_code() != WEFT_OK)
        die(kind);
    weft_tensor_release(a);
    weft_tensor_release(b);
    return 0;
}
