/* plugins/cpu/kernels_quant.c: the elementwise and pooling ops of int8 inference
 * (weft/kernel_quant.h): quantize_per_tensor, dequantize_per_tensor and
 * quantized_max_pool2d, with the contract's arithmetic to the bit (libweft-quant's
 * reference loops are the specification). The int8 products are in quant_onednn.c. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math") /* the clamps become vector selects */
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/kernel_quant.h>

#include "cpu.h"

struct qparams {
    float scale, inv_scale, zero_point, lo, hi;
};

static struct qparams qparams_of(const struct weft_op_call *call, enum weft_dtype qdt)
{
    return (struct qparams){.scale = (float)call->scalar[0],
                            .inv_scale = 1.0f / (float)call->scalar[0],
                            .zero_point = (float)call->ints[0],
                            .lo = qdt == WEFT_U8 ? 0.0f : -128.0f,
                            .hi = qdt == WEFT_U8 ? 255.0f : 127.0f};
}

/* q = clamp(zp + nearbyint(x / scale)), NaN to the zero point; clamped to the dtype's range,
 * q's low byte is its uint8 or int8 storage alike. */
CPU_CLONES static void quantize_loop(void *ctx, char **data, const int64_t *s, int64_t n)
{
    const struct qparams *p = ctx;
    const float inv = p->inv_scale, zp = p->zero_point, lo = p->lo, hi = p->hi;
    if (s[0] == 1 && s[1] == (int64_t)sizeof(float)) {
        uint8_t *q = (uint8_t *)data[0];
        const float *x = (const float *)data[1];
        CPU_SIMD for (int64_t i = 0; i < n; i++)
        {
            float t = nearbyintf(x[i] * inv) + zp;
            t = t < lo ? lo : t;
            t = t > hi ? hi : t;
            t = t == t ? t : zp;
            q[i] = (uint8_t)(int32_t)t;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float t = nearbyintf(*(const float *)(data[1] + i * s[1]) * inv) + zp;
        t = t < lo ? lo : t;
        t = t > hi ? hi : t;
        t = t == t ? t : zp;
        *(uint8_t *)(data[0] + i * s[0]) = (uint8_t)(int32_t)t;
    }
}

/* dequantize_loop_u8 and _i8: x = (q - zp) * scale. */
#define DT u8
#define T uint8_t
#include "dequantize_loop.inc"
#undef DT
#undef T
#define DT i8
#define T int8_t
#include "dequantize_loop.inc"
#undef DT
#undef T

static int check_qdtype(const char *op, enum weft_dtype dt)
{
    if (dt == WEFT_U8 || dt == WEFT_I8)
        return 0;
    return weft_error_set(WEFT_ERR_TYPE, "%s: expected uint8 or int8, got %s", op,
                          weft_dtype_name(dt));
}

static int quantize_kernel(const struct weft_op_call *call)
{
    const weft_tensor *ops[2] = {call->out[0], call->in[0]};
    if (check_qdtype(WEFT_OP_QUANTIZE_PER_TENSOR_NAME, ops[0]->dtype) != 0)
        return weft_error_code();
    static const int64_t itemsize[2] = {1, sizeof(float)};
    struct qparams p = qparams_of(call, ops[0]->dtype);
    return cpu_elementwise_run(2, ops, itemsize, quantize_loop, &p);
}

static int dequantize_kernel(const struct weft_op_call *call)
{
    const weft_tensor *ops[2] = {call->out[0], call->in[0]};
    if (check_qdtype(WEFT_OP_DEQUANTIZE_PER_TENSOR_NAME, ops[1]->dtype) != 0)
        return weft_error_code();
    static const int64_t itemsize[2] = {sizeof(float), 1};
    struct qparams p = qparams_of(call, ops[1]->dtype);
    return cpu_elementwise_run(2, ops, itemsize,
                               ops[1]->dtype == WEFT_U8 ? dequantize_loop_u8 : dequantize_loop_i8,
                               &p);
}

/* ---- max pooling ------------------------------------------------------------------------ */

struct pool_job {
    const weft_tensor *x;
    weft_tensor *y;
    const int64_t *g; /* kh kw sh sw ph pw dh dw */
    bool fast;        /* channels-last with dense rows, every window inside */
    bool pairs;       /* fast, and 2-wide windows 2 apart of 8, 16, 32 or 64 channels */
    int64_t even[8], odd[8]; /* pairs: the quadwords of 8 and 8 pixels that meet */
    bool *failed;
};

static bool channels_last(const weft_tensor *t)
{
    const int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    return (C == 1 || t->stride[1] == 1) && (W == 1 || t->stride[3] == C) &&
           (H == 1 || t->stride[2] == W * C);
}

/* Windows need no clipping when there is no padding nor dilation and the output is
 * the floor size: every tap of every window is inside the image. */
static bool windows_inside(const weft_tensor *x, const weft_tensor *y, const int64_t *g)
{
    return g[4] == 0 && g[5] == 0 && g[6] == 1 && g[7] == 1 &&
           (y->shape[2] - 1) * g[2] + g[0] <= x->shape[2] &&
           (y->shape[3] - 1) * g[3] + g[1] <= x->shape[3];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* out [OW, C] = the max of pixels 2 ow and 2 ow + 1 of a [2 OW, C], C 8, 16, 32 or 64:
 * 64 output bytes from 128 input bytes per step, the even and odd pixels' quadwords
 * gathered by two permutes (j->even, j->odd). The scalar loop takes one C-byte pixel a
 * step, which made the MNIST CNN's pooling (C 8) a tenth of its int8 forward. */
__attribute__((target("avx512f,avx512bw"))) static void pair_max(uint8_t *out, const uint8_t *a,
                                                                  int64_t OW, int64_t C,
                                                                  const struct pool_job *j,
                                                                  bool is_signed)
{
    const __m512i ie = _mm512_loadu_si512(j->even), io = _mm512_loadu_si512(j->odd);
    const int64_t len = OW * C;
    for (int64_t k = 0; k < len; k += 64) {
        const int64_t n = len - k < 64 ? len - k : 64;
        const __m512i a0 = _mm512_maskz_loadu_epi8(cpu_first_bytes(2 * n), a + 2 * k);
        const __m512i a1 = _mm512_maskz_loadu_epi8(cpu_first_bytes(2 * n - 64), a + 2 * k + 64);
        const __m512i e = _mm512_permutex2var_epi64(a0, ie, a1);
        const __m512i o = _mm512_permutex2var_epi64(a0, io, a1);
        _mm512_mask_storeu_epi8(out + k, cpu_first_bytes(n),
                                is_signed ? _mm512_max_epi8(e, o) : _mm512_max_epu8(e, o));
    }
}

static bool pair_max_serves(const int64_t *g, int64_t C)
{
    return g[1] == 2 && g[3] == 2 && (C == 8 || C == 16 || C == 32 || C == 64) &&
           cpu_simd_level() >= CPU_SIMD_AVX512 && __builtin_cpu_supports("avx512bw");
}
#else
static void pair_max(uint8_t *out, const uint8_t *a, int64_t OW, int64_t C,
                     const struct pool_job *j, bool is_signed)
{
    (void)out, (void)a, (void)OW, (void)C, (void)j, (void)is_signed;
}

static bool pair_max_serves(const int64_t *g, int64_t C)
{
    (void)g, (void)C;
    return false;
}
#endif

/* pool_rows_u8 and _i8 (and their pixel_max). */
#define DT u8
#define T uint8_t
#define LEAST 0
#include "quant_pool_rows.inc"
#undef DT
#undef T
#define DT i8
#define T int8_t
#undef LEAST
#define LEAST -128
#include "quant_pool_rows.inc"
#undef DT
#undef T
#undef LEAST

static int max_pool_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    weft_tensor *y = call->out[0];
    if (check_qdtype(WEFT_OP_QUANTIZED_MAX_POOL2D_NAME, x->dtype) != 0)
        return weft_error_code();
    if (x->ndim != 4 || y->ndim != 4 || y->dtype != x->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "quantized_max_pool2d: expected 4-d input and "
                                                "output of one dtype");
    bool failed = false;
    const bool fast = channels_last(x) && channels_last(y) && windows_inside(x, y, call->ints);
    struct pool_job job = {x, y, call->ints, fast,
                           fast && pair_max_serves(call->ints, x->shape[1]), .failed = &failed};
    for (int64_t q = 0, Q = x->shape[1] / 8; job.pairs && q < 8; q++) {
        job.even[q] = 2 * (q / Q) * Q + q % Q; /* quadword q of 8 is pixel q / Q's (q % Q) */
        job.odd[q] = job.even[q] + Q;
    }
    const int64_t rows = y->shape[0] * y->shape[2];
    const int64_t per_row = y->shape[1] * y->shape[3] * call->ints[0] * call->ints[1];
    cpu_parallel_for(rows, per_row > 0 ? (CPU_PARALLEL_GRAIN + per_row - 1) / per_row : rows,
                     x->dtype == WEFT_U8 ? pool_rows_u8 : pool_rows_i8, &job);
    if (failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "quantized_max_pool2d: out of host memory");
    return 0;
}

const struct weft_kernel_entry cpu_quant_kernels[] = {
    {-1, WEFT_OP_QUANTIZE_PER_TENSOR_NAME, WEFT_DTYPE_BIT(WEFT_F32), quantize_kernel},
    {-1, WEFT_OP_DEQUANTIZE_PER_TENSOR_NAME, WEFT_DTYPE_BIT(WEFT_U8) | WEFT_DTYPE_BIT(WEFT_I8),
     dequantize_kernel},
    {-1, WEFT_OP_QUANTIZED_MAX_POOL2D_NAME, WEFT_DTYPE_BIT(WEFT_U8) | WEFT_DTYPE_BIT(WEFT_I8),
     max_pool_kernel},
    {0},
};
