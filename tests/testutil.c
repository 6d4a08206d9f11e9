/* tests/testutil.c: helpers shared by the Criterion suites. */
#define _GNU_SOURCE /* nftw */
#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void tu_setup(void)
{
    weft_error_clear();
    if (!weft_backend_get(WEFT_DEVICE_CPU))
        cr_assert_fail("cannot load the cpu backend: %s", weft_error_message());
}

void tu_teardown(void)
{
    int code = weft_error_code();
    const char *msg = weft_error_message();
    weft_error_clear();
    cr_expect_eq(code, WEFT_OK, "error left pending: %s", msg);
    cr_expect_eq(weft_scope_depth(), 0, "a scope was left open");
}

weft_device tu_cuda(int index)
{
    int type = weft_device_type_id("cuda", true);
    cr_assert_geq(type, 0);
    return (weft_device){(int16_t)type, (int16_t)index};
}

weft_tensor *tu_random_tensor(int ndim, const int64_t *shape, enum weft_dtype dt, double lo,
                              double hi, uint64_t *state, double *vals)
{
    int64_t n = weft_shape_numel(ndim, shape);
    cr_assert_geq(n, 0, "tu_random_tensor: %s", weft_error_message());
    double *v = vals ? vals : malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    tu_random_values(v, n, lo, hi, state);
    weft_tensor *t = tu_tensor(ndim, shape, v, dt);
    if (!vals)
        free(v);
    return t;
}

weft_tensor *tu_tensor(int ndim, const int64_t *shape, const double *values, enum weft_dtype dt)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    weft_tensor *d = weft_from_host(values, ndim, shape, WEFT_F64, WEFT_CPU);
    cr_assert_not_null(d, "weft_from_host: %s", weft_error_message());
    weft_tensor *t = weft_to_dtype(d, dt);
    cr_assert_not_null(t, "weft_to_dtype: %s", weft_error_message());
    if (weft_scope_depth() == 0)
        weft_tensor_release(d);
    (void)n;
    return t;
}

void tu_read(const weft_tensor *t, double *out)
{
    weft_tensor *d = weft_to((weft_tensor *)t, WEFT_CPU, WEFT_F64, false);
    cr_assert_not_null(d, "weft_to: %s", weft_error_message());
    int64_t n = weft_tensor_numel(d);
    cr_assert_eq(weft_tensor_read(d, out, (size_t)n * sizeof(double)), 0, "read: %s",
                 weft_error_message());
    if (weft_scope_depth() == 0)
        weft_tensor_release(d);
}

void tu_random_values(double *out, int64_t n, double lo, double hi, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(*state >> 11) * (1.0 / 9007199254740992.0);
        out[i] = lo + (hi - lo) * u;
    }
}

void tu_assert_shape(const weft_tensor *t, int ndim, const int64_t *shape)
{
    cr_assert_not_null(t, "tensor is NULL: %s", weft_error_message());
    cr_assert_eq(t->ndim, ndim, "ndim %d, expected %d", t->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(t->shape[i], shape[i], "shape[%d] = %lld, expected %lld", i,
                     (long long)t->shape[i], (long long)shape[i]);
}

void tu_assert_close(const weft_tensor *t, const double *expected, int64_t n, double rtol,
                     double atol)
{
    cr_assert_not_null(t, "tensor is NULL: %s", weft_error_message());
    cr_assert_eq(weft_tensor_numel(t), n, "numel %lld, expected %lld",
                 (long long)weft_tensor_numel(t), (long long)n);
    double *got = malloc((size_t)(n ? n : 1) * sizeof(double));
    cr_assert_not_null(got);
    tu_read(t, got);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(expected[i])) {
            cr_assert(isnan(got[i]), "element %lld: got %.17g, expected nan", (long long)i,
                      got[i]);
            continue;
        }
        if (isinf(expected[i])) {
            cr_assert(got[i] == expected[i], "element %lld: got %.17g, expected %g",
                      (long long)i, got[i], expected[i]);
            continue;
        }
        double tol = atol + rtol * fabs(expected[i]);
        cr_assert(fabs(got[i] - expected[i]) <= tol,
                  "element %lld: got %.17g, expected %.17g (tol %g)", (long long)i, got[i],
                  expected[i], tol);
    }
    free(got);
}

void tu_assert_no_error(void)
{
    cr_assert_eq(weft_error_code(), WEFT_OK, "unexpected error: %s", weft_error_message());
}

void tu_assert_error(int code, const char *substring)
{
    int got = weft_error_code();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_error_message());
    weft_error_clear();
    cr_assert_eq(got, code, "error code %d (%s), expected %d; message: %s", got,
                 weft_status_name(got), code, msg);
    cr_assert(strstr(msg, substring) != NULL, "message \"%s\" lacks \"%s\"", msg, substring);
}

/* ---- the temporary directory ------------------------------------------------------------ */

static char tmpdir[256];
static struct weft_config *tmp_config; /* tu_config's last */

const char *tu_tmpdir_create(const char *tag)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/weft-test-%s-XXXXXX", tag);
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp %s failed", tmpdir);
    return tmpdir;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    chmod(path, 0700); /* a test may have made it read-only */
    return remove(path);
}

void tu_tmpdir_remove(void)
{
    weft_config_free(tmp_config);
    tmp_config = NULL;
    if (tmpdir[0])
        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    tmpdir[0] = 0;
}

const char *tu_tmp_path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *p = bufs[next++ % 8];
    snprintf(p, sizeof bufs[0], "%s/%s", tmpdir, name);
    return p;
}

void tu_write_bytes(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(tu_tmp_path(name), "wb");
    cr_assert_not_null(f, "cannot write %s", name);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

void tu_write_text(const char *name, const char *text)
{
    tu_write_bytes(name, text, strlen(text));
}

struct weft_config *tu_config(const char *ini)
{
    weft_config_free(tmp_config);
    tmp_config = weft_config_parse(ini, tu_tmp_path("test.ini"));
    cr_assert_not_null(tmp_config, "config: %s", weft_error_message());
    return tmp_config;
}

weft_dataset *tu_open_ok(const char *ini)
{
    weft_dataset *ds = weft_dataset_open(weft_config_options(tu_config(ini), "data"));
    cr_assert_not_null(ds, "open failed: %s", weft_error_message());
    return ds;
}

void tu_open_fails(const char *ini, int code, const char *text)
{
    weft_dataset *ds = weft_dataset_open(weft_config_options(tu_config(ini), "data"));
    if (ds)
        weft_dataset_close(ds);
    cr_assert_null(ds, "open succeeded; expected an error containing \"%s\"", text);
    tu_assert_error(code, text);
}
