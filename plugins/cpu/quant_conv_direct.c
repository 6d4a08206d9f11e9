/* plugins/cpu/quant_conv_direct.c: quantized_conv2d (weft/kernel_quant.h) for a
 * 1-channel input, stride 1, no dilation, kernel width <= 4 and height <= 16, Cout
 * dividing 16, output channels-last: an image's first layer (the MNIST CNN's conv1, 1 -> 8
 * channels, 3x3).
 *
 * oneDNN consumes input channels 4 at a time (VNNI's vpdpbusd sums 4 byte products into
 * a 32-bit lane), so it pads 1 channel to 4 and its int8 kernel took 0.41 ms at batch 64
 * (1 thread, ONEDNN_VERBOSE) where the float32 one took 0.17: half the int8 model's time.
 * Here the 4 bytes of a lane are instead a kernel row's taps (x[ow-pw .. ow-pw+3], the
 * 4th weighted 0): per kernel row, one vpdpbusd computes 16/Cout pixels x Cout channels,
 * the lanes laid out as channels-last output pixels, so the epilogue's 16 bytes are
 * stored as they are.
 *
 * Padding taps read the input zero point (real 0) and every sum drops zp_x * sum(w),
 * which equals the contract's sum over in-image taps of (x - zp_x) w; the sums wrap
 * modulo 2^32 as the reference's int64 sum does when converted to int32. The epilogue is
 * the reference's float32 steps in its order. Other shapes, and processors without
 * AVX-512 VNNI, go to oneDNN (*done false). */
#include <stdlib.h>
#include <string.h>

#include <weft/kernel_quant.h>

#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

enum { KH_MAX = 16 }; /* kernel rows whose weights the loop holds */

struct dconv {
    const weft_tensor *x, *y;
    const int64_t *g;     /* kh kw sh sw ph pw dh dw relu zp_out zp_in */
    int64_t Co, PW;       /* PW: a padded plane row's bytes, OW + 32 rounded up to 64 */
    int32_t *wrow;        /* [kh, 16]: lane l's 4 weights of kernel row i, channel l % Co */
    int32_t bias[16];     /* lane l: bias - zp_x * sum(w), channel l % Co */
    float mult[16];
    bool *failed;
};

/* Copies image n's rows into the plane [H + 2 ph, PW] at (ph, pw); the plane's border
 * already holds zp_x (real 0), set once per thread, as no image writes it. */
VNNI static void copy_image(const struct dconv *d, int64_t n, uint8_t *plane)
{
    const weft_tensor *x = d->x;
    const int64_t H = x->shape[2], W = x->shape[3], sh = x->stride[2], sw = x->stride[3];
    const uint8_t *xd = (const uint8_t *)weft_tensor_data(x) + n * x->stride[0];
    uint8_t *dst = plane + d->g[4] * d->PW + d->g[5];
    for (int64_t h = 0; h < H; h++, dst += d->PW) {
        const uint8_t *src = xd + h * sh;
        if (sw != 1) {
            for (int64_t w = 0; w < W; w++)
                dst[w] = src[w * sw];
            continue;
        }
        for (int64_t w = 0; w < W; w += 64) {
            const __mmask64 m = cpu_first_bytes(W - w);
            _mm512_mask_storeu_epi8(dst + w, m, _mm512_maskz_loadu_epi8(m, src + w));
        }
    }
}

/* Rows r = n OH + oh of y. Lane l of a vector: pixel ow + l / Co, channel l % Co; its 4
 * bytes are kernel row i's taps, the plane's bytes at row oh + i, columns ow + l / Co ..
 * + 3, picked by one byte shuffle from a 16-byte broadcast (pixels ow .. ow + 12 fit one
 * when Co >= 2; for Co = 1 the upper 8 lanes take a second broadcast, 8 pixels on). The
 * epilogue: y = clamp(nearbyint(max(acc * mult, relu ? 0 : -inf) + zp_y), 0, 255),
 * the 255 clamp before the rounding (the same bits: both give 255 above 254.5) so the
 * conversion cannot overflow, the 0 clamp on the integers. */
