/* plugins/cpu/convert.c: contiguous runs of float32 <-> bfloat16 / float16, vectorised.
 *
 * Autocast converts every operand of a low-precision op and every result back, so these
 * loops were a fifth of a bf16 training step when they went one element at a time
 * through weft/half.h's helpers. Each loop here gives exactly the helpers' bits (NaN,
 * inf, -0, subnormals and ties to even included) with the widest of three bodies that
 * the cpu has and [cpu] simd allows:
 *  - AVX-512 (F, BW, VL): 16 lanes, the ragged tail through masked loads and stores;
 *  - AVX2 with F16C: 8 lanes, the tail through the helpers;
 *  - the helpers themselves (any x86-64, and every other architecture).
 * float32 -> bfloat16 is the helper's integer rounding, (x + 0x7fff + lsb) >> 16, with NaN
 * quieted by a select; not AVX512_BF16's vcvtneps2bf16, which flushes subnormal inputs
 * to zero where the helper rounds them. float16 goes through the F16C / AVX-512
 * conversions (round to nearest even, subnormals exact), except that those keep a NaN's
 * payload where the helpers do not: float32 -> float16 gives the canonical quiet NaN
 * (sign | 0x7e00), float16 -> float32 keeps a signalling NaN signalling. NaN lanes are
 * fixed up by a select (AVX-512) or redone by the helper (AVX2: NaN is rare enough that
 * a branch costs less than building the fix-up every time). */
#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86_CONVERT 1
#endif

static void f32_to_bf16_scalar(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = weft_float_to_bf16(src[i]);
}

static void bf16_to_f32_scalar(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = weft_bf16_to_float(src[i]);
}

static void f32_to_f16_scalar(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = weft_float_to_f16(src[i]);
}

static void f16_to_f32_scalar(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = weft_f16_to_float(src[i]);
}

#ifdef HAVE_X86_CONVERT
/* ---- AVX-512: 16 lanes, masked tails ----------------------------------------------------- */
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Mask of the first k < 16 lanes. */
static inline __mmask16 first_lanes(int64_t k)
{
    return (__mmask16)((1u << k) - 1u);
}

/* NaN lanes of float32 bits x: |x| above the bits of inf. */
TARGET_AVX512 static inline __mmask16 nan_lanes_512(__m512i x)
{
    return _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                   _mm512_set1_epi32(0x7f800000));
}

TARGET_AVX512 static inline __m256i f32_to_bf16_16(__m512i x)
{
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
    __m512i quiet = _mm512_or_si512(x, _mm512_set1_epi32(0x400000)); /* bf16 bit 0x40 */
    r = _mm512_mask_mov_epi32(r, nan_lanes_512(x), quiet);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)); /* keeps each low half */
}

TARGET_AVX512 static void f32_to_bf16_avx512(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), f32_to_bf16_16(_mm512_loadu_si512(src + i)));
    if (i < n) {
        __mmask16 m = first_lanes(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, f32_to_bf16_16(_mm512_maskz_loadu_epi32(m, src + i)));
    }
}

TARGET_AVX512 static void bf16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
    }
    if (i < n) {
        __mmask16 m = first_lanes(n - i);
        __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
        _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(h, 16));
    }
}

TARGET_AVX512 static inline __m256i f32_to_f16_16(__m512i x)
{
    __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(x),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* The helper's NaN: sign | 0x7e00, payload dropped. */
    __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x8000));
    __m256i nan = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
    return _mm256_mask_mov_epi16(h, nan_lanes_512(x), nan);
}

TARGET_AVX512 static void f32_to_f16_avx512(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), f32_to_f16_16(_mm512_loadu_si512(src + i)));
    if (i < n) {
        __mmask16 m = first_lanes(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, f32_to_f16_16(_mm512_maskz_loadu_epi32(m, src + i)));
    }
}

TARGET_AVX512 static inline __m512 f16_to_f32_16(__m256i h)
{
    __m512 f = _mm512_cvtph_ps(h);
    /* The helper's NaN: sign | 0x7f800000 | payload << 13, a signalling one kept so. */
    __m512i w = _mm512_cvtepu16_epi32(h);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7fff)),
                                            _mm512_set1_epi32(0x7c00));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16);
    __m512i payload = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13);
    __m512i bits = _mm512_or_si512(_mm512_or_si512(sign, payload), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
}

