/* tests/dist_values.h: the two ranks' values of the collective tests (test_dist.c over
 * MPI, test_dist_nccl.c over NCCL) and what each reduction of them must give. */
#ifndef WEFT_TESTS_DIST_VALUES_H
#define WEFT_TESTS_DIST_VALUES_H

#include <math.h>

#include <weft/dist.h>

/* Rank r's value i for dtype dt: small enough that every sum, mean, max and min is exact
 * in every dtype (and negative only where the dtype has sign). */
static double value(int r, int i, enum weft_dtype dt)
{
    if (dt == WEFT_BOOL)
        return (i + r) % 3 == 0;
    if (dt == WEFT_U8)
        return i * 3 + r * 5;
    if (weft_dtype_is_floating(dt))
        return (i - 3) * 0.5 + r * 1.25 - (i == 5 ? 3 * r : 0);
    return (i - 3) * 2 + r * 7 - (i == 5 ? 11 * r : 0);
}

/* Element i of op over ranks 0 and 1. */
static double expected(int i, enum weft_dtype dt, weft_reduce_op op)
{
    double a = value(0, i, dt), b = value(1, i, dt);
    if (dt == WEFT_BOOL)
        return op == WEFT_REDUCE_MIN ? (a && b) : (a || b);
    switch (op) {
    case WEFT_REDUCE_SUM: return a + b;
    case WEFT_REDUCE_AVG: return (a + b) / 2;
    case WEFT_REDUCE_MAX: return fmax(a, b);
    default: return fmin(a, b);
    }
}

#endif
