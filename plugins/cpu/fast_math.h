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

/* Phi(a) = 0.5 (1 + erf(a / sqrt 2)), the normal CDF of GELU, to float precision relative
 * to its value: in the left tail 1 + erf cancels (at a = -3.75 erf_f32's absolute error
 * becomes 3e-4 relative), so a < 0 uses erfc instead: Numerical Recipes' erfcc (relative
 * error below 1.2e-7 for every z >= 0), t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2).
 * z^2 = a^2 / 2 is split as ah^2 / 2 (ah: a's top 12 bits, so exact) plus the rest, each
 * through its own exp, so rounding a^2 (an error of z^2 ulp) does not reach the result.
 * Branch-free; NaN and a below -1e4 take the erf form (NaN, and 0 as PyTorch gives). */
static inline __attribute__((always_inline)) float normal_cdf_f32(float a)
{
    float center = 0.5f * (1.0f + erf_f32(a * 0.70710678118654752f));
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

/* GELU's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3), computed
 * as x sigmoid(2u): x / (1 + E) for x >= 0 and x E / (1 + E) below, E = e^{-2|u|}, so
 * nothing cancels (1 + tanh(u) lost all of its digits below x = -4 or so: 1.3% off at
 * -4.25, the sign wrong at -5.15). In the left tail the result's relative error is the
 * absolute error of 2|u|, which reaches 158 there: |u| / ln 2 and its reduction to
 * n + f are computed in double (a float's cube fits in one), 2^f in float. Within 3.3 ulp
 * of the exact value over the whole float range, subnormal results included.
 * gelu_tanh_exp_f32 gives E 2^64 (a normal float for every |x| <= 10.9, where x's are
 * clamped: beyond, E < 2^-158), n from the same double. */
static inline __attribute__((always_inline)) float gelu_tanh_exp_f32(float x)
{
    uint32_t ab;
    memcpy(&ab, &x, sizeof ab);
    ab &= 0x7fffffffu;
    ab = ab < 0x412e6666u ? ab : 0x412e6666u; /* min(|x|, 10.9) on the bits: NaN -> 10.9 */
    float a;
    memcpy(&a, &ab, sizeof a);
    double ad = a;
    /* 2 |u| / ln 2 = a (C1 + C3 a^2), C1 = 2 sqrt(2 / pi) / ln 2, C3 = 0.044715 C1 */
    double y = ad * (ad * ad * 0.1029432395800235 + 2.302208198144325);
    double n = (y + 0x1.8p52) - 0x1.8p52; /* round(y) */
    float f = (float)(n - y);             /* E = 2^f 2^-n, |f| <= 1/2 */
    int32_t bits = (127 + 64 - (int32_t)n) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return exp2_reduced_f32(f) * scale;
}

static inline __attribute__((always_inline)) float gelu_tanh_form_f32(float x)
{
    float e64 = gelu_tanh_exp_f32(x);
    /* below -10.9, x E is -0 (NaN for -inf and NaN, as 0.5 x (1 + tanh(u)) gives) */
    float tail = x >= -10.9f ? e64 : 0.f;
    float num = x >= 0.f ? x : x * tail * 0x1p-64f;
    return num / (1.0f + e64 * 0x1p-64f);
}

/* g times its derivative, 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2) with
 * t = tanh(u): with S = sigmoid(2u) and k = x c, c = 2 beta (1 + 3 kappa x^2), that is
 * S + k S (1 - S), which is (d + x E c) / d^2 for x >= 0 and E (d + x c) / d^2 below,
 * d = 1 + E. x E is formed first, so that E = 0 leaves k's overflow out (NaN only where
 * x^2 overflows, as PyTorch's 0 * inf). */
static inline __attribute__((always_inline)) float gelu_tanh_form_grad_f32(float g, float x)
{
    float e64 = gelu_tanh_exp_f32(x), e = e64 * 0x1p-64f, d = 1.0f + e;
    float c = 1.5957691216057308f * (1.0f + 0.134145f * x * x);
    float tail = x >= -10.9f ? e64 : 0.f;
    float num = x >= 0.f ? d + (x * e) * c : (tail * d + (tail * x) * c) * 0x1p-64f;
    return g * (num / (d * d));
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
