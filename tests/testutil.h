/* tests/testutil.h: small helpers shared by the Criterion suites. */
#ifndef WEFT_TESTUTIL_H
#define WEFT_TESTUTIL_H

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdint.h>

#include <weft.h>
#include <weft/train.h>
#include <weft/testkit.h>
#include <weft/half.h>
#include <weft/kernel.h>
#include <weft/backend.h>
#include <weft/plugin.h>

/* Criterion .init for suites: clears the error state and loads the cpu backend. */
void tu_setup(void);
/* Cleanup: asserts no error is pending and no scope was left open. */
void tu_teardown(void);

/* cuda:index. The type has an id once named (no plugin is loaded for it here); devices
 * have no fixed type numbers. */
weft_device tu_cuda(int index);

/* A cpu tensor of dtype dt holding `values` (converted from double). */
weft_tensor *tu_tensor(int ndim, const int64_t *shape, const double *values, enum weft_dtype dt);
/* Reads any tensor (any dtype, strides, device) as doubles into out[numel]. */
void tu_read(const weft_tensor *t, double *out);
/* Random doubles in [lo, hi) from a local LCG (deterministic, no weft RNG). */
void tu_random_values(double *out, int64_t n, double lo, double hi, uint64_t *state);
/* A cpu tensor of dtype dt with tu_random_values in [lo, hi); the values drawn are also
 * copied to vals[numel] when vals is not NULL. */
weft_tensor *tu_random_tensor(int ndim, const int64_t *shape, enum weft_dtype dt, double lo,
                              double hi, uint64_t *state, double *vals);

/* Asserts the tensor's shape. */
void tu_assert_shape(const weft_tensor *t, int ndim, const int64_t *shape);
/* Asserts |t - expected| <= atol + rtol * |expected| elementwise (NaN matches NaN). */
void tu_assert_close(const weft_tensor *t, const double *expected, int64_t n, double rtol,
                     double atol);
/* Asserts no weft error is pending (prints it otherwise). */
void tu_assert_no_error(void);
/* Asserts the pending error has `code` and its message contains `substring`, then
 * clears it. */
void tu_assert_error(int code, const char *substring);

/* ---- a temporary directory per test, for suites that write files ---------------------- */
/* Makes /tmp/weft-test-<tag>-XXXXXX (asserting) and returns its path. */
const char *tu_tmpdir_create(const char *tag);
/* Removes it with everything in it (nothing when there is none). */
void tu_tmpdir_remove(void);
/* <dir>/name; eight results stay valid at once. */
const char *tu_tmp_path(const char *name);
/* Criterion skips a test without running its suite's .fini: remove the directory first. */
#define TU_SKIP_TEST(...)                                                                    \
    do {                                                                                     \
        tu_tmpdir_remove();                                                                  \
        cr_skip_test(__VA_ARGS__);                                                           \
    } while (0)
/* Parses ini as if it were <dir>/test.ini, so relative paths resolve into the directory;
 * the config lives until the next call or tu_tmpdir_remove(). */
struct weft_config *tu_config(const char *ini);
/* Opens [data] of ini, which must succeed. */
weft_dataset *tu_open_ok(const char *ini);
/* Opens [data] of ini, which must fail with code and a message containing text. */
void tu_open_fails(const char *ini, int code, const char *text);
/* Writes <dir>/name (asserting). */
void tu_write_bytes(const char *name, const void *data, size_t n);
void tu_write_text(const char *name, const char *text);

/* For a suite whose every test needs a device this machine may lack (the cuda suites): a
 * main() that exits 77, meson's SKIP, when every test skipped and none failed, so that a
 * run without the device never reads as a pass. Expand once, in the suite's file. */
#define TU_MAIN_SKIPPED_WHEN_ALL_SKIP(suite_name)                                            \
    static int tu_total_, tu_skipped_, tu_failed_;                                           \
    ReportHook(POST_ALL)(struct criterion_global_stats *stats)                               \
    {                                                                                        \
        tu_failed_ = stats->tests_failed > 0 || stats->tests_crashed > 0;                    \
        for (struct criterion_suite_stats *s = stats->suites; s; s = s->next)                \
            for (struct criterion_test_stats *t = s->tests; t; t = t->next) {                \
                tu_total_++;                                                                 \
                tu_skipped_ += t->test_status == CR_STATUS_SKIPPED;                          \
            }                                                                                \
    }                                                                                        \
    int main(int argc, char *argv[])                                                         \
    {                                                                                        \
        struct criterion_test_set *tests = criterion_initialize();                          \
        int result = 0;                                                                      \
        if (criterion_handle_args(argc, argv, true))                                         \
            result = !criterion_run_all_tests(tests);                                        \
        criterion_finalize(tests);                                                           \
        bool all_skipped = tu_total_ > 0 && tu_skipped_ == tu_total_;                        \
        if (all_skipped)                                                                     \
            fprintf(stderr, "%s: every test skipped: the suite reports SKIP (exit 77)\n",   \
                    suite_name);                                                             \
        return result == 0 && !tu_failed_ && all_skipped ? 77 : result;                      \
    }

#endif
