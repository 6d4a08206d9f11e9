/* plugins/cpu/kernels_random.c: RAND_UNIFORM, RAND_NORMAL and RANDINT.
 *
 * Element i (row-major over out[0]'s shape, whatever its strides) takes its value from
 * Philox block ints[1] + i/4 (i/2 for randint) under key ints[0], exactly as weft/philox.h
 * maps it. Values therefore depend on neither the thread count nor the device: the CUDA
 * plugin reproduces them bit for bit for uniform and randint. The arithmetic after the
 * draw, which another backend must repeat in the same order and precision, is:
 *   uniform: v = u * (high - low) + low in double (no fused multiply-add), rounded to the
 *            dtype; a value that rounds up to high becomes low, so the range stays
 *            [low, high).
 *   normal:  v = z * std + mean in double, rounded to the dtype.
 *   randint: low + (u64 % (high - low)) in 64-bit integers, converted to the dtype. */
/* No contraction of a * b + c into one rounding: the CUDA plugin computes the same
 * expressions unfused (__dmul_rn/__dadd_rn), and a compiler allowed to use FMA here
 * (-march with FMA, aarch64, target clones) would change the last bit of some values. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#define _GNU_SOURCE /* sincos */
#include <math.h>
#include <string.h>

#include <weft/philox.h>

#include "cpu.h"

/* Values per chunk generated before they are scattered to a strided output. */
#define RANDOM_CHUNK 512
/* Random values cost more than a copy, so threads pay off on smaller tensors. */
#define RANDOM_GRAIN 4096

struct random_job {
    int op;
    enum weft_dtype dtype;
    size_t itemsize;
    const weft_tensor *out;
    char *data;      /* element 0 of out */
    bool contiguous; /* write in place; else through a scratch chunk */
    uint64_t seed, offset;
    double p0, p1;   /* low/high or mean/std */
    int64_t low;     /* randint */
    uint64_t range;  /* randint: high - low */
};

static void store_int(enum weft_dtype dt, void *p, int64_t v)
{
    switch (dt) {
    case WEFT_BOOL:
        weft_store_bool(p, v != 0);
        return;
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        weft_store_##name(p, (C)v);                                                            \
        return;
        WEFT_FOR_INTEGRAL_DTYPES(CASE)
        WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
    default:
        return;
    }
}

/* Each generator writes elements [start, start + m) into dst (contiguous, out's dtype),
 * drawing one Philox block per 4 (or 2) elements. */

static void generate_uniform(const struct random_job *job, int64_t start, int64_t m, char *dst)
{
    const double low = job->p0, high = job->p1, span = high - low;
    const bool f64 = job->dtype == WEFT_F64;
    uint32_t w[4];
    for (int64_t k = 0; k < m; k++) {
        uint64_t i = (uint64_t)(start + k);
        if (k == 0 || i % 4 == 0)
            weft_philox4x32(job->offset + i / 4, job->seed, w);
        uint32_t word = w[i % 4];
        double u = f64 ? (double)word * (1.0 / 4294967296.0)
                       : (double)((float)(word >> 8) * (1.0f / 16777216.0f));
        char *p = dst + (size_t)k * job->itemsize;
        cpu_store_from_double(job->dtype, p, u * span + low);
        if (cpu_load_as_double(job->dtype, p) >= high)
            cpu_store_from_double(job->dtype, p, low);
    }
}

static void generate_normal(const struct random_job *job, int64_t start, int64_t m, char *dst)
{
    uint32_t w[4];
    double z[2] = {0, 0};
    for (int64_t k = 0; k < m; k++) {
        uint64_t i = (uint64_t)(start + k);
        if (k == 0 || i % 4 == 0)
            weft_philox4x32(job->offset + i / 4, job->seed, w);
        if (k == 0 || i % 2 == 0) {
            /* Box-Muller on words (0,1) or (2,3); both values of the pair at once. */
            unsigned w0 = (unsigned)(i % 4) & ~1u;
            double u1 = ((double)w[w0] + 1.0) * (1.0 / 4294967296.0);
            double u2 = (double)w[w0 + 1] * (1.0 / 4294967296.0);
            double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586476925 * u2, sn, cs;
            sincos(t, &sn, &cs);
            z[0] = r * cs;
            z[1] = r * sn;
        }
        cpu_store_from_double(job->dtype, dst + (size_t)k * job->itemsize, z[i % 2] * job->p1 + job->p0);
    }
}

