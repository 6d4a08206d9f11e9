/* weft/half.h: float16 and bfloat16 conversions, usable from C and CUDA.
 * Values are stored as uint16_t bit patterns; arithmetic is done in float. */
#ifndef WEFT_HALF_H
#define WEFT_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

static inline WEFT_HOST_DEVICE uint32_t weft_float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline WEFT_HOST_DEVICE float weft_bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 -> float, exact (subnormals, inf, nan included). */
static inline WEFT_HOST_DEVICE float weft_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)
        return weft_bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return weft_bits_float(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return weft_bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* float -> IEEE binary16, round to nearest even, overflow to inf, nan kept quiet. */
static inline WEFT_HOST_DEVICE uint16_t weft_float_to_f16(float f)
{
    uint32_t x = weft_float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { /* below 2^-14: subnormal or zero */
        if (absx < 0x33000000u) /* below 2^-25 rounds to zero */
            return (uint16_t)sign;
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u) - 0x38000000u;
    return (uint16_t)(sign | (r >> 13));
}

static inline WEFT_HOST_DEVICE float weft_bf16_to_float(uint16_t b)
{
    return weft_bits_float((uint32_t)b << 16);
}

/* float -> bfloat16, round to nearest even, nan kept quiet. */
static inline WEFT_HOST_DEVICE uint16_t weft_float_to_bf16(float f)
{
    uint32_t x = weft_float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#endif
