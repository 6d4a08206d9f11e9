/* plugins/cpu/fast_math.h: float32 tanh, erf and exp that loops can vectorise (not ABI);
 * exp_nonpos_f32, the exp of softmax and attention (x - max <= 0); GELU's tanh form.
 *
 * libm's tanhf and erff are scalar calls of 10-40 ns here (glibc declares its vector
 * versions only under -ffast-math), which made GELU the slowest layer of a GPT step.
 * These are straight-line: Eigen's rational approximations of tanh (clamped to [-9, 9])
 * and erf ([-4, 4]), within 4.3e-7 of the exact values over the whole float range, and
 * Cephes's expf (range reduction by ln 2, degree-5 polynomial, 2^n built in the exponent
 * bits). Use them for float compute types; float64 keeps libm.
 *
 * gcc turns their clamps and selects into vector selects only without trapping math: a
 * file using them in a vectorised loop starts with
 *     #pragma GCC optimize("no-trapping-math")
 * before any include (weft never enables floating-point traps). */
#ifndef WEFT_CPU_FAST_MATH_H
#define WEFT_CPU_FAST_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float tanh_f32(float a)
{
    float x = a < -9.f ? -9.f : a > 9.f ? 9.f : a, x2 = x * x;
    float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
    p = x2 * p + -8.60467152213735e-11f;
    p = x2 * p + 5.12229709037114e-08f;
    p = x2 * p + 1.48572235717979e-05f;
    p = x2 * p + 6.37261928875436e-04f;
    p = x2 * p + 4.89352455891786e-03f;
    float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
    q = x2 * q + 2.26843463243900e-03f;
    q = x2 * q + 4.89352518554385e-03f;
    float t = x * p / q; /* computed either way: a select, not a branch */
    return fabsf(a) < 0.0004f ? a : t;
}

static inline __attribute__((always_inline)) float erf_f32(float a)
{
    float x = a < -4.f ? -4.f : a > 4.f ? 4.f : a, x2 = x * x;
    float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = x2 * p + -2.10102402082508e-06f;
    p = x2 * p + -5.69250639462346e-05f;
    p = x2 * p + -7.34990630326855e-04f;
    p = x2 * p + -2.95459980854025e-03f;
    p = x2 * p + -1.60960333262415e-02f;
    float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
    q = x2 * q + -1.68282697438203e-03f;
    q = x2 * q + -7.37332916720468e-03f;
    q = x2 * q + -1.42647390514189e-02f;
    return x * p / q;
}

/* Forward: exp_f32 is defined below. */
static inline __attribute__((always_inline)) float exp_f32(float a);

/* 0.5 (1 + erf(a / sqrt 2)), within 2.8e-7 (erf_f32's 4.3e-7 halved, and 1 + erf's
 * rounding): normal_cdf_f32 where a >= 0. */
static inline __attribute__((always_inline)) float normal_cdf_erf_f32(float a)
{
    return 0.5f * (1.0f + erf_f32(a * 0.70710678118654752f));
}

/* Phi(a) = 0.5 (1 + erf(a / sqrt 2)), the normal CDF of GELU, to float precision relative
 * to its value: in the left tail 1 + erf cancels (at a = -3.75 erf_f32's absolute error
 * becomes 3e-4 relative), so a < 0 uses erfc instead: Numerical Recipes' erfcc (relative
 * error below 1.2e-7 for every z >= 0), t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2).
 * z^2 = a^2 / 2 is split as ah^2 / 2 (ah: a's top 12 bits, so exact) plus the rest, each
 * through its own exp, so rounding a^2 (an error of z^2 ulp) does not reach the result.
 * Branch-free; NaN and a below -1e4 take the erf form (NaN, and 0 as PyTorch gives). */