TARGET_AVX512 static void f16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, f16_to_f32_16(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) {
        __mmask16 m = first_lanes(n - i);
        _mm512_mask_storeu_ps(dst + i, m, f16_to_f32_16(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

/* ---- AVX2 and F16C: 8 lanes, tails through the helpers -------------------------------------- */
#define TARGET_AVX2 __attribute__((target("avx2,f16c")))

/* Rounded bfloat16 bits of 8 floats, in the low half of each 32-bit lane. */
TARGET_AVX2 static inline __m256i f32_to_bf16_8(__m256i x)
{
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(x, _mm256_set1_epi32(0x400000)), nan);
    return _mm256_srli_epi32(r, 16);
}

TARGET_AVX2 static void f32_to_bf16_avx2(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = f32_to_bf16_8(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i hi = f32_to_bf16_8(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* packus works within 128-bit halves (lo0 hi0 lo1 hi1): put them back in order.
         * The values fit 16 bits, so its unsigned saturation never applies. */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
    f32_to_bf16_scalar(dst + i, src + i, n - i);
}

TARGET_AVX2 static void bf16_to_f32_avx2(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    bf16_to_f32_scalar(dst + i, src + i, n - i);
}

TARGET_AVX2 static void f32_to_f16_avx2(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0, 0))
            f32_to_f16_scalar(dst + i, src + i, 8);
    }
    f32_to_f16_scalar(dst + i, src + i, n - i);
}

TARGET_AVX2 static void f16_to_f32_avx2(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
        __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)),
                                      _mm_set1_epi16(0x7c00));
        if (__builtin_expect(_mm_movemask_epi8(nan) != 0, 0))
            f16_to_f32_scalar(dst + i, src + i, 8);
    }
    f16_to_f32_scalar(dst + i, src + i, n - i);
}
#endif

/* ---- choosing a body ------------------------------------------------------------------------ */

/* What the cpu has plus one (0: not asked yet), and the cap. Relaxed atomics: threads
 * that race to detect all store the same value. */
static int cpu_level;
static int cap_level = CPU_SIMD_AVX512;

static enum cpu_simd detect(void)
{
#ifdef HAVE_X86_CONVERT
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return CPU_SIMD_AVX512;
    /* Every AVX2 processor has F16C (Haswell, Excavator and later); checked all the same,
     * through CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c". */
    unsigned eax, ebx, ecx, edx;
    if (__builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
        (ecx & bit_F16C))
        return CPU_SIMD_AVX2;
#endif
    return CPU_SIMD_NONE;
}

enum cpu_simd cpu_simd_level(void)
{
    int have = __atomic_load_n(&cpu_level, __ATOMIC_RELAXED);
    if (have == 0) {
        have = (int)detect() + 1;
        __atomic_store_n(&cpu_level, have, __ATOMIC_RELAXED);
    }
    int cap = __atomic_load_n(&cap_level, __ATOMIC_RELAXED);
    return (enum cpu_simd)(have - 1 < cap ? have - 1 : cap);
}

void cpu_simd_limit(enum cpu_simd widest)
{
    __atomic_store_n(&cap_level, (int)widest, __ATOMIC_RELAXED);
}

#ifdef HAVE_X86_CONVERT
#define DISPATCH(name, dst, src, n)                                                           \
    switch (cpu_simd_level()) {                                                               \
    case CPU_SIMD_AVX512: name##_avx512(dst, src, n); return;                                 \
    case CPU_SIMD_AVX2: name##_avx2(dst, src, n); return;                                     \
    default: name##_scalar(dst, src, n); return;                                              \
    }
#else
#define DISPATCH(name, dst, src, n) name##_scalar(dst, src, n)
#endif

void cpu_f32_to_bf16(uint16_t *dst, const float *src, int64_t n)
{
    DISPATCH(f32_to_bf16, dst, src, n);
}

void cpu_bf16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
    DISPATCH(bf16_to_f32, dst, src, n);
}

void cpu_f32_to_f16(uint16_t *dst, const float *src, int64_t n)
{
    DISPATCH(f32_to_f16, dst, src, n);
}

void cpu_f16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
    DISPATCH(f16_to_f32, dst, src, n);
}

void cpu_round_f32_run(enum weft_dtype dt, void *dst, const float *src, int64_t n)
{
    if (dt == WEFT_BF16)
        cpu_f32_to_bf16(dst, src, n);
    else if (dt == WEFT_F16)
        cpu_f32_to_f16(dst, src, n);
}
