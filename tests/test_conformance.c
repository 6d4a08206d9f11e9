/* tests/test_conformance.c: the conformance suite itself.
 *
 * On the cpu every op must agree with the double reference; on cuda (when a device is
 * usable) with the cpu; both at the small and the large size. A fake host-memory backend
 * with a wrong ADD kernel, one with an ADD kernel that writes past its output, and one
 * with a SUM kernel wrong only on long rows (caught at the large size alone), must all
 * be caught. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/conformance.h>

TestSuite(conformance, .init = tu_setup, .fini = tu_teardown);

static void expect_all_pass(int device_type)
{
    struct weft_conformance_report rep;
    int rc = weft_conformance_run(device_type, NULL, &rep);
    if (rc != 0)
        weft_conformance_print(&rep, stderr);
    cr_expect_eq(rc, 0, "%s", rc < 0 ? weft_error_message() : "failures above");
    cr_expect_gt(rep.passed, 100, "only %d op/dtype pairs passed", rep.passed);
    weft_conformance_report_free(&rep);
}

Test(conformance, every_cpu_kernel_agrees_with_the_double_reference)
{
    expect_all_pass(WEFT_DEVICE_CPU);
}

static void require_cuda(void)
{
    if (weft_plugin_load("cuda") < 0) {
        fprintf(stderr, "cuda conformance skipped: %s\n", weft_error_message());
        cr_log_info("cuda conformance skipped: %s", weft_error_message());
        weft_error_clear();
        cr_skip_test("cuda conformance skipped");
    }
}

Test(conformance, every_cuda_kernel_agrees_with_the_cpu_when_a_gpu_is_usable)
{
    require_cuda();
    expect_all_pass(tu_cuda(0).type);
}

/* The large size in full: the cpu against the double reference at the shapes that take a
 * GPU's warp, block and split paths (a few seconds; CI runs it). */
static void expect_all_pass_large(int device_type)
{
    struct weft_conformance_options o = {.size = WEFT_CONFORMANCE_LARGE};
    struct weft_conformance_report rep;
    int rc = weft_conformance_run(device_type, &o, &rep);
    if (rc != 0)
        weft_conformance_print(&rep, stderr);
    cr_expect_eq(rc, 0, "%s", rc < 0 ? weft_error_message() : "failures above");
    /* the large families have entries of their own, each with every case run */
    int large = 0;
    for (int i = 0; i < rep.count; i++) {
        const struct weft_conformance_result *r = &rep.results[i];
        if (r->op == WEFT_OP_MAX_POOL2D_BACKWARD || r->op == WEFT_OP_COL2IM ||
            (r->op == WEFT_OP_SUM && r->cases == 10) || r->op == WEFT_OP_SCATTER_ADD)
            large += r->status == WEFT_CONFORMANCE_PASSED;
    }
    cr_expect_geq(large, 6, "only %d large entries passed", large);
    weft_conformance_report_free(&rep);
}

Test(conformance, every_cpu_kernel_agrees_with_the_double_reference_at_the_large_size)
{
    expect_all_pass_large(WEFT_DEVICE_CPU);
}

Test(conformance, every_cuda_kernel_agrees_with_the_cpu_at_the_large_size_when_a_gpu_is_usable)
{
    require_cuda();
    expect_all_pass_large(tu_cuda(0).type);
}

Test(conformance, the_size_is_small_or_large)
{
    enum weft_conformance_size size = WEFT_CONFORMANCE_SMALL;
    cr_expect_eq(weft_conformance_size_parse("large", &size), 0);
    cr_expect_eq(size, WEFT_CONFORMANCE_LARGE);
    cr_expect_eq(weft_conformance_size_parse("small", &size), 0);
    cr_expect_eq(size, WEFT_CONFORMANCE_SMALL);
    cr_expect_lt(weft_conformance_size_parse("huge", &size), 0);
    tu_assert_error(WEFT_ERR_VALUE, "size must be 'small' or 'large', got 'huge'");
}

/* ---- a fake backend over host memory, running the cpu's kernels ------------------------ */

/* Extra bytes after every block, so the out-of-bounds kernel below corrupts nothing. */
#define FAKE_SLACK 64

