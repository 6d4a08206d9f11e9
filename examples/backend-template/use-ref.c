/* use-ref.c: puts tensors on device "ref", computes there and checks the values on the
 * host. Exit status 0 when every check passes. Build:
 *   cc use-ref.c $(pkg-config --cflags --libs weft) -o use-ref
 * and run with WEFT_PLUGIN_PATH naming the directory that holds weft-ref.so. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <weft.h>
#include <weft/kernel.h>

static int failures;

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s (%s)\n", what, weft_error_message());
        failures++;
    }
}

/* Reads t back to the host and compares it with want[n]. */
static void expect_values(weft_tensor *t, const float *want, int n, const char *what)
{
    float got[16] = {0};
    int ok = t && t->dtype == WEFT_F32 && weft_tensor_numel(t) == n &&
             weft_tensor_read(t, got, sizeof got) == 0;
    for (int i = 0; ok && i < n; i++)
        ok = fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i]));
    expect(ok, what);
}

int main(void)
{
    /* Naming the device is enough: the manifest of weft-ref.so provides backend:ref, and
     * the first tensor there loads it. */
    weft_device ref;
    if (weft_device_parse("ref", &ref) < 0) {
        fprintf(stderr, "FAIL: cannot load ref: %s\n", weft_error_message());
        return 1;
    }
    weft_scope_push();
    const float av[] = {1, 2, 3, 4, 5, 6}, bv[] = {1, 0, 0, 1, 1, 1};
    weft_tensor *a = weft_from_host(av, 2, (int64_t[]){2, 3}, WEFT_F32, ref);
    weft_tensor *b = weft_from_host(bv, 2, (int64_t[]){3, 2}, WEFT_F32, ref);
    expect(a && b && a->device.type == ref.type, "tensors live on ref");

    expect_values(weft_add(a, a), (const float[]){2, 4, 6, 8, 10, 12}, 6, "add");
    expect_values(weft_mul_scalar(a, 0.5), (const float[]){.5, 1, 1.5, 2, 2.5, 3}, 6,
                  "mul by a scalar");
    expect_values(weft_matmul(a, b), (const float[]){4, 5, 10, 11}, 4, "matmul");
    /* A transposed (strided) operand and a broadcast row. */
    expect_values(weft_sub(weft_t(b), weft_from_host(av, 1, (int64_t[]){3}, WEFT_F32, ref)),
                  (const float[]){0, -2, -2, -1, -1, -2}, 6, "sub, transposed and broadcast");
    expect_values(weft_sum(a, 1, (int[]){1}, false), (const float[]){6, 15}, 2, "sum over dim 1");
    expect_values(weft_relu(weft_neg(a)), (const float[]){0, 0, 0, 0, 0, 0}, 6, "neg, relu");
    weft_tensor *d = weft_to_dtype(a, WEFT_F64);
    expect(d && d->dtype == WEFT_F64 && d->device.type == ref.type, "to float64 stays on ref");
    expect_values(weft_to_device(weft_to_dtype(d, WEFT_F32), WEFT_CPU), av, 6, "back to the cpu");

    /* An op the template has no kernel for fails, naming op and device. */
    weft_error_clear();
    weft_tensor *s = weft_sin(a);
    const char *want = "no kernel for op 'sin' on device 'ref'";
    expect(!s && weft_error_code() == WEFT_ERR_NOT_IMPLEMENTED &&
               strstr(weft_error_message(), want) != NULL,
           "sin is not implemented on ref");
    if (!s)
        printf("sin on ref: %s\n", weft_error_message());
    weft_scope_pop();
    if (failures == 0)
        printf("use-ref: all checks passed\n");
    return failures ? 1 : 0;
}
