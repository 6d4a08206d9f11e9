/* weft/checked.h: arithmetic on sizes that come from outside the program (a config key, a
 * file header, a command line): products and sums of counts that say when they do not
 * fit, so the caller refuses the value by name instead of allocating a wrapped size.
 *
 *     int64_t numel, bytes;
 *     if (!weft_size_product(&numel, WEFT_SIZE_MAX, 3, (int64_t[]){c, h, w}) ||
 *         !weft_size_mul(numel, sizeof(float), WEFT_SIZE_MAX, &bytes))
 *         return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = '%s': ...", ...);
 *
 * Every operand and the result are counts: a negative operand fails like an overflow.
 * `limit` is the largest result the caller can use (WEFT_SIZE_MAX for "anything a 64-bit
 * size holds", a smaller bound where the result then meets one, as an image's pixels).
 * Inline: plugins and apps use it without a symbol of the core.
 */
#ifndef WEFT_CHECKED_H
#define WEFT_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest size: what both int64_t and size_t hold. */
#define WEFT_SIZE_MAX INT64_MAX

/* *out = a * b when a, b >= 0 and a * b <= limit; else false and *out is untouched. */
static inline bool weft_size_mul(int64_t a, int64_t b, int64_t limit, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > limit)
        return false;
    *out = r;
    return true;
}

/* *out = a + b when a, b >= 0 and a + b <= limit; else false and *out is untouched. */
static inline bool weft_size_add(int64_t a, int64_t b, int64_t limit, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) || r > limit)
        return false;
    *out = r;
    return true;
}

/* *out = the product of factors[0..n) (1 for n = 0) under limit, as weft_size_mul. */
static inline bool weft_size_product(int64_t *out, int64_t limit, int n, const int64_t *factors)
{
    int64_t r = 1;
    for (int i = 0; i < n; i++)
        if (!weft_size_mul(r, factors[i], limit, &r))
            return false;
    *out = r;
    return true;
}

#ifdef __cplusplus
}
#endif
#endif
