/* plugins/cpu/onednn_matmul.c: GEMM through oneDNN's matmul primitive, for bfloat16 and
 * for the float32 products where it beats dnnl_sgemm.
 *
 * bfloat16: oneDNN 2.6 has no C sgemm-style entry (dnnl_gemm_bf16bf16f32 is C++ only), so
 * each product is a matmul primitive: bf16 x bf16 accumulated in float32, written once as
 * bf16 (AVX512_BF16's vdpbf16ps where the processor has it, oneDNN's emulation on older
 * AVX-512, a reference loop elsewhere). Without oneDNN in the build the caller uses its
 * plain loop (float accumulator).
 *
 * float32: dnnl_sgemm packs a transposed B on every call; the matmul primitive's brgemm
 * kernels read it in place. On the MLP's forward products (x W^T, K = 784) the primitive
 * was 15-30% faster at 2 threads and even at 1 (gemm.c says where it is used and the
 * figures); on the other transposes it was up to 15% slower, so gemm.c keeps dnnl_sgemm
 * there.
 *
 * Creating a primitive costs tens of microseconds, so primitives are kept per dtype and
 * shape (transposes, M, N, K, leading dims), as gemm.c keeps its per-shape choice.
 *
 * Threads: batched products run one primitive from several threads at once. oneDNN's
 * default, library-managed scratchpad is one global buffer in Debian's build (not built
 * for concurrent execution), so two executions overwrote each other's partial sums (1 run
 * in 6 of a [2, 70, 8] x [2, 8, 130] product came out wrong); every primitive asks for a
 * user scratchpad and every call brings its own, from the plugin's caching allocator. */
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_HAVE_ONEDNN
#include "onednn_engine.h"
#endif

#include "cpu.h"

#ifdef WEFT_HAVE_ONEDNN

/* All ints, no padding: keys compare with memcmp (and hash bytewise). dtype (A's and B's)
 * and c_dtype (C's) are dnnl_data_type_t; threads the OpenMP threads the caller would give
 * oneDNN, which splits the work for that many when it makes the primitive. */
struct matmul_key {
    int dtype, c_dtype, threads, trans_a, trans_b, M, N, K, lda, ldb, ldc;
};

/* Memory objects and a stream, kept per primitive and calling thread (OpenMP's thread
 * number: batched products and attention's blocks run one primitive from several threads)
 * and pointed at each call's buffers: making them per call cost 1.7 us of a 64^3 bf16
 * product's 4.7. busy: taken by a call; a call that finds it taken (two program threads
 * outside OpenMP have the same number) makes its own. */
#define MATMUL_EXEC_THREADS 16
struct matmul_exec {
    dnnl_memory_t a, b, c, scratch;
    dnnl_stream_t stream;
    int busy;
};

struct matmul_prim {
    struct matmul_key key;
    dnnl_memory_desc_t a_md, b_md, c_md, scratch_md;
    size_t scratch_bytes;
    dnnl_primitive_t prim; /* NULL: empty slot */
    struct matmul_exec exec[MATMUL_EXEC_THREADS];
};

/* Shapes beyond this many get a primitive made and destroyed per call: a training run has
 * a few dozen (its Linears' products, and the block products of bfloat16 attention,
 * attention_bf16.inc); a program with more pays the creation cost, nothing else. The
 * slots are an open-addressed table on the key's hash, so a lookup stays a memcmp or two. */
#define MATMUL_PRIMS 256
static struct matmul_prim prims[MATMUL_PRIMS];
static int prims_used;
static pthread_mutex_t prims_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned key_slot(const struct matmul_key *k)
{
    const unsigned char *b = (const unsigned char *)k;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 16777619u;
    return h % MATMUL_PRIMS;
}

/* Logical [rows, cols] matrix stored row-major with leading dim ld, read
 * transposed when trans. */
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int ld,
                               bool trans, dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* Fills p (descriptors and primitive) for key; dnnl status. Needs prims_lock. */
