/* weft/philox.h: the counter-based generator every backend uses (Philox4x32-10,
 * Salmon et al. 2011), so that CPU and CUDA draw identical streams.
 *
 * One call maps (key = seed, counter = block) to four 32-bit words. Element i of a
 * random op with base block `offset` uses:
 *   uniform: block offset + i/4, word i%4; value (w >> 8) * 2^-24 (floats up to 32 bits)
 *            or w * 2^-32 (float64), scaled to [low, high).
 *   normal:  block offset + i/4; words (0,1) give elements 0,1 and words (2,3) give 2,3
 *            by Box-Muller in double: r = sqrt(-2 ln((w0 + 1) * 2^-32)),
 *            t = 2 pi w1 * 2^-32, z0 = r cos t, z1 = r sin t.
 *   randint: block offset + i/2, words 2(i%2) (low) and 2(i%2)+1 (high) form a u64;
 *            low + u64 % (high - low).
 * A random op advances the process offset by the blocks it used. */
#ifndef WEFT_PHILOX_H
#define WEFT_PHILOX_H

#include <math.h>
#include <stdint.h>

#include "weft/half.h"

static inline WEFT_HOST_DEVICE void weft_philox4x32(uint64_t block, uint64_t seed, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
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

/* Uniform [0, 1) with 24 random bits, for element i. */
static inline WEFT_HOST_DEVICE float weft_philox_uniform_f32(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint32_t w[4];
    weft_philox4x32(offset + i / 4, seed, w);
    return (float)(w[i % 4] >> 8) * (1.0f / 16777216.0f);
}

/* Uniform [0, 1) with 32 random bits, for element i (float64). */
static inline WEFT_HOST_DEVICE double weft_philox_uniform_f64(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint32_t w[4];
    weft_philox4x32(offset + i / 4, seed, w);
    return (double)w[i % 4] * (1.0 / 4294967296.0);
}

/* Standard normal for element i. */
static inline WEFT_HOST_DEVICE double weft_philox_normal(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint32_t w[4];
    weft_philox4x32(offset + i / 4, seed, w);
    unsigned pair = (unsigned)(i % 4) & ~1u;
    double u1 = ((double)w[pair] + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)w[pair + 1] * (1.0 / 4294967296.0);
    double r = sqrt(-2.0 * log(u1));
    double t = 6.283185307179586476925 * u2;
    return (i % 2) ? r * sin(t) : r * cos(t);
}

/* 64 random bits for element i (randint). */
static inline WEFT_HOST_DEVICE uint64_t weft_philox_u64(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint32_t w[4];
    weft_philox4x32(offset + i / 2, seed, w);
    unsigned lo = 2u * (unsigned)(i % 2);
    return (uint64_t)w[lo] | ((uint64_t)w[lo + 1] << 32);
}

#endif