static int fake_count(void *context) { return 1; }
static void *fake_alloc(void *context, int index, size_t nbytes)
{
    (void)index;
    void *p = calloc(1, nbytes + FAKE_SLACK);
    if (!p)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "fake: out of memory");
    return p;
}
static void fake_free(void *context, int index, void *ptr, size_t nbytes)
{
    (void)index, (void)nbytes;
    free(ptr);
}
static int fake_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    (void)non_blocking;
    memcpy(weft_tensor_data(dst), weft_tensor_data(src),
           (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src));
    return 0;
}

static const struct weft_backend fake_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "conftest", struct weft_backend),
    .device_count = fake_count,
    .alloc = fake_alloc,
    .free = fake_free,
    .copy = fake_copy,
};

static weft_kernel_fn cpu_add;

/* Adds, then gets the first element wrong. */
static int wrong_add(const struct weft_op_call *call)
{
    int rc = cpu_add(call);
    weft_tensor *out = call->out[0];
    if (rc == 0 && weft_tensor_numel(out) > 0 && out->dtype == WEFT_F32)
        *(float *)weft_tensor_data(out) += 1.0f;
    return rc;
}

/* Adds, then writes one element past the last one of out[0] in memory. */
static int overflowing_add(const struct weft_op_call *call)
{
    int rc = cpu_add(call);
    weft_tensor *out = call->out[0];
    if (rc == 0 && weft_tensor_numel(out) > 0 && out->dtype == WEFT_F32) {
        int64_t last = 0;
        for (int d = 0; d < out->ndim; d++)
            last += (out->shape[d] - 1) * out->stride[d];
        ((float *)weft_tensor_data(out))[last + 1] = 12345.0f;
    }
    return rc;
}

static weft_kernel_fn cpu_sum;

/* Sums, then gets element 0 wrong when the reduced length is over 1000: a kernel whose
 * block or split path is broken while the one-thread-per-output path is right. */
static int sum_wrong_when_long(const struct weft_op_call *call)
{
    int rc = cpu_sum(call);
    const weft_tensor *in = call->in[0];
    weft_tensor *out = call->out[0];
    if (rc == 0 && in->ndim > 0 && in->shape[in->ndim - 1] > 1000 && weft_tensor_numel(out) > 0)
        *(float *)weft_tensor_data(out) += 1.0f;
    return rc;
}

/* Registers the fake type with the cpu's kernels and add replaced by add_fn (f32 only). */
static int setup_fake(weft_kernel_fn add_fn)
{
    cr_assert_not_null(weft_backend_get(WEFT_DEVICE_CPU), "%s", weft_error_message());
    int type = weft_register(&fake_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    for (int op = 0; op < weft_op_count(); op++)
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
            weft_kernel_fn fn = weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, dt);
            if (fn)
                weft_kernel_register(op, type, WEFT_LAYOUT_STRIDED, WEFT_DTYPE_BIT(dt), fn);
        }
    cpu_add = weft_kernel_lookup(WEFT_OP_ADD, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32);
    cr_assert_not_null(cpu_add);
    weft_kernel_register(WEFT_OP_ADD, type, WEFT_LAYOUT_STRIDED, WEFT_DTYPE_BIT(WEFT_F32), add_fn);
    return type;
}

Test(conformance, a_wrong_kernel_on_another_backend_is_marked_failed_with_its_error)
{
    int type = setup_fake(wrong_add);
    struct weft_conformance_report rep;
    cr_assert_eq(weft_conformance_run(type, NULL, &rep), 1);
    const struct weft_conformance_result *r = weft_conformance_find(&rep, WEFT_OP_ADD, WEFT_F32);
    cr_assert_not_null(r);
    cr_expect_eq(r->status, WEFT_CONFORMANCE_FAILED);
    cr_expect_gt(r->max_error, 0.1, "max error %g", r->max_error);
    /* the cpu's own kernels on the fake device all pass, other dtypes of add included */
    cr_expect_eq(rep.failed, 1);
    r = weft_conformance_find(&rep, WEFT_OP_ADD, WEFT_F64);
    cr_assert_not_null(r);
    cr_expect_eq(r->status, WEFT_CONFORMANCE_PASSED);
    weft_conformance_report_free(&rep);
}