static dnnl_status_t make_prim(struct matmul_prim *p, const struct matmul_key *k)
{
    dnnl_status_t st;
    dnnl_engine_t engine = cpu_onednn_engine(&st);
    if (!engine)
        return st;
    p->key = *k;
    p->prim = NULL;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_data_type_t dt = (dnnl_data_type_t)k->dtype;
    if ((st = matrix_md(&p->a_md, k->M, k->K, k->lda, k->trans_a, dt)) != dnnl_success ||
        (st = matrix_md(&p->b_md, k->K, k->N, k->ldb, k->trans_b, dt)) != dnnl_success ||
        (st = matrix_md(&p->c_md, k->M, k->N, k->ldc, false, (dnnl_data_type_t)k->c_dtype)) !=
            dnnl_success ||
        (st = dnnl_matmul_desc_init(&desc, &p->a_md, &p->b_md, NULL, &p->c_md)) != dnnl_success)
        return st;
    dnnl_primitive_attr_t attr = NULL;
    if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success)
        return st;
    st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return st;
    const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
    if (scratch)
        p->scratch_md = *scratch;
    st = dnnl_primitive_create(&p->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* The cached primitive for k, or one made into *tmp (the caller destroys tmp->prim). */
static struct matmul_prim *find_prim(const struct matmul_key *k, struct matmul_prim *tmp,
                                     dnnl_status_t *st)
{
    *st = dnnl_success;
    pthread_mutex_lock(&prims_lock);
    unsigned i = key_slot(k);
    while (prims[i].prim) { /* ends: at most 3/4 of the slots are taken */
        if (memcmp(&prims[i].key, k, sizeof *k) == 0) {
            pthread_mutex_unlock(&prims_lock);
            return &prims[i];
        }
        i = (i + 1) % MATMUL_PRIMS;
    }
    struct matmul_prim *p = NULL;
    if (prims_used < MATMUL_PRIMS * 3 / 4) { /* i: the key's empty slot */
        *st = make_prim(&prims[i], k);
        if (*st == dnnl_success) {
            p = &prims[i];
            prims_used++;
        } else {
            prims[i].prim = NULL;
        }
    } else {
        *st = make_prim(tmp, k);
        if (*st == dnnl_success)
            p = tmp;
    }
    pthread_mutex_unlock(&prims_lock);
    return p;
}

/* *m pointed at data: made for md the first time, its handle moved after. */
static dnnl_status_t bind_memory(dnnl_memory_t *m, const dnnl_memory_desc_t *md,
                                 dnnl_engine_t engine, void *data)
{
    if (*m)
        return dnnl_memory_set_data_handle(*m, data);
    return dnnl_memory_create(m, md, engine, data);
}

/* C = op(A) op(B) for key k's shape and dtype; a dnnl status. */
static dnnl_status_t run_matmul(const struct matmul_key *k, const void *A, const void *B, void *C)
{
    struct matmul_prim tmp; /* make_prim fills what a call reads (not exec: never tmp's) */
    tmp.prim = NULL;
    dnnl_status_t st;
    struct matmul_prim *p = find_prim(k, &tmp, &st);
    if (!p)
        return st;
    int t = 0;
#ifdef _OPENMP
    t = omp_get_thread_num();
#endif
    struct matmul_exec local = {0}, *e = &local;
    if (p != &tmp && t < MATMUL_EXEC_THREADS &&
        !__atomic_exchange_n(&p->exec[t].busy, 1, __ATOMIC_ACQUIRE))
        e = &p->exec[t];
    dnnl_engine_t engine = cpu_onednn_engine(&st); /* made with p */
    void *scratch_buf = NULL;
    if (p->scratch_bytes > 0 && !(scratch_buf = cpu_alloc(0, p->scratch_bytes)))
        st = dnnl_out_of_memory;
    if (st == dnnl_success &&
        (st = bind_memory(&e->a, &p->a_md, engine, (void *)A)) == dnnl_success &&
        (st = bind_memory(&e->b, &p->b_md, engine, (void *)B)) == dnnl_success &&
        (st = bind_memory(&e->c, &p->c_md, engine, C)) == dnnl_success &&
        (!scratch_buf ||
         (st = bind_memory(&e->scratch, &p->scratch_md, engine, scratch_buf)) == dnnl_success) &&
        (e->stream || (st = dnnl_stream_create(&e->stream, engine, dnnl_stream_default_flags)) ==
                          dnnl_success)) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a},
                                   {DNNL_ARG_WEIGHTS, e->b},
                                   {DNNL_ARG_DST, e->c},
                                   {DNNL_ARG_SCRATCHPAD, e->scratch}};
        st = dnnl_primitive_execute(p->prim, e->stream, scratch_buf ? 4 : 3, args);
        if (st == dnnl_success)
            st = dnnl_stream_wait(e->stream);
    }
    cpu_free(0, scratch_buf, p->scratch_bytes);
    if (e == &local) {
        if (local.stream)
            dnnl_stream_destroy(local.stream);
        dnnl_memory_t m[4] = {local.a, local.b, local.c, local.scratch};
        for (int i = 0; i < 4; i++)
            if (m[i])
                dnnl_memory_destroy(m[i]);
    } else {
        __atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
    }
    if (tmp.prim)
        dnnl_primitive_destroy(tmp.prim);
    return st;
}

/* The product g (a struct cpu_gemm or cpu_gemm_bf16) with operands of dtype dt and C of
 * c_dt: 0, or an error that names the dtype (what) and the shape. */
#define RUN_PRODUCT(dt, c_dt, what, g)                                                        \
    do {                                                                                      \
        struct matmul_key k = {(dt),     (c_dt),   cpu_run_threads(), (g)->trans_a,           \
                               (g)->trans_b, (g)->M, (g)->N,          (g)->K,                 \
                               (g)->lda, (g)->ldb, (g)->ldc};                                 \
        dnnl_status_t st = run_matmul(&k, (g)->A, (g)->B, (g)->C);                            \
        if (st == dnnl_success)                                                               \
            return 0;                                                                         \
        return cpu_onednn_error(st, "matmul: oneDNN's " what " matmul for %d x %d x %d",      \
                                (g)->M, (g)->N, (g)->K);                                      \
    } while (0)

int cpu_gemm_bf16(const struct cpu_gemm_bf16 *g)
{
    RUN_PRODUCT(dnnl_bf16, g->c_f32 ? dnnl_f32 : dnnl_bf16, "bfloat16", g);
}

int cpu_sgemm_onednn_matmul(const struct cpu_gemm *g)
{
    RUN_PRODUCT(dnnl_f32, dnnl_f32, "float32", g);
}

bool cpu_gemm_bf16_available(void)
{
    return true;
}

#else

int cpu_gemm_bf16(const struct cpu_gemm_bf16 *g)
{
    (void)g;
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                          "matmul: this weft-cpu was built without oneDNN, which its bfloat16 "
                          "GEMM needs");
}

bool cpu_gemm_bf16_available(void)
{
    return false;
}

#endif
