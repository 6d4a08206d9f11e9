/* plugins/cpu/kernels_copy.c: the COPY kernel (out[0] <- in[0], any strides, any pair of
 * dtypes).
 *
 * Three paths, cheapest first:
 *  - same dtype, both sides one contiguous run: memcpy in parallel chunks;
 *  - same dtype, a transpose (after coalescing, the destination is contiguous along its
 *    last dim and the source along the one before): 4-byte elements go through AVX2
 *    column strips with register transposes, other sizes through cache-blocked tiles,
 *    so that both sides move whole cache lines instead of one side striding through
 *    memory a line per element;
 *  - everything else: the shared iterator with a typed inner loop per (src, dst) pair,
 *    which the compiler vectorises when both inner strides are unit; float32 <->
 *    bfloat16 / float16 unit-stride runs go to convert.c's explicitly vectorised loops
 *    instead (the helpers' NaN branch keeps the compiler from vectorising them).
 */
#include <string.h>

#include "cpu.h"

/* ---- dtype conversion: one loop per (source, destination) pair ------------------------- */

/* Floating to integer, as PyTorch on an x86 cpu (weft/tensor.h, weft_to_dtype): uint8
 * through int64 (-3.0 -> 253), int8/int16/int32 through int32 (300.0 -> int8 44), then
 * wrapped; a value that int64 (or int32) cannot hold, NaN and +-inf included, becomes its
 * minimum (x86's "integer indefinite"), so +inf -> uint8 is 0 and 3e9 -> int16 is 0.
 * Spelled out rather than left to the C cast, which is undefined for those values.
 * Integer sources convert with the plain cast (wrapping). bool is "!= 0" (NaN is true). */
static inline int64_t f_to_i64(double x)
{
    return x >= -9223372036854775808.0 && x < 9223372036854775808.0 ? (int64_t)x : INT64_MIN;
}
static inline int32_t f_to_i32(double x)
{
    return x > -2147483649.0 && x < 2147483648.0 ? (int32_t)x : INT32_MIN;
}
#define VIA_I64(x) _Generic((x), float: f_to_i64(x), double: f_to_i64(x), default: (int64_t)(x))
#define VIA_I32(x) _Generic((x), float: f_to_i32(x), double: f_to_i32(x), default: (int32_t)(x))
#define CONV_TO_bool(x) ((x) != 0)
#define CONV_TO_u8(x) ((uint8_t)VIA_I64(x))
#define CONV_TO_i8(x) ((int8_t)VIA_I32(x))
#define CONV_TO_i16(x) ((int16_t)VIA_I32(x))
#define CONV_TO_i32(x) (VIA_I32(x))
#define CONV_TO_i64(x) (VIA_I64(x))
#define CONV_TO_f16(x) ((float)(x))
#define CONV_TO_bf16(x) ((float)(x))
#define CONV_TO_f32(x) ((float)(x))
#define CONV_TO_f64(x) ((double)(x))

typedef void (*convert_fn)(char *dst, const char *src, int64_t dst_stride, int64_t src_stride,
                           int64_t n);