Test(conformance, a_reduction_wrong_only_on_long_rows_passes_small_and_fails_large)
{
    /* a device with copies and this sum only: the run lists nothing else, so it is quick */
    cr_assert_not_null(weft_backend_get(WEFT_DEVICE_CPU), "%s", weft_error_message());
    int type = weft_register(&fake_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    const int ops[] = {WEFT_OP_COPY, WEFT_OP_FILL};
    for (int i = 0; i < 2; i++)
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
            weft_kernel_fn fn =
                weft_kernel_lookup(ops[i], WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, dt);
            if (fn)
                weft_kernel_register(ops[i], type, WEFT_LAYOUT_STRIDED, WEFT_DTYPE_BIT(dt), fn);
        }
    cpu_sum = weft_kernel_lookup(WEFT_OP_SUM, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32);
    cr_assert_not_null(cpu_sum);
    weft_kernel_register(WEFT_OP_SUM, type, WEFT_LAYOUT_STRIDED, WEFT_DTYPE_BIT(WEFT_F32),
                         sum_wrong_when_long);
    struct weft_conformance_report rep;
    cr_expect_eq(weft_conformance_run(type, NULL, &rep), 0, "small shapes never reach it");
    weft_conformance_report_free(&rep);
    struct weft_conformance_options o = {.size = WEFT_CONFORMANCE_LARGE};
    cr_assert_eq(weft_conformance_run(type, &o, &rep), 1);
    cr_expect_eq(rep.failed, 1);
    const struct weft_conformance_result *r = NULL;
    for (int i = 0; i < rep.count; i++)
        if (rep.results[i].status == WEFT_CONFORMANCE_FAILED)
            r = &rep.results[i];
    cr_assert_not_null(r);
    cr_expect_eq(r->op, WEFT_OP_SUM);
    cr_expect_eq(r->dtype, WEFT_F32);
    /* the message names the case: the first with a row over 1000 */
    cr_expect(strstr(r->message, "[1, 1000000] over dim -1, contiguous: ") == r->message, "%s",
              r->message);
    weft_conformance_report_free(&rep);
}

Test(conformance, a_kernel_writing_past_its_output_is_caught_by_the_sentinels)
{
    int type = setup_fake(overflowing_add);
    struct weft_conformance_report rep;
    cr_assert_eq(weft_conformance_run(type, NULL, &rep), 1);
    const struct weft_conformance_result *r = weft_conformance_find(&rep, WEFT_OP_ADD, WEFT_F32);
    cr_assert_not_null(r);
    cr_expect_eq(r->status, WEFT_CONFORMANCE_FAILED);
    cr_expect_gt(r->sentinel_errors, 0);
    cr_expect(strstr(r->message, "sentinel") != NULL, "%s", r->message);
    weft_conformance_report_free(&rep);
}

Test(conformance, pairs_without_a_kernel_are_not_listed_and_ops_without_a_driver_are_skipped)
{
    struct weft_conformance_report rep;
    cr_assert_eq(weft_conformance_run(WEFT_DEVICE_CPU, NULL, &rep), 0);
    /* no cpu kernel for sub on bool: not listed, so not a failure */
    cr_assert_null(weft_kernel_lookup(WEFT_OP_SUB, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_BOOL));
    cr_expect_null(weft_conformance_find(&rep, WEFT_OP_SUB, WEFT_BOOL));
    /* im2col has kernels but no driver: one skipped line, under its lowest dtype */
    uint32_t mask = weft_kernel_dtypes(WEFT_OP_IM2COL, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED);
    cr_assert_neq(mask, 0u);
    const struct weft_conformance_result *r =
        weft_conformance_find(&rep, WEFT_OP_IM2COL, (enum weft_dtype)__builtin_ctz(mask));
    cr_assert_not_null(r);
    cr_expect_eq(r->status, WEFT_CONFORMANCE_SKIPPED);
    cr_expect_str_eq(r->message, "no driver for this op");
    cr_expect_eq(rep.passed + rep.failed + rep.skipped, rep.count);
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    cr_assert_not_null(f);
    weft_conformance_print(&rep, f);
    fclose(f);
    cr_expect(strstr(buf, "conformance on cpu: ") != NULL, "%s", buf);
    weft_conformance_report_free(&rep);
}
