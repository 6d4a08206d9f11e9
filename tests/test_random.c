/* tests/test_random.c: the Philox generator, the process stream and the random ops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/backend.h>
#include <weft/philox.h>

#include "testutil.h"

TestSuite(random, .init = tu_setup, .fini = tu_teardown);

/* Philox4x32-10 over a full 4-word counter, as Random123 defines it (weft's version fixes
 * counter words 2 and 3 at zero). Used to check the second known answer. */
static void philox_full(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

Test(random, philox_matches_the_random123_known_answers)
{
    uint32_t w[4];
    weft_philox4x32(0, 0, w);
    cr_assert_eq(w[0], 0x6627e8d5u);
    cr_assert_eq(w[1], 0xe169c58du);
    cr_assert_eq(w[2], 0xbc57ac4cu);
    cr_assert_eq(w[3], 0x9b00dbd8u);

    uint32_t ones[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, f[4];
    philox_full(ones, ones, f);
    cr_assert_eq(f[0], 0x408f276du);
    cr_assert_eq(f[1], 0x41c83b0eu);
    cr_assert_eq(f[2], 0xa20bc7c6u);
    cr_assert_eq(f[3], 0x6d5451fdu);

    /* ... and the full-counter reference agrees with weft's for counters it can take. */
    uint64_t blocks[] = {0, 1, 0xdeadbeefcafef00dull, UINT64_MAX};
    uint64_t seeds[] = {0, 67280421310721ull, UINT64_MAX};
    for (size_t b = 0; b < 4; b++)
        for (size_t s = 0; s < 3; s++) {
            uint32_t ctr[4] = {(uint32_t)blocks[b], (uint32_t)(blocks[b] >> 32), 0, 0};
            uint32_t key[2] = {(uint32_t)seeds[s], (uint32_t)(seeds[s] >> 32)}, r[4];
            philox_full(ctr, key, r);
            weft_philox4x32(blocks[b], seeds[s], w);
            cr_assert_arr_eq(w, r, sizeof w);
        }
}

Test(random, the_default_seed_is_pytorchs)
{
    cr_assert_eq(weft_random_seed(), 67280421310721ull);
    cr_assert_eq(weft_random_offset(), 0);
}

Test(random, manual_seed_sets_the_seed_and_resets_the_offset)
{
    weft_random_set_offset(77);
    cr_assert_eq(weft_random_offset(), 77);
    weft_manual_seed(5);
    cr_assert_eq(weft_random_seed(), 5);
    cr_assert_eq(weft_random_offset(), 0);
}

Test(random, each_op_advances_the_offset_by_the_philox_blocks_it_used)
{
    weft_scope_push();
    weft_manual_seed(1);
    int64_t n10[] = {10}, n0[] = {0}, n8[] = {2, 4};
    weft_rand(1, n10, WEFT_F32, WEFT_CPU); /* ceil(10 / 4) */
    cr_assert_eq(weft_random_offset(), 3);
    weft_randn(2, n8, WEFT_F64, WEFT_CPU); /* 8 / 4 */
    cr_assert_eq(weft_random_offset(), 5);
    weft_randint(0, 10, 1, n10, WEFT_I64, WEFT_CPU); /* 10 / 2 */
    cr_assert_eq(weft_random_offset(), 10);
    weft_rand(1, n0, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_random_offset(), 10);
    weft_rand(0, NULL, WEFT_F32, WEFT_CPU); /* one element, one block */
    cr_assert_eq(weft_random_offset(), 11);
    weft_scope_pop();
}

static void read_values(const weft_tensor *t, double *out)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    tu_read(t, out);
}

Test(random, the_same_seed_and_offset_give_the_same_values)
{
    weft_scope_push();
    int64_t shape[] = {3, 7};
    double a[21], b[21], c[21];
    weft_manual_seed(123);
    read_values(weft_randn(2, shape, WEFT_F32, WEFT_CPU), a);
    read_values(weft_randn(2, shape, WEFT_F32, WEFT_CPU), c);
    weft_manual_seed(123);
    read_values(weft_randn(2, shape, WEFT_F32, WEFT_CPU), b);
    cr_assert_arr_eq(a, b, sizeof a);
    cr_assert(memcmp(a, c, sizeof a) != 0, "the second draw must differ");
    weft_random_set_offset(6); /* 21 values used ceil(21/4) = 6 blocks */
    read_values(weft_randn(2, shape, WEFT_F32, WEFT_CPU), b);
    cr_assert_arr_eq(c, b, sizeof c);
    weft_scope_pop();
}

Test(random, values_follow_the_philox_element_mapping_exactly)
{
    weft_scope_push();
    const uint64_t seed = 0x1234567890ull;
    int64_t shape[] = {1001};
    float f32[1001];
    double f64[1001], nrm[1001];
    int64_t ints[1001];
    weft_manual_seed(seed);
    weft_random_set_offset(40);
    cr_assert_eq(weft_tensor_read(weft_rand(1, shape, WEFT_F32, WEFT_CPU), f32, sizeof f32), 0);
    cr_assert_eq(weft_tensor_read(weft_rand(1, shape, WEFT_F64, WEFT_CPU), f64, sizeof f64), 0);
    cr_assert_eq(weft_tensor_read(weft_randn(1, shape, WEFT_F64, WEFT_CPU), nrm, sizeof nrm), 0);
    cr_assert_eq(weft_tensor_read(weft_randint(-5, 1000000007, 1, shape, WEFT_I64, WEFT_CPU), ints,
                                  sizeof ints), 0);
    uint64_t off = 40, blocks = 251; /* ceil(1001 / 4) */
    for (uint64_t i = 0; i < 1001; i++) {
        cr_assert_eq(f32[i], weft_philox_uniform_f32(seed, off, i), "f32 element %llu",
                     (unsigned long long)i);
        cr_assert_eq(f64[i], weft_philox_uniform_f64(seed, off + blocks, i));
        cr_assert_eq(nrm[i], weft_philox_normal(seed, off + 2 * blocks, i), "normal element %llu",
                     (unsigned long long)i);
        cr_assert_eq(ints[i], -5 + (int64_t)(weft_philox_u64(seed, off + 3 * blocks, i) % 1000000012ull));
    }
    weft_scope_pop();
}

Test(random, a_strided_tensor_is_filled_in_row_major_order)
{
    weft_scope_push();
    int64_t shape[] = {5, 3}, tshape[] = {3, 5};
    weft_manual_seed(9);
    weft_tensor *base = weft_empty(2, tshape, WEFT_F32, WEFT_CPU);
    weft_tensor *view = weft_t(base); /* [5, 3], strides (1, 5) */
    cr_assert_eq(weft_uniform_(view, 0, 1), 0);
    double got[15];
    tu_read(view, got);
    for (uint64_t i = 0; i < 15; i++)
        cr_assert_eq(got[i], (double)weft_philox_uniform_f32(9, 0, i), "element %llu",
                     (unsigned long long)i);
    weft_manual_seed(9);
    double want[15];
    tu_read(weft_rand(2, shape, WEFT_F32, WEFT_CPU), want);
    cr_assert_arr_eq(got, want, sizeof got);
    weft_scope_pop();
}

static void moments(const double *v, int64_t n, double *mean, double *var)
{
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    *mean = s / n;
    for (int64_t i = 0; i < n; i++)
        ss += (v[i] - *mean) * (v[i] - *mean);
    *var = ss / (n - 1);
}

/* Bounds are about six standard errors; the seed is fixed, so these never flake. */
Test(random, uniform_and_normal_samples_have_the_right_moments)
{
    weft_scope_push();
    enum { N = 100000 };
    int64_t shape[] = {N};
    double *v = malloc(N * sizeof *v), mean, var;
    weft_manual_seed(2024);
    read_values(weft_rand(1, shape, WEFT_F32, WEFT_CPU), v);
    moments(v, N, &mean, &var);
    cr_assert(fabs(mean - 0.5) < 0.006, "uniform mean %g", mean);
    cr_assert(fabs(var - 1.0 / 12) < 0.0015, "uniform variance %g", var);
    for (int i = 0; i < N; i++)
        cr_assert(v[i] >= 0 && v[i] < 1, "uniform value %g", v[i]);

    read_values(weft_randn(1, shape, WEFT_F64, WEFT_CPU), v);
    moments(v, N, &mean, &var);
    cr_assert(fabs(mean) < 0.02, "normal mean %g", mean);
    cr_assert(fabs(var - 1) < 0.027, "normal variance %g", var);

    weft_tensor *t = weft_empty(1, shape, WEFT_F64, WEFT_CPU);
    cr_assert_eq(weft_normal_(t, 3, 0.5), 0);
    read_values(t, v);
    moments(v, N, &mean, &var);
    cr_assert(fabs(mean - 3) < 0.01, "normal_ mean %g", mean);
    cr_assert(fabs(var - 0.25) < 0.007, "normal_ variance %g", var);

    cr_assert_eq(weft_uniform_(t, -2, 6), 0);
    read_values(t, v);
    moments(v, N, &mean, &var);
    cr_assert(fabs(mean - 2) < 0.05, "uniform_ mean %g", mean);
    for (int i = 0; i < N; i++)
        cr_assert(v[i] >= -2 && v[i] < 6, "uniform_ value %g", v[i]);
    free(v);
    weft_scope_pop();
}

Test(random, sixteen_bit_floats_stay_in_the_half_open_range)
{
    weft_scope_push();
    int64_t shape[] = {20000};
    double *v = malloc(20000 * sizeof *v);
    for (int dt = WEFT_F16; dt <= WEFT_BF16; dt++) {
        read_values(weft_rand(1, shape, (enum weft_dtype)dt, WEFT_CPU), v);
        for (int i = 0; i < 20000; i++)
            cr_assert(v[i] >= 0 && v[i] < 1, "%s value %g", weft_dtype_name(dt), v[i]);
    }
    free(v);
    weft_scope_pop();
}

Test(random, randint_stays_in_range_and_hits_every_value)
{
    weft_scope_push();
    int64_t shape[] = {4000};
    double *v = malloc(4000 * sizeof *v);
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
        int64_t lo = dt == WEFT_BOOL ? 0 : dt == WEFT_U8 ? 250 : -3, hi = dt == WEFT_BOOL ? 2 : lo + 6;
        weft_tensor *t = weft_randint(lo, hi, 1, shape, (enum weft_dtype)dt, WEFT_CPU);
        cr_assert_not_null(t, "%s: %s", weft_dtype_name(dt), weft_error_message());
        cr_assert_eq(t->dtype, dt);
        read_values(t, v);
        int seen[6] = {0};
        for (int i = 0; i < 4000; i++) {
            cr_assert(v[i] >= lo && v[i] < hi && v[i] == floor(v[i]), "%s value %g",
                      weft_dtype_name(dt), v[i]);
            seen[(int)(v[i] - lo)] = 1;
        }
        for (int k = 0; k < hi - lo; k++)
            cr_assert(seen[k], "%s never drew %lld", weft_dtype_name(dt), (long long)(lo + k));
    }
    free(v);
    weft_scope_pop();
}