static inline __attribute__((always_inline)) float normal_cdf_f32(float a)
{
    float center = normal_cdf_erf_f32(a);
    float ac = a < -1e4f ? -1e4f : a > 0.f ? 0.f : a; /* the tail's domain; NaN -> 0 */
    float z = -ac * 0.70710678118654752f, t = 1.0f / (1.0f + 0.5f * z);
    float p = t * 0.17087277f + -0.82215223f;
    p = t * p + 1.48851587f;
    p = t * p + -1.13520398f;
    p = t * p + 0.27886807f;
    p = t * p + -0.18628806f;
    p = t * p + 0.09678418f;
    p = t * p + 0.37409196f;
    p = t * p + 1.00002368f;
    p = t * p + -1.26551223f;
    uint32_t bits;
    memcpy(&bits, &ac, sizeof bits);
    bits &= 0xfffff000u;
    float ah, al;
    memcpy(&ah, &bits, sizeof ah);
    al = ac - ah;
    float hi = 0.5f * ah * ah, lo = ah * al + 0.5f * al * al;
    float tail = 0.5f * t * exp_f32(-hi) * exp_f32(p - lo);
    return a < 0.f && a >= -1e4f ? tail : center;
}

/* Phi(a) for a result rounded to a 16-bit float (float16, bfloat16: GELU of autocast's
 * Linear outputs): the erf form from a = -3 up, whose absolute error there, 2.8e-7, is
 * 2e-4 of Phi(-3) = 1.35e-3, under float16's half ulp (4.9e-4) and a 20th of bfloat16's
 * (3.9e-3); normal_cdf_f32's erfc tail below -3. One rule per element, so a result does
 * not depend on how the elements were blocked. NaN takes the erf form (NaN). */
#define NORMAL_CDF16_TAIL (-3.0f)
/* the elements a 16-bit GELU loop converts to float and runs through normal_cdf16 at once */
#define NORMAL_CDF16_CHUNK 256
static inline __attribute__((always_inline)) float normal_cdf16_f32(float a)
{
    return a < NORMAL_CDF16_TAIL ? normal_cdf_f32(a) : normal_cdf_erf_f32(a);
}

/* phi[k] = normal_cdf16_f32(a[k]) for k < n: the erf form for all, vectorised, then the
 * erfc tail (two exps and a division: 60% of normal_cdf_f32's work) for the few elements
 * below -3, one by one. A GPT's GELU inputs are mostly above -3, so 16-bit GELU forward
 * and backward take this at about half the cost of float32's exact tail everywhere. */
static inline __attribute__((always_inline)) void normal_cdf16_run_f32(float *restrict phi,
                                                                       const float *restrict a,
                                                                       int n)
{
    int tail = 0;
#ifdef _OPENMP
#pragma omp simd reduction(| : tail)
#endif
    for (int k = 0; k < n; k++) {
        phi[k] = normal_cdf_erf_f32(a[k]);
        tail |= a[k] < NORMAL_CDF16_TAIL;
    }
    if (tail)
        for (int k = 0; k < n; k++)
            if (a[k] < NORMAL_CDF16_TAIL)
                phi[k] = normal_cdf_f32(a[k]);
}

/* The same in double (the name _Generic picks for non-float) keeps PyTorch's 0.5 (1 + erf(a / sqrt 2)): the cancellation costs
 * float64 nothing a user sees. */
static inline double normal_cdf(double a)
{
    return 0.5 * (1.0 + erf(a * 0.70710678118654752));
}

/* 2^f for |f| <= 1/2: a degree-6 polynomial fitted to the relative error (2e-9; 1.3 ulp
 * as float arithmetic evaluates it). */
static inline __attribute__((always_inline)) float exp2_reduced_f32(float f)
{
    float p = 1.5353492926806211e-4f;
    p = p * f + 1.3398872688412666e-3f;
    p = p * f + 9.61843691766262e-3f;
    p = p * f + 5.5503323674201965e-2f;
    p = p * f + 2.4022647738456726e-1f;
    p = p * f + 6.931471824645996e-1f;
    return p * f + 1.0f;
}

