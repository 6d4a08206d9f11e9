/* tests/test_op_table.c: every row of the op table (weft/op_table.h) is what it says.
 *
 * The cases come from the rows themselves, so a new row is tested with no edit here:
 * each differentiable elementwise op passes gradcheck in float64 on its DOMAIN and names
 * its node as its GRAD_FN column; each id carries its row's name; each row's autocast
 * policy is the one weft_autocast_policy() answers; and the conformance suite drives
 * every elementwise row on the cpu and passes it. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include <weft.h>
#include <weft/kernel.h>
#include <weft/testkit.h>

#include "testutil.h"

enum domain { DOMAIN_NONE, DOMAIN_ANY, DOMAIN_POSITIVE };

struct elementwise_row {
    const char *name;
    const char *grad_fn;
    enum domain domain;
    weft_tensor *(*unary)(weft_tensor *);
    weft_tensor *(*binary)(weft_tensor *, weft_tensor *);
};

static const struct elementwise_row rows[] = {
#define UNARY_ROW(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)          \
    {#name, GRAD_FN, DOMAIN_##DOMAIN, weft_##name, NULL},
    WEFT_OPS_UNARY(UNARY_ROW)
#undef UNARY_ROW
#define BINARY_ROW(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)         \
    {#name, GRAD_FN, DOMAIN_##DOMAIN, NULL, weft_##name},
    WEFT_OPS_BINARY(BINARY_ROW)
#undef BINARY_ROW
};
#define NROWS (sizeof rows / sizeof *rows)

/* [3, 4] float64 values in the row's domain, away from 0 by at least 0.1 and from the
 * integers by at least 0.05 (abs, sign, relu and the rounding ops have kinks there). */
static weft_tensor *leaf(enum domain domain, uint64_t seed)
{
    double v[12];
    uint64_t s = seed;
    for (int i = 0; i < 12; i++) {
        double u;
        do {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u = (double)(s >> 11) / 9007199254740992.0;
            u = domain == DOMAIN_POSITIVE ? 0.25 + 1.75 * u : 4 * u - 2;
        } while (fabs(u) < 0.1 || fabs(u - nearbyint(u)) < 0.05);
        v[i] = u;
    }
    int64_t shape[2] = {3, 4};
    weft_tensor *t = weft_from_host(v, 2, shape, WEFT_F64, WEFT_CPU);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_eq(weft_requires_grad_(t, true), 0);
    return t;
}

static weft_tensor *call_row(void *ctx, weft_tensor *const *in)
{
    const struct elementwise_row *r = ctx;
    return r->unary ? r->unary(in[0]) : r->binary(in[0], in[1]);
}

Test(op_table, every_differentiable_elementwise_row_passes_gradcheck_on_its_domain)
{
    int checked = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const struct elementwise_row *r = &rows[i];
        if (!r->grad_fn)
            continue;
        weft_scope_push();
        weft_tensor *in[2] = {leaf(r->domain, 7 + i), leaf(r->domain, 1000 + i)};
        int rc = weft_gradcheck(call_row, (void *)r, r->unary ? 1 : 2, in, 1e-6, 1e-5, 1e-3);
        cr_expect_eq(rc, 0, "%s: %s", r->name, weft_error_message());
        weft_error_clear();
        weft_scope_pop();
        checked++;
    }
    cr_assert_gt(checked, 25);
}

Test(op_table, every_differentiable_elementwise_row_names_its_node_as_its_grad_fn)
{
    for (size_t i = 0; i < NROWS; i++) {
        const struct elementwise_row *r = &rows[i];
        weft_scope_push();
        weft_tensor *x = leaf(r->domain, 3), *y = leaf(r->domain, 4);
        weft_tensor *out = call_row((void *)r, (weft_tensor *[]){x, y});
        cr_assert_not_null(out, "%s: %s", r->name, weft_error_message());
        const char *got = weft_grad_fn_name(out);
        if (r->grad_fn)
            cr_expect(got && strcmp(got, r->grad_fn) == 0, "%s: grad_fn %s, row says %s",
                      r->name, got ? got : "none", r->grad_fn);
        else
            cr_expect_null(got, "%s: not differentiable, but recorded %s", r->name, got);
        weft_scope_pop();
    }
}

Test(op_table, every_id_carries_its_rows_name)
{
    static const struct {
        int id;
        const char *name;
    } ids[] = {
#define ID_ROW(ID, name, ...) {WEFT_OP_##ID, #name},
        WEFT_OP_TABLE(ID_ROW)
#undef ID_ROW
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        cr_expect_str_eq(weft_op_name(ids[i].id), ids[i].name);
        cr_expect_eq(weft_op_lookup(ids[i].name), ids[i].id, "%s", ids[i].name);
    }
    cr_expect_eq(weft_op_count() >= WEFT_OP_FIRST_NAMED, true);
}

Test(op_table, every_rows_autocast_policy_is_the_one_autocast_answers)
{
    static const struct {
        const char *name;
        enum weft_autocast_policy policy;
    } policies[] = {
#define POLICY_ROW(ID, name, DTYPES, AUTOCAST, ...) {#name, WEFT_AUTOCAST_##AUTOCAST},
        WEFT_OP_TABLE(POLICY_ROW) WEFT_OPS_COMPOSITE(POLICY_ROW)
#undef POLICY_ROW
    };
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
        cr_expect_eq(weft_autocast_policy(policies[i].name), policies[i].policy, "%s",
                     policies[i].name);
    cr_expect_eq(weft_autocast_policy("exp"), WEFT_AUTOCAST_FP32);
    cr_expect_eq(weft_autocast_policy("matmul"), WEFT_AUTOCAST_LOWER);
    cr_expect_eq(weft_autocast_policy("add"), WEFT_AUTOCAST_PROMOTE);
}

Test(op_table, the_conformance_suite_drives_every_elementwise_row_on_the_cpu)
{
    static const int ids[] = {
#define ELEMENTWISE_ID(ID, ...) WEFT_OP_##ID,
        WEFT_OPS_UNARY(ELEMENTWISE_ID) WEFT_OPS_BINARY(ELEMENTWISE_ID)
#undef ELEMENTWISE_ID
    };
    struct weft_conformance_report rep;
    cr_assert_geq(weft_conformance_run(WEFT_DEVICE_CPU, NULL, &rep), 0, "%s",
                  weft_error_message());
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        const struct weft_conformance_result *r = weft_conformance_find(&rep, ids[i], WEFT_F32);
        cr_expect_not_null(r, "%s: no float32 result", weft_op_name(ids[i]));
        if (r)
            cr_expect_eq(r->status, WEFT_CONFORMANCE_PASSED, "%s: %s", weft_op_name(ids[i]),
                         r->message);
    }
    weft_conformance_report_free(&rep);
}