Test(random, values_do_not_depend_on_the_thread_count)
{
    weft_scope_push();
    int64_t shape[] = {3, 70001}; /* far past the parallel grain */
    int64_t n = 3 * 70001;
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I64};
    for (int k = 0; k < 3; k++) {
        for (int threads = 1; threads <= 2; threads++) {
            cr_assert_eq(weft_set_num_threads(threads), 0, "%s", weft_error_message());
            weft_manual_seed(77);
            weft_tensor *t = k == 2 ? weft_randint(-1000, 1000, 2, shape, WEFT_I64, WEFT_CPU)
                             : k == 1 ? weft_randn(2, shape, dts[k], WEFT_CPU)
                                      : weft_rand(2, shape, dts[k], WEFT_CPU);
            read_values(t, threads == 1 ? a : b);
        }
        cr_assert(memcmp(a, b, (size_t)n * sizeof *a) == 0, "%s differs between 1 and 2 threads",
                  weft_dtype_name(dts[k]));
    }
    free(a);
    free(b);
    weft_scope_pop();
}

Test(random, in_place_fills_bump_the_version)
{
    weft_scope_push();
    int64_t shape[] = {4};
    weft_tensor *t = weft_zeros(1, shape, WEFT_F32, WEFT_CPU);
    uint64_t v = weft_tensor_version(t);
    cr_assert_eq(weft_uniform_(t, 0, 1), 0);
    cr_assert_eq(weft_normal_(t, 0, 1), 0);
    cr_assert_eq(weft_tensor_version(t), v + 2);
    weft_scope_pop();
}

