/* ops/random.c: the process-wide Philox stream (seed + offset) and the random front ends
 * (rand, randn, randint, uniform_, normal_), which fill their output from blocks reserved
 * on it; checks and error texts as PyTorch's. A random op reserves a run of Philox blocks
 * by advancing the offset atomically, then fills its output from those blocks with the
 * element mapping of weft/philox.h, so values depend only on (seed, offset, element
 * index): not on threads, strides or device. */
#include <math.h>

#include "internal.h"

/* PyTorch's default_rng_seed_val. */
#define DEFAULT_SEED 67280421310721ull

static uint64_t rng_seed = DEFAULT_SEED;
static uint64_t rng_offset;

void weft_manual_seed(uint64_t seed)
{
    __atomic_store_n(&rng_seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&rng_offset, 0, __ATOMIC_RELAXED);
}

uint64_t weft_random_seed(void)
{
    return __atomic_load_n(&rng_seed, __ATOMIC_RELAXED);
}

uint64_t weft_random_offset(void)
{
    return __atomic_load_n(&rng_offset, __ATOMIC_RELAXED);
}

void weft_random_set_offset(uint64_t offset)
{
    __atomic_store_n(&rng_offset, offset, __ATOMIC_RELAXED);
}

uint64_t weft_random_reserve(uint64_t blocks)
{
    return __atomic_fetch_add(&rng_offset, blocks, __ATOMIC_RELAXED);
}

/* Philox blocks a random op over numel elements consumes, which is how far it moves the
 * offset: each block gives four 32-bit words, one per uniform or normal value and two
 * per randint value (a 64-bit draw). So ceil(numel / 4), or ceil(numel / 2) for randint.
 * Every backend advances by the same amount, so their streams stay aligned. */
static uint64_t philox_blocks(int op, int64_t numel)
{
    uint64_t per_block = op == WEFT_OP_RANDINT ? 2 : 4;
    return ((uint64_t)numel + per_block - 1) / per_block;
}

/* Fills t in place with `call` (op, scalars, ints[2..] set by the caller) from freshly
 * reserved blocks. */
static int random_fill(weft_tensor *t, struct weft_op_call call)
{
    uint64_t blocks = philox_blocks(call.op, weft_tensor_numel(t));
    call.nout = 1;
    call.out[0] = t;
    call.ints[0] = (int64_t)weft_random_seed();
    call.ints[1] = (int64_t)weft_random_reserve(blocks);
    int rc = weft_dispatch(&call);
    if (rc != 0)
        return rc;
    weft_tensor_bump_version(t);
    return 0;
}

static int check_floating(enum weft_dtype dt, const char *kernel)
{
    if (weft_dtype_is_floating(dt))
        return 0;
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'", kernel,
                          weft_dtype_torch_name(dt));
}

int weft_uniform_(weft_tensor *t, double low, double high)
{
    if (!t)
        return WEFT_ERR_VALUE;
    if (check_floating(t->dtype, "check_uniform_bounds") < 0)
        return WEFT_ERR_NOT_IMPLEMENTED;
    if (!(low <= high))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "uniform_ expects to return a [from, to) range, but found from=%g > to=%g",
                              low, high);
    return random_fill(t, (struct weft_op_call){.op = WEFT_OP_RAND_UNIFORM, .scalar = {low, high}});
}

int weft_normal_(weft_tensor *t, double mean, double std)
{
    if (!t)
        return WEFT_ERR_VALUE;
    if (check_floating(t->dtype, "normal_kernel_cpu") < 0)
        return WEFT_ERR_NOT_IMPLEMENTED;
    if (!(std >= 0))
        return weft_error_set(WEFT_ERR_RUNTIME, "normal expects std >= 0.0, but found std %g", std);
    return random_fill(t, (struct weft_op_call){.op = WEFT_OP_RAND_NORMAL, .scalar = {mean, std}});
}

/* weft_empty then an in-place fill; the empty tensor is already finished. */
static weft_tensor *fresh(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev,
                          int (*fill)(weft_tensor *, double, double), double p0, double p1)
{
    weft_tensor *t = weft_empty(ndim, shape, dtype, dev);
    if (!t)
        return NULL;
    if (fill(t, p0, p1) != 0) {
        if (weft_scope_depth() == 0)
            weft_tensor_release(t);
        return NULL;
    }
    return t;
}

weft_tensor *weft_rand(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev)
{
    if (check_floating(dtype, "check_uniform_bounds") < 0)
        return NULL;
    return fresh(ndim, shape, dtype, dev, weft_uniform_, 0.0, 1.0);
}

weft_tensor *weft_randn(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev)
{
    if (check_floating(dtype, "normal_kernel_cpu") < 0)
        return NULL;
    return fresh(ndim, shape, dtype, dev, weft_normal_, 0.0, 1.0);
}

/* The largest magnitude a dtype holds, for randint's bounds check (integers exactly). */
static void dtype_bounds(enum weft_dtype dt, double *lo, double *hi)
{
    switch (dt) {
    case WEFT_BOOL: *lo = 0; *hi = 1; return;
    case WEFT_U8: *lo = 0; *hi = 255; return;
    case WEFT_I8: *lo = -128; *hi = 127; return;
    case WEFT_I16: *lo = -32768; *hi = 32767; return;
    case WEFT_I32: *lo = -2147483648.0; *hi = 2147483647.0; return;
    case WEFT_F16: *lo = -65504; *hi = 65504; return;
    default: *lo = -INFINITY; *hi = INFINITY; return; /* int64 and wider floats hold any int64 */
    }
}

static int check_randint_range(int64_t low, int64_t high, enum weft_dtype dt)
{
    if (low >= high)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                              (long long)low, (long long)high);
    double min, max;
    dtype_bounds(dt, &min, &max);
    if ((double)low < min || (double)low > max)
        return weft_error_set(WEFT_ERR_RUNTIME, "from is out of bounds for %s", weft_dtype_meta_name(dt));
    if ((double)(high - 1) < min || (double)(high - 1) > max)
        return weft_error_set(WEFT_ERR_RUNTIME, "to - 1 is out of bounds for %s",
                              weft_dtype_meta_name(dt));
    return 0;
}

weft_tensor *weft_randint(int64_t low, int64_t high, int ndim, const int64_t *shape,
                          enum weft_dtype dtype, weft_device dev)
{
    if (!weft_dtype_valid(dtype)) {
        weft_error_set(WEFT_ERR_TYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (check_randint_range(low, high, dtype) < 0)
        return NULL;
    weft_tensor *t = weft_empty(ndim, shape, dtype, dev);
    if (!t)
        return NULL;
    struct weft_op_call call = {.op = WEFT_OP_RANDINT, .ints = {0, 0, low, high}};
    if (random_fill(t, call) != 0) {
        if (weft_scope_depth() == 0)
            weft_tensor_release(t);
        return NULL;
    }
    return t;
}