/* GELU's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3). With
 * a = |x| and E = e^{-2|u|} = 2^-y, y = a (C1 + C3 a^2) (C1 = 2 sqrt(2 / pi) / ln 2,
 * C3 = 0.044715 C1), it is x / (1 + E) for x >= 0 and x E / (1 + E) below: both are
 * relu(x) - a E / (1 + E) (gelu(x) - gelu(-x) = x), in which nothing cancels (1 + tanh(u)
 * lost every digit below x = -4 or so: 1.3% off at -4.25, the sign wrong at -5.15).
 *
 * In the left tail the result's relative error is y's absolute error times ln 2, and y
 * reaches 191 there, so n - y (n = round(y)) is computed to about 2^-25 with float
 * operations that are exact or fused (fmaf rounds once; everything else is exact):
 *   s + es = a^2 exactly, es = fma(a, a, -s);
 *   th = fma(C3h, s, C1h), and its rounding error fma(C3h, s, C1h - th): C1h is C1
 *     rounded to a multiple of 2^-20, which makes C1h - th exact for every th < 18
 *     (Sterbenz below 2 C1h, and above it both are multiples of the difference's ulp);
 *   tl adds the small terms C3h es, C3l s and C1l to it (C3 = C3h + C3l, C1 = C1h + C1l);
 *   n = round(a th) through the float adder (n sits in the sum's low bits), and
 *   f = n - a th - a tl, each product fused.
 * This costs fewer instructions than computing y in double did (two conversions each way
 * per vector), and the same accuracy. E 2^64 = 2^f 2^(64 - n), 2^f by a degree-6
 * polynomial: a normal float wherever the result is not 0. |x| is clamped at 11.68, where
 * n = 191 makes 2^(64 - n)'s exponent field 0, so E 2^64 is exactly 0 there (the result is
 * below half the least subnormal from about -10.6 on). a E / (1 + E) is
 * a E64 / (E64 + 2^64), which rounds once, subnormal results too.
 *
 * The error-free steps need a fused multiply-add: the x86-64-v3/v4 clones and aarch64
 * have one; the baseline x86-64 clone calls libm's fmaf (exact, slower: CPUs before
 * Haswell). */
#define GELU_TANH_AMAX_BITS 0x413ae148u /* 11.68f: y = 190.92 */

/* E 2^64 for a in [0, 11.68], a^2 rounded in *sq (the backward's too). */
static inline __attribute__((always_inline)) float gelu_tanh_exp_f32(float a, float *sq)
{
    const float C1h = 0x1.26aecp+1f, C1l = 0x1.0de73ap-22f;
    const float C3h = 0x1.a5a7dp-4f, C3l = -0x1.151aacp-29f;
    float s = a * a, es = fmaf(a, a, -s);
    float th = fmaf(C3h, s, C1h);
    float tl = fmaf(C3h, s, C1h - th);
    tl = fmaf(C3h, es, tl);
    tl = fmaf(C3l, s, tl) + C1l;
    float ym = fmaf(a, th, 0x1.8p23f); /* n + 1.5 2^23 */
    float n = ym - 0x1.8p23f;
    float f = fmaf(-a, tl, fmaf(-a, th, n)); /* n - y: E = 2^f 2^-n */
    uint32_t yb;
    memcpy(&yb, &ym, sizeof yb);
    uint32_t bits = (0x4b400000u + 64u + 127u - yb) << 23; /* 2^(64 - n); 0 at n = 191 */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    *sq = s;
    return exp2_reduced_f32(f) * scale;
}

/* |x| as bits, and min(|x|, 11.68) (NaN and inf give 11.68) */
static inline __attribute__((always_inline)) float gelu_tanh_clamp_f32(float x, float *ax)
{
    uint32_t ab;
    memcpy(&ab, &x, sizeof ab);
    ab &= 0x7fffffffu;
    memcpy(ax, &ab, sizeof ab);
    ab = ab < GELU_TANH_AMAX_BITS ? ab : GELU_TANH_AMAX_BITS;
    float a;
    memcpy(&a, &ab, sizeof a);
    return a;
}

static inline __attribute__((always_inline)) float gelu_tanh_form_f32(float x)
{
    float ax, s, a = gelu_tanh_clamp_f32(x, &ax);
    float e64 = gelu_tanh_exp_f32(a, &s);
    float t = (a * e64) / (e64 + 0x1p64f); /* a E / (1 + E) */
    /* relu(x), -0 below, NaN for -inf (as 0.5 x (1 + tanh(u)) gives: -inf * 0) and NaN;
     * chosen by the sign bit, which one blend instruction reads */
    int32_t xi;
    memcpy(&xi, &x, sizeof xi);
    float r = xi < 0 ? x * 0.f : x;
    return r - t;
}