#define DEFINE_CONVERT(sn, ST, SC, dn, did, DT, DC)                                           \
    static void convert_##sn##_to_##dn(char *dst, const char *src, int64_t ds, int64_t ss,    \
                                       int64_t n)                                             \
    {                                                                                         \
        if (ds == (int64_t)sizeof(DT) && ss == (int64_t)sizeof(ST)) {                         \
            for (int64_t i = 0; i < n; i++)                                                   \
                weft_store_##dn(dst + i * (int64_t)sizeof(DT),                                 \
                               CONV_TO_##dn(weft_load_##sn(src + i * (int64_t)sizeof(ST))));   \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; i++)                                                       \
            weft_store_##dn(dst + i * ds, CONV_TO_##dn(weft_load_##sn(src + i * ss)));          \
    }

/* The destination side of the table. The preprocessor will not expand
 * WEFT_FOR_ALL_DTYPES inside its own expansion, so this second list is needed; the table
 * below is indexed by the enums the lists carry, so their order does not matter, and a
 * dtype missing here shows up as a NotImplemented error at run time. */
#define FOR_EACH_DESTINATION(X, sn, ST, SC)                                                   \
    X(sn, ST, SC, bool, WEFT_BOOL, bool, bool)                                                \
    X(sn, ST, SC, u8, WEFT_U8, uint8_t, uint8_t)                                              \
    X(sn, ST, SC, i8, WEFT_I8, int8_t, int8_t)                                                \
    X(sn, ST, SC, i16, WEFT_I16, int16_t, int16_t)                                            \
    X(sn, ST, SC, i32, WEFT_I32, int32_t, int32_t)                                            \
    X(sn, ST, SC, i64, WEFT_I64, int64_t, int64_t)                                            \
    X(sn, ST, SC, f16, WEFT_F16, uint16_t, float)                                             \
    X(sn, ST, SC, bf16, WEFT_BF16, uint16_t, float)                                           \
    X(sn, ST, SC, f32, WEFT_F32, float, float)                                                \
    X(sn, ST, SC, f64, WEFT_F64, double, double)

#define DEFINE_CONVERTS_FROM(sn, sid, ST, SC) FOR_EACH_DESTINATION(DEFINE_CONVERT, sn, ST, SC)
WEFT_FOR_ALL_DTYPES(DEFINE_CONVERTS_FROM)

#define CONVERT_ENTRY(sn, ST, SC, dn, did, DT, DC) [did] = convert_##sn##_to_##dn,
#define CONVERT_ROW(sn, sid, ST, SC) [sid] = {FOR_EACH_DESTINATION(CONVERT_ENTRY, sn, ST, SC)},
static const convert_fn convert_table[WEFT_DTYPE_COUNT][WEFT_DTYPE_COUNT] = {
    WEFT_FOR_ALL_DTYPES(CONVERT_ROW)};

/* The pairs autocast converts on every op have vectorised unit-stride runs (convert.c);
 * every other pair, and every strided run, takes the table's loop. */
typedef void (*run_fn)(char *dst, const char *src, int64_t n);
#define DEFINE_RUN(sn, sid, ST, dn, did, DT)                                                  \
    static void run_##sn##_to_##dn(char *dst, const char *src, int64_t n)                     \
    {                                                                                         \
        cpu_##sn##_to_##dn((DT *)dst, (const ST *)src, n);                                    \
    }
#define FOR_EACH_VECTOR_PAIR(X)                                                               \
    X(f32, WEFT_F32, float, bf16, WEFT_BF16, uint16_t)                                        \
    X(bf16, WEFT_BF16, uint16_t, f32, WEFT_F32, float)                                        \
    X(f32, WEFT_F32, float, f16, WEFT_F16, uint16_t)                                          \
    X(f16, WEFT_F16, uint16_t, f32, WEFT_F32, float)
FOR_EACH_VECTOR_PAIR(DEFINE_RUN)
#define RUN_ENTRY(sn, sid, ST, dn, did, DT) [sid][did] = run_##sn##_to_##dn,
static const run_fn run_table[WEFT_DTYPE_COUNT][WEFT_DTYPE_COUNT] = {
    FOR_EACH_VECTOR_PAIR(RUN_ENTRY)};

struct convert_job {
    convert_fn fn;
    run_fn run;                 /* NULL when the pair has no vectorised run */
    int64_t dst_size, src_size; /* bytes */
};

static void convert_loop(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    const struct convert_job *job = ctx;
    /* operand 0 is the destination */
    if (job->run && stride[0] == job->dst_size && stride[1] == job->src_size) {
        job->run(data[0], data[1], n);
        return;
    }
    job->fn(data[0], data[1], stride[0], stride[1], n);
}

/* ---- contiguous runs: parallel memcpy --------------------------------------------------- */

/* Big enough that waking the pool pays off, small enough to split 64 MiB eight ways. */
#define MEMCPY_CHUNK ((int64_t)1 << 18)

struct memcpy_job {
    char *dst;
    const char *src;
    int64_t nbytes;
};

static void memcpy_chunks(void *ctx, int64_t begin, int64_t end)
{
    struct memcpy_job *job = ctx;
    int64_t lo = begin * MEMCPY_CHUNK;
    int64_t hi = end * MEMCPY_CHUNK < job->nbytes ? end * MEMCPY_CHUNK : job->nbytes;
    memcpy(job->dst + lo, job->src + lo, (size_t)(hi - lo));
}

static void parallel_memcpy(char *dst, const char *src, int64_t nbytes)
{
    struct memcpy_job job = {dst, src, nbytes};
    int64_t chunks = (nbytes + MEMCPY_CHUNK - 1) / MEMCPY_CHUNK;
    /* One chunk per thread is too coarse for a 1 MiB copy; 4 chunks are worth a split. */
    cpu_parallel_for(chunks, 4, memcpy_chunks, &job);
}

/* ---- transposes: cache-blocked tiles ------------------------------------------------------
 * In destination memory order the last two iterator dims are (rows, cols): the
 * destination walks cols with unit stride, the source walks rows with unit stride. A tile
 * is read column by column (unit stride in the source) into a small buffer and written
 * row by row (unit stride in the destination). Going through the buffer matters: with a
 * power-of-two row pitch, the TILE lines a direct tile copy keeps open on the strided
 * side all map to the same L1 set and evict each other on every element. */
#ifndef TILE
#define TILE 64
#endif

struct transpose_job {
    const struct weft_iter *it;
    int64_t rows, cols;
    int64_t row_tiles, col_tiles;
    int64_t dst_row_stride, src_col_stride; /* bytes */
    void (*tile)(char *dst, const char *src, int64_t drs, int64_t scs, int64_t nr, int64_t nc);
};

/* Scalar tiles through a buffer (at most 16 KiB, so it stays in L1 next to the lines it
 * serves: 64 rows of 1..4-byte elements, 32 rows of 8-byte ones per pass). */
#define TILE_BUFFER_BYTES 16384
#define CPU_KERNEL_INC "copy_moves.inc"
#include "each_itemsize.inc"
#undef CPU_KERNEL_INC

static weft_iter_loop_fn move_for_size(size_t size)
{
    switch (size) {
    case 1: return move_1;
    case 2: return move_2;
    case 4: return move_4;
    case 8: return move_8;
    default: return NULL;
    }
}

static void (*tile_for_size(size_t size))(char *, const char *, int64_t, int64_t, int64_t, int64_t)
{
    switch (size) {
    case 1: return tile_1;
    case 2: return tile_2;
    case 4: return tile_4;
    case 8: return tile_8;
    default: return NULL;
    }
}

/* Base pointers of outer (non-transposed) index `outer`, for both operands. */
static void outer_bases(const struct weft_iter *it, int64_t outer, char **dst, char **src)
{
    char *d = it->data[0], *s = it->data[1];
    for (int k = it->ndim - 3; k >= 0; k--) {
        int64_t i = outer % it->shape[k];
        outer /= it->shape[k];
        d += i * it->strides[0][k];
        s += i * it->strides[1][k];
    }
    *dst = d;
    *src = s;
}

static void transpose_tiles(void *ctx, int64_t begin, int64_t end)
{
    const struct transpose_job *job = ctx;
    int64_t per_outer = job->row_tiles * job->col_tiles;
    for (int64_t t = begin; t < end; t++) {
        char *dst;
        char *src;
        outer_bases(job->it, t / per_outer, &dst, &src);
        int64_t rt = t % per_outer / job->col_tiles, ct = t % job->col_tiles;
        int64_t r0 = rt * TILE, c0 = ct * TILE;
        int64_t nr = job->rows - r0 < TILE ? job->rows - r0 : TILE;
        int64_t nc = job->cols - c0 < TILE ? job->cols - c0 : TILE;
        size_t size = (size_t)job->it->strides[0][job->it->ndim - 1];
        job->tile(dst + r0 * job->dst_row_stride + c0 * (int64_t)size,
                  src + r0 * (int64_t)size + c0 * job->src_col_stride, job->dst_row_stride,
                  job->src_col_stride, nr, nc);
    }
}

/* True when the walk is a (batched) transpose worth blocking; fills job. */
static bool plan_transpose(const struct weft_iter *it, size_t size, struct transpose_job *job)
{
    int nd = it->ndim;
    if (nd < 2)
        return false;
    int64_t rows = it->shape[nd - 2], cols = it->shape[nd - 1];
    bool dst_rows = it->strides[0][nd - 1] == (int64_t)size;
    bool src_cols = it->strides[1][nd - 2] == (int64_t)size;
    /* Small transposes fit in cache anyway; the tiles would only add overhead. */
    if (!dst_rows || !src_cols || rows < 16 || cols < 16)
        return false;
    void (*tile)(char *, const char *, int64_t, int64_t, int64_t, int64_t) = tile_for_size(size);
    if (!tile)
        return false;
    *job = (struct transpose_job){
        .it = it,
        .rows = rows,
        .cols = cols,
        .row_tiles = (rows + TILE - 1) / TILE,
        .col_tiles = (cols + TILE - 1) / TILE,
        .dst_row_stride = it->strides[0][nd - 2],
        .src_col_stride = it->strides[1][nd - 1],
        .tile = tile,
    };
    return true;
}

static void run_transpose(const struct transpose_job *job)
{
    int64_t outer = job->it->numel / (job->rows * job->cols);
    int64_t ntiles = outer * job->row_tiles * job->col_tiles;
    int64_t grain = CPU_PARALLEL_GRAIN / (TILE * TILE);
    cpu_parallel_for(ntiles, grain > 0 ? grain : 1, transpose_tiles, (void *)job);
}

/* ---- 4-byte transposes with AVX2: column strips -------------------------------------------
 * The fastest shape measured for float32 (4096^2): a strip of STRIP_COLS source columns
 * walked top to bottom. The source is then STRIP_COLS sequential streams (which the
 * hardware prefetcher follows, helped by software prefetches PREFETCH_ROWS ahead), and
 * every step of 8 rows writes STRIP_COLS * 4 bytes of each of 8 destination rows, so
 * large destinations can use streaming stores: no read-for-ownership, a third less memory
 * traffic. Strips of 16 columns (the first version, measured on a Sapphire Rapids VM)
 * reached 60% of memcpy on a 2-core Zen 5 (weft-bench transpose_contiguous_4096, 2 threads,
 * 21.5 against 36.1 GB/s); wider ones write longer runs of each destination row: 64
 * columns about 80%, 128 and 256 about 100% (35.8 against 35.5 GB/s, medians of 7
 * interleaved runs). Strips are cut into STRIP_ROWS pieces so that tall, thin transposes
 * still split across threads. The shuffles only move bits, so every 4-byte dtype (and
 * every NaN payload) survives. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_STRIPS 1
#define STRIP_COLS 128
#define STRIP_ROWS 1024
#define PREFETCH_ROWS 256
#define STREAM_MIN_BYTES ((int64_t)4 << 20)

struct strip_job {
    const struct weft_iter *it;
    int64_t rows, cols, row_pieces, col_strips;
    int64_t drs, scs; /* destination row stride, source column stride (bytes) */
    bool stream;
};