Test(random, results_outside_a_scope_have_one_reference)
{
    int64_t shape[] = {8};
    weft_tensor *t[] = {weft_rand(1, shape, WEFT_F32, WEFT_CPU), weft_randn(1, shape, WEFT_F32, WEFT_CPU),
                        weft_randint(0, 3, 1, shape, WEFT_I32, WEFT_CPU)};
    for (int i = 0; i < 3; i++) {
        cr_assert_not_null(t[i], "%s", weft_error_message());
        cr_assert_eq(t[i]->refcount, 1);
        weft_tensor_release(t[i]);
    }
}

Test(random, integer_dtypes_are_refused_for_rand_and_randn)
{
    int64_t shape[] = {4};
    cr_assert_null(weft_randn(1, shape, WEFT_I64, WEFT_CPU));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"normal_kernel_cpu\" not implemented for 'Long'");
    cr_assert_null(weft_rand(1, shape, WEFT_I32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"check_uniform_bounds\" not implemented for 'Int'");
    weft_tensor *t = weft_zeros(1, shape, WEFT_BOOL, WEFT_CPU);
    cr_assert_lt(weft_normal_(t, 0, 1), 0);
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"normal_kernel_cpu\" not implemented for 'Bool'");
    weft_tensor_release(t);
    cr_assert_eq(weft_random_offset(), 0, "a refused op must not use the stream");
}

Test(random, randint_needs_low_below_high_within_the_dtype)
{
    int64_t shape[] = {4};
    cr_assert_null(weft_randint(5, 5, 1, shape, WEFT_I64, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "random_ expects 'from' to be less than 'to', but got from=5 >= to=5");
    cr_assert_null(weft_randint(0, 300, 1, shape, WEFT_U8, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "to - 1 is out of bounds for uint8");
    cr_assert_null(weft_randint(-1, 3, 1, shape, WEFT_U8, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "from is out of bounds for uint8");
}

Test(random, bad_distribution_parameters_are_refused)
{
    int64_t shape[] = {4};
    weft_tensor *t = weft_zeros(1, shape, WEFT_F32, WEFT_CPU);
    cr_assert_lt(weft_normal_(t, 0, -1), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "normal expects std >= 0.0, but found std -1");
    cr_assert_lt(weft_uniform_(t, 1, 0), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "uniform_ expects to return a [from, to) range, but found from=1 > to=0");
    cr_assert_lt(weft_uniform_(NULL, 0, 1), 0);
    tu_assert_no_error();
    weft_tensor_release(t);
}