VNNI static void conv_rows(void *ctx, int64_t begin, int64_t end)
{
    const struct dconv *d = ctx;
    const weft_tensor *y = d->y;
    const int64_t *g = d->g, Co = d->Co, P = 16 / Co, kh = g[0], PW = d->PW;
    const int64_t OH = y->shape[2], OW = y->shape[3];
    const int64_t rows = d->x->shape[2] + 2 * g[4];
    const bool f32 = y->dtype == WEFT_F32;
    uint8_t *plane = malloc((size_t)(rows * PW));
    if (!plane) {
        __atomic_store_n(d->failed, true, __ATOMIC_RELAXED);
        return;
    }
    memset(plane, (uint8_t)g[10], (size_t)(rows * PW));
    int8_t idx[64];
    for (int l = 0; l < 16; l++)
        for (int k = 0; k < 4; k++)
            idx[4 * l + k] = (int8_t)(l / Co - (Co == 1 && l >= 8 ? 8 : 0) + k);
    __m512i wv[KH_MAX];
    for (int64_t i = 0; i < kh; i++)
        wv[i] = _mm512_loadu_si512(d->wrow + i * 16);
    const __m512i pick = _mm512_loadu_si512(idx), bias = _mm512_loadu_si512(d->bias);
    const __m512 mult = _mm512_loadu_ps(d->mult);
    const __m512 lo = g[8] ? _mm512_setzero_ps() : _mm512_set1_ps(-__builtin_inff());
    const __m512 zy = _mm512_set1_ps((float)(int32_t)g[9]), top = _mm512_set1_ps(255.0f);
    int64_t copied = -1;
    for (int64_t r = begin; r < end; r++) {
        const int64_t n = r / OH, oh = r % OH;
        if (n != copied) {
            copy_image(d, n, plane);
            copied = n;
        }
        const uint8_t *src = plane + oh * PW;
        char *out = (char *)weft_tensor_data(y) +
                    (n * y->stride[0] + oh * y->stride[2]) * (f32 ? 4 : 1);
        for (int64_t ow = 0; ow < OW; ow += P) {
            __m512i acc = bias;
            for (int64_t i = 0; i < kh; i++) {
                const uint8_t *s = src + i * PW + ow;
                __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)s));
                if (Co == 1)
                    b = _mm512_mask_broadcast_i32x4(b, 0xFF00,
                                                    _mm_loadu_si128((const __m128i *)(s + 8)));
                acc = _mm512_dpbusd_epi32(acc, _mm512_shuffle_epi8(b, pick), wv[i]);
            }
            const __m512 v = _mm512_max_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), mult), lo);
            const int64_t left = (OW - ow < P ? OW - ow : P) * Co;
            const __mmask16 keep = (__mmask16)((1u << left) - 1u);
            if (f32) {
                _mm512_mask_storeu_ps((float *)out + ow * Co, keep, v);
                continue;
            }
            const __m512i q = _mm512_max_epi32(
                _mm512_cvt_roundps_epi32(_mm512_min_ps(_mm512_add_ps(v, zy), top),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                _mm512_setzero_si512());
            _mm_mask_storeu_epi8(out + ow * Co, keep, _mm512_cvtusepi32_epi8(q));
        }
    }
    free(plane);
}

int cpu_quant_conv_direct(const struct weft_op_call *call, bool *done)
{
    *done = false;
    const weft_tensor *x = call->in[0], *w = call->in[1], *y = call->out[0];
    const int64_t *g = call->ints, Co = y->shape[1], OW = y->shape[3];
    const int64_t ys = y->stride[1], ypx = y->stride[3];
    if (x->shape[1] != 1 || g[0] > KH_MAX || g[1] > 4 || g[2] != 1 || g[3] != 1 || g[6] != 1 || g[7] != 1 ||
        16 % Co != 0 || ys != 1 || (OW > 1 && ypx != Co) || (y->shape[2] > 1 &&
        y->stride[2] != OW * Co) || !__builtin_cpu_supports("avx512vnni") ||
        cpu_simd_level() < CPU_SIMD_AVX512)
        return 0;
    *done = true;
    const int64_t kh = g[0], kw = g[1];
    const int8_t *wd = weft_tensor_data(w);
    const int32_t *bd = weft_tensor_data(call->in[2]);
    const float *md = weft_tensor_data(call->in[3]);
    bool failed = false;
    struct dconv d = {x, y, g, Co, (OW + 32 + 63) / 64 * 64, malloc((size_t)(kh * 16) * 4),
                      .failed = &failed};
    if (!d.wrow)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "quantized_conv2d: out of host memory");
    for (int l = 0; l < 16; l++) {
        const int64_t co = l % Co;
        uint32_t sum = 0; /* modulo 2^32, as the sums */
        for (int64_t i = 0; i < kh; i++) {
            int8_t b[4] = {0};
            for (int64_t j = 0; j < kw; j++)
                sum += (uint32_t)(int32_t)(b[j] = wd[(co * kh + i) * kw + j]);
            memcpy(&d.wrow[i * 16 + l], b, 4);
        }
        d.bias[l] = (int32_t)((uint32_t)bd[co] - (uint32_t)g[10] * sum);
        d.mult[l] = md[co];
    }
    const int64_t rows = y->shape[0] * y->shape[2];
    const int64_t per_row = Co * kh * OW;
    cpu_parallel_for(rows, (CPU_PARALLEL_GRAIN + per_row - 1) / per_row, conv_rows, &d);
    free(d.wrow);
    if (failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "quantized_conv2d: out of host memory");
    return 0;
}

#else

int cpu_quant_conv_direct(const struct weft_op_call *call, bool *done)
{
    (void)call;
    *done = false;
    return 0;
}

#endif