/* o[i] = row i of the transpose of the 8x8 block whose column j starts at s + j * scs. */
__attribute__((target("avx2"))) static inline void transpose8x8(const char *s, int64_t scs,
                                                                 __m256 o[8])
{
    __m256 v0 = _mm256_loadu_ps((const float *)(s + 0 * scs));
    __m256 v1 = _mm256_loadu_ps((const float *)(s + 1 * scs));
    __m256 v2 = _mm256_loadu_ps((const float *)(s + 2 * scs));
    __m256 v3 = _mm256_loadu_ps((const float *)(s + 3 * scs));
    __m256 v4 = _mm256_loadu_ps((const float *)(s + 4 * scs));
    __m256 v5 = _mm256_loadu_ps((const float *)(s + 5 * scs));
    __m256 v6 = _mm256_loadu_ps((const float *)(s + 6 * scs));
    __m256 v7 = _mm256_loadu_ps((const float *)(s + 7 * scs));
    __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
    __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
    __m256 t4 = _mm256_unpacklo_ps(v4, v5), t5 = _mm256_unpackhi_ps(v4, v5);
    __m256 t6 = _mm256_unpacklo_ps(v6, v7), t7 = _mm256_unpackhi_ps(v6, v7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    o[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    o[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    o[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    o[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    o[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    o[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    o[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    o[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* nr rows of a strip of nc columns (a multiple of 8, at most STRIP_COLS) starting at
 * (dst, src). */
__attribute__((target("avx2"))) static void strip_piece(char *dst, const char *src, int64_t drs,
                                                        int64_t scs, int64_t nr, int64_t nc,
                                                        bool stream)
{
    int64_t nr8 = nr & ~(int64_t)7;
    /* src: nc streams (source rows, scs apart) read 8 elements at a time; dst: 8 rows
     * (drs apart) written nc elements each */
    for (int64_t r = 0; r < nr8; r += 8) {
        const char *s = src + r * 4;
        if ((r & 15) == 0)
            for (int64_t c = 0; c < nc; c++)
                _mm_prefetch(s + c * scs + PREFETCH_ROWS * 4, _MM_HINT_T0);
        char *d = dst + r * drs;
        for (int64_t cb = 0; cb < nc; cb += 8) {
            __m256 block[8];
            transpose8x8(s + cb * scs, scs, block);
            if (stream)
                for (int i = 0; i < 8; i++)
                    _mm256_stream_ps((float *)(d + i * drs) + cb, block[i]);
            else
                for (int i = 0; i < 8; i++)
                    _mm256_storeu_ps((float *)(d + i * drs) + cb, block[i]);
        }
    }
    for (int64_t r = nr8; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            memcpy(dst + r * drs + c * 4, src + c * scs + r * 4, 4);
}

__attribute__((target("avx2"))) static void strip_pieces(void *ctx, int64_t begin, int64_t end)
{
    const struct strip_job *job = ctx;
    int64_t per_outer = job->col_strips * job->row_pieces;
    for (int64_t u = begin; u < end; u++) {
        char *dst;
        char *src;
        outer_bases(job->it, u / per_outer, &dst, &src);
        int64_t strip = u % per_outer / job->row_pieces, piece = u % job->row_pieces;
        int64_t c0 = strip * STRIP_COLS, r0 = piece * STRIP_ROWS;
        int64_t nr = job->rows - r0 < STRIP_ROWS ? job->rows - r0 : STRIP_ROWS;
        int64_t nc = job->cols - c0 < STRIP_COLS ? job->cols - c0 : STRIP_COLS;
        int64_t nc8 = nc & ~(int64_t)7;
        dst += r0 * job->drs + c0 * 4;
        src += c0 * job->scs + r0 * 4;
        strip_piece(dst, src, job->drs, job->scs, nr, nc8, job->stream);
        /* the last strip's columns past a multiple of 8 */
        for (int64_t r = 0; r < nr; r++)
            for (int64_t c = nc8; c < nc; c++)
                memcpy(dst + r * job->drs + c * 4, src + c * job->scs + r * 4, 4);
    }
    if (job->stream)
        _mm_sfence(); /* streaming stores are weakly ordered: publish them before returning */
}

/* Runs a 4-byte (batched) transpose as strips when the cpu has AVX2; false otherwise. */
static bool run_strips(const struct weft_iter *it)
{
    int nd = it->ndim;
    if (nd < 2 || it->strides[0][nd - 1] != 4 || it->strides[1][nd - 2] != 4)
        return false;
    int64_t rows = it->shape[nd - 2], cols = it->shape[nd - 1];
    if (rows < 16 || cols < 16 || !__builtin_cpu_supports("avx2"))
        return false;
    struct strip_job job = {
        .it = it,
        .rows = rows,
        .cols = cols,
        .row_pieces = (rows + STRIP_ROWS - 1) / STRIP_ROWS,
        .col_strips = (cols + STRIP_COLS - 1) / STRIP_COLS,
        .drs = it->strides[0][nd - 2],
        .scs = it->strides[1][nd - 1],
    };
    /* Streaming stores need 32-byte aligned rows, and only pay off past the caches. */
    bool aligned = (uintptr_t)it->data[0] % 32 == 0 && job.drs % 32 == 0;
    for (int k = 0; k < nd - 2; k++)
        aligned = aligned && it->strides[0][k] % 32 == 0;
    job.stream = aligned && it->numel * 4 >= STREAM_MIN_BYTES;
    int64_t units = it->numel / (rows * cols) * job.col_strips * job.row_pieces;
    int64_t grain = CPU_PARALLEL_GRAIN / (STRIP_COLS * STRIP_ROWS);
    cpu_parallel_for(units, grain > 0 ? grain : 1, strip_pieces, &job);
    return true;
}
#endif

/* ---- the kernel ------------------------------------------------------------------------- */

static int copy_same_dtype(const struct weft_iter *it, size_t size)
{
    if (it->ndim <= 1 && (it->ndim == 0 || (it->strides[0][0] == (int64_t)size &&
                                             it->strides[1][0] == (int64_t)size))) {
        parallel_memcpy(it->data[0], it->data[1], it->numel * (int64_t)size);
        return 0;
    }
#ifdef HAVE_AVX2_STRIPS
    if (size == 4 && run_strips(it))
        return 0;
#endif
    struct transpose_job job;
    if (plan_transpose(it, size, &job)) {
        run_transpose(&job);
        return 0;
    }
    weft_iter_loop_fn move = move_for_size(size);
    if (!move)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "copy: no mover for %zu-byte elements", size);
    cpu_iter_parallel(it, move, NULL);
    return 0;
}

int cpu_copy_kernel(const struct weft_op_call *call)
{
    weft_tensor *dst = call->out[0];
    const weft_tensor *src = call->in[0];
    const weft_tensor *ops[2] = {dst, src};
    struct weft_iter it;
    if (weft_iter_init(&it, 2, ops) != 0)
        return weft_error_code();
    if (it.numel == 0)
        return 0;
    if (dst->dtype == src->dtype)
        return copy_same_dtype(&it, weft_dtype_size(dst->dtype));
    convert_fn fn = convert_table[src->dtype][dst->dtype];
    if (!fn)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "copy: no conversion from %s to %s",
                              weft_dtype_name(src->dtype), weft_dtype_name(dst->dtype));
    struct convert_job job = {fn, run_table[src->dtype][dst->dtype],
                              (int64_t)weft_dtype_size(dst->dtype),
                              (int64_t)weft_dtype_size(src->dtype)};
    cpu_iter_parallel(&it, convert_loop, &job);
    return 0;
}