static void generate_randint(const struct random_job *job, int64_t start, int64_t m, char *dst)
{
    uint32_t w[4];
    for (int64_t k = 0; k < m; k++) {
        uint64_t i = (uint64_t)(start + k);
        if (k == 0 || i % 2 == 0)
            weft_philox4x32(job->offset + i / 2, job->seed, w);
        unsigned lo = 2u * (unsigned)(i % 2);
        uint64_t bits = (uint64_t)w[lo] | ((uint64_t)w[lo + 1] << 32);
        store_int(job->dtype, dst + (size_t)k * job->itemsize,
                  (int64_t)((uint64_t)job->low + bits % job->range));
    }
}

static void generate(const struct random_job *job, int64_t start, int64_t m, char *dst)
{
    if (job->op == WEFT_OP_RAND_UNIFORM)
        generate_uniform(job, start, m, dst);
    else if (job->op == WEFT_OP_RAND_NORMAL)
        generate_normal(job, start, m, dst);
    else
        generate_randint(job, start, m, dst);
}

/* Copies m values of src to out's elements [start, start + m) in row-major order. */
static void scatter(const weft_tensor *out, char *base, int64_t start, int64_t m, const char *src,
                    size_t itemsize)
{
    int nd = out->ndim;
    int64_t idx[WEFT_MAX_DIMS], off = 0, rem = start;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % out->shape[d];
        rem /= out->shape[d];
        off += idx[d] * out->stride[d];
    }
    for (int64_t k = 0; k < m; k++) {
        memcpy(base + off * (int64_t)itemsize, src + k * (int64_t)itemsize, itemsize);
        for (int d = nd - 1; d >= 0; d--) {
            off += out->stride[d];
            if (++idx[d] < out->shape[d])
                break;
            off -= idx[d] * out->stride[d];
            idx[d] = 0;
        }
    }
}

static void random_range(void *vjob, int64_t begin, int64_t end)
{
    const struct random_job *job = vjob;
    _Alignas(8) char scratch[RANDOM_CHUNK * 8];
    for (int64_t start = begin; start < end; start += RANDOM_CHUNK) {
        int64_t m = end - start < RANDOM_CHUNK ? end - start : RANDOM_CHUNK;
        if (job->contiguous) {
            generate(job, start, m, job->data + start * (int64_t)job->itemsize);
            continue;
        }
        generate(job, start, m, scratch);
        scatter(job->out, job->data, start, m, scratch, job->itemsize);
    }
}

int cpu_random_kernel(const struct weft_op_call *call)
{
    const weft_tensor *out = call->out[0];
    struct random_job job = {
        .op = call->op,
        .dtype = out->dtype,
        .itemsize = weft_dtype_size(out->dtype),
        .out = out,
        .data = weft_tensor_data(out),
        .contiguous = weft_tensor_is_contiguous(out),
        .seed = (uint64_t)call->ints[0],
        .offset = (uint64_t)call->ints[1],
        .p0 = call->scalar[0],
        .p1 = call->scalar[1],
        .low = call->ints[2],
        .range = (uint64_t)call->ints[3] - (uint64_t)call->ints[2],
    };
    if (call->op == WEFT_OP_RANDINT && call->ints[2] >= call->ints[3])
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                              (long long)call->ints[2], (long long)call->ints[3]);
    cpu_parallel_for(weft_tensor_numel(out), RANDOM_GRAIN, random_range, &job);
    return 0;
}