/* g times its derivative, 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2) with
 * t = tanh(u): with S = sigmoid(2u) and k = x c, c = 2 beta (1 + 3 kappa x^2), that is
 * S + k S (1 - S); gelu'(x) + gelu'(-x) = 1, and below 0 it is Q = E (d - a c) / d^2,
 * d = 1 + E, so it is Q for x < 0 and 1 - Q above (Q <= 1/2 there: no cancellation).
 * Q = E64 (d - |x| c) / (d^2 2^64) rounds once where it is subnormal. |x| unclamped in
 * d - |x| c makes inf and NaN give NaN (E64 = 0 times -inf), as PyTorch's 0 * inf. */
static inline __attribute__((always_inline)) float gelu_tanh_form_grad_f32(float g, float x)
{
    float ax, s, a = gelu_tanh_clamp_f32(x, &ax);
    float e64 = gelu_tanh_exp_f32(a, &s);
    float d = fmaf(e64, 0x1p-64f, 1.0f);
    float c = fmaf(0.21406444881780076f, s, 1.5957691216057308f);
    float q = e64 * fmaf(-ax, c, d) / ((d * d) * 0x1p64f);
    int32_t xi;
    memcpy(&xi, &x, sizeof xi);
    return g * (xi < 0 ? q : 1.0f - q); /* gelu'(-0) = gelu'(0) */
}

/* The same in double (what _Generic picks for non-float), through libm's exp. */
static inline double gelu_tanh_form(double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    double e = exp(-2 * fabs(u));
    return (x >= 0 ? x : x * e) / (1 + e);
}

static inline double gelu_tanh_form_grad(double g, double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    double e = exp(-2 * fabs(u)), d = 1 + e;
    double c = 1.5957691216057308 * (1 + 0.134145 * x * x);
    return g * ((x >= 0 ? d + (x * e) * c : e * d + (e * x) * c) / (d * d));
}

/* Cephes' expf polynomial: e^r for the reduced argument |r| <= ln(2) / 2, shared by both
 * exps below (they differ in how they clamp and build 2^n). */
static inline __attribute__((always_inline)) float exp_poly_f32(float r)
{
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r + 1.0f;
}

static inline __attribute__((always_inline)) float exp_f32(float a)
{
    float x = a < -87.3f ? -87.3f : a > 88.3f ? 88.3f : a;
    /* n = round(x / ln 2), |n| <= 127, through the float adder (+ 1.5 * 2^23), as
     * exp_nonpos_f32 does: a float-to-int conversion after the clamp kept gcc 12 from
     * vectorising the x86-64-v3 clones of the loops that call this (CPU_CLONES). */
    float t = x * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float y = exp_poly_f32(r);
    int32_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    int32_t bits = (tbits - 0x4b400000 + 127) << 23; /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

/* exp(x) for x <= 0 or NaN (what softmax and attention feed it: x - max), within 1 ulp of exp on
 * [-87, 0] and 0 below the float range. Written without branches or calls so loops
 * calling it vectorise: 2^n * p(r) with n = round(x / ln 2), r = x - n ln 2 in two parts
 * and Cephes' polynomial; the clamping is done on the bits, as integer selects. */
static inline __attribute__((always_inline)) float exp_nonpos_f32(float x)
{
    uint32_t ux, ur, bits;
    memcpy(&ux, &x, sizeof ux);
    uint32_t mag = ux & 0x7fffffffu;
    uint32_t tiny = 0u - (uint32_t)(mag > 0x42aeac4fu); /* below -87.3365, or NaN */
    uint32_t nan = 0u - (uint32_t)(mag > 0x7f800000u);
    uint32_t uc = (ux & ~tiny) | (0xc2aeac4fu & tiny);
    float xc;
    memcpy(&xc, &uc, sizeof xc);
    float t = xc * 1.44269504088896341f + 12582912.0f; /* + 1.5 * 2^23 rounds to nearest */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float y = exp_poly_f32(r);
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4b400000u + 127u) << 23; /* n sits in t's low mantissa bits */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float res = y * scale;
    memcpy(&ur, &res, sizeof ur);
    ur = (ur & ~tiny) | (ux & nan);
    memcpy(&res, &ur, sizeof res);
    return res;
}

#endif
