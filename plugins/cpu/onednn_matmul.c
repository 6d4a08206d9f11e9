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
 * Packed B: given B in a plain layout, oneDNN's bf16 brgemm packs it (pairs of rows
 * interleaved for vdpbf16ps) inside the call, as its threads reach each block. Where A is
 * tall (a Linear's forward x W^T and its dX = dY W: M tokens against K and N of a few
 * hundred features), reordering B first into the layout the primitive prefers
 * (format_tag_any) and multiplying that was faster, the reorder included: at 2 threads of
 * an AVX512_BF16 Zen 5, 4096 x 384 x 1152 took 4.34 ms against 5.19, 4096 x 768 x 3072
 * 23.7 against 26.8, 4096 x 1536 x 384 5.95 against 6.33 (medians of 20, a direct oneDNN
 * harness). Where B is the tall operand (dW = dY^T X: K is the tokens) or the product is
 * small (attention's blocks), the reorder cost as much as it saved or more, so only
 * products with M >= PACK_B_MIN_M and M >= K take it. The packed copy is B's size, taken
 * from the caching allocator for the call. float32's primitive (gemm.c: NT products with
 * K >= 512) was tried the same way: against dnnl_sgemm it gained 2-9% on two of GPT-2's
 * shapes and lost 4-5% on 4096 x 768 x 2304 and 4096 x 384 x 1536, so it is not packed.
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
    dnnl_memory_t a, b, c, scratch, b_packed;
    dnnl_stream_t stream;
    int busy;
};

/* b_packed_md and reorder (B's plain layout to it): made where B is packed, else NULL.
 * packed_bytes: the size of the packed copy a call makes. */
struct matmul_prim {
    struct matmul_key key;
    dnnl_memory_desc_t a_md, b_md, c_md, scratch_md, b_packed_md;
    size_t scratch_bytes, packed_bytes;
    dnnl_primitive_t prim; /* NULL: empty slot */
    dnnl_primitive_t reorder;
    struct matmul_exec exec[MATMUL_EXEC_THREADS];
};

/* Products whose B is reordered first (see the top): bfloat16, A at least this tall and
 * no narrower than deep. */
#define PACK_B_MIN_M 1024
static bool packs_b(const struct matmul_key *k)
{
    return k->dtype == dnnl_bf16 && k->M >= PACK_B_MIN_M && k->M >= k->K;
}

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

/* A primitive attribute asking for a user scratchpad (see the top); NULL on failure. */
static dnnl_primitive_attr_t user_scratchpad_attr(dnnl_status_t *st)
{
    dnnl_primitive_attr_t attr = NULL;
    if ((*st = dnnl_primitive_attr_create(&attr)) != dnnl_success)
        return NULL;
    if ((*st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) !=
        dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

/* p->reorder from B's plain layout to packed (the matmul's choice), when it has no
 * scratchpad of its own; otherwise none, and *packed_ok false. */
static dnnl_status_t make_reorder(struct matmul_prim *p, dnnl_engine_t engine,
                                  const dnnl_memory_desc_t *packed, bool *packed_ok)
{
    dnnl_status_t st;
    dnnl_primitive_attr_t attr = user_scratchpad_attr(&st);
    if (!attr)
        return st;
    dnnl_primitive_desc_t rpd = NULL;
    st = dnnl_reorder_primitive_desc_create(&rpd, &p->b_md, engine, packed, engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return st;
    const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
    *packed_ok = !scratch || dnnl_memory_desc_get_size(scratch) == 0;
    if (*packed_ok) {
        p->b_packed_md = *packed;
        p->packed_bytes = dnnl_memory_desc_get_size(packed);
        st = dnnl_primitive_create(&p->reorder, rpd);
    }
    dnnl_primitive_desc_destroy(rpd);
    return st;
}

/* The matmul's descriptor for p's operands, B packed (format_tag_any) or as stored. */
static dnnl_status_t make_matmul_pd(dnnl_primitive_desc_t *pd, const struct matmul_prim *p,
                                    dnnl_engine_t engine, bool pack)
{
    dnnl_status_t st;
    dnnl_memory_desc_t b_any;
    if (pack && (st = dnnl_memory_desc_init_by_tag(&b_any, 2, p->b_md.dims, p->b_md.data_type,
                                                   dnnl_format_tag_any)) != dnnl_success)
        return st;
    dnnl_matmul_desc_t desc;
    if ((st = dnnl_matmul_desc_init(&desc, &p->a_md, pack ? &b_any : &p->b_md, NULL,
                                    &p->c_md)) != dnnl_success)
        return st;
    dnnl_primitive_attr_t attr = user_scratchpad_attr(&st);
    if (!attr)
        return st;
    st = dnnl_primitive_desc_create(pd, &desc, attr, engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Fills p (descriptors, primitive, and B's reorder where it packs B) for key; dnnl status.
 * Needs prims_lock. */
static dnnl_status_t make_prim(struct matmul_prim *p, const struct matmul_key *k)
{
    dnnl_status_t st;
    dnnl_engine_t engine = cpu_onednn_engine(&st);
    if (!engine)
        return st;
    p->key = *k;
    p->prim = NULL;
    p->reorder = NULL;
    p->packed_bytes = 0;
    dnnl_data_type_t dt = (dnnl_data_type_t)k->dtype;
    if ((st = matrix_md(&p->a_md, k->M, k->K, k->lda, k->trans_a, dt)) != dnnl_success ||
        (st = matrix_md(&p->b_md, k->K, k->N, k->ldb, k->trans_b, dt)) != dnnl_success ||
        (st = matrix_md(&p->c_md, k->M, k->N, k->ldc, false, (dnnl_data_type_t)k->c_dtype)) !=
            dnnl_success)
        return st;
    dnnl_primitive_desc_t pd = NULL;
    bool pack = packs_b(k);
    if ((st = make_matmul_pd(&pd, p, engine, pack)) != dnnl_success)
        return st;
    /* packed only where its layout differs (an "any" that chose B's own layout is B's
     * primitive already) and the reorder needs no scratchpad; else remade for plain B */
    const dnnl_memory_desc_t *packed =
        pack ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    bool remake = pack && !packed;
    if (packed && !dnnl_memory_desc_equal(packed, &p->b_md)) {
        if ((st = make_reorder(p, engine, packed, &pack)) != dnnl_success)
            goto fail;
        remake = !pack;
    }
    if (remake) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
        if ((st = make_matmul_pd(&pd, p, engine, false)) != dnnl_success)
            return st;
    }
    const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
    if (scratch)
        p->scratch_md = *scratch;
    st = dnnl_primitive_create(&p->prim, pd);
fail:
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success && p->reorder) {
        dnnl_primitive_destroy(p->reorder);
        p->reorder = NULL;
    }
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
    tmp.reorder = NULL;
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
    void *scratch_buf = NULL, *packed_buf = NULL;
    if (p->scratch_bytes > 0 && !(scratch_buf = cpu_alloc(0, p->scratch_bytes)))
        st = dnnl_out_of_memory;
    if (p->reorder && st == dnnl_success && !(packed_buf = cpu_alloc(0, p->packed_bytes)))
        st = dnnl_out_of_memory;
    if (st == dnnl_success &&
        (st = bind_memory(&e->a, &p->a_md, engine, (void *)A)) == dnnl_success &&
        (st = bind_memory(&e->b, &p->b_md, engine, (void *)B)) == dnnl_success &&
        (st = bind_memory(&e->c, &p->c_md, engine, C)) == dnnl_success &&
        (!scratch_buf ||
         (st = bind_memory(&e->scratch, &p->scratch_md, engine, scratch_buf)) == dnnl_success) &&
        (!packed_buf ||
         (st = bind_memory(&e->b_packed, &p->b_packed_md, engine, packed_buf)) == dnnl_success) &&
        (e->stream || (st = dnnl_stream_create(&e->stream, engine, dnnl_stream_default_flags)) ==
                          dnnl_success)) {
        if (packed_buf) {
            dnnl_exec_arg_t pack[2] = {{DNNL_ARG_FROM, e->b}, {DNNL_ARG_TO, e->b_packed}};
            st = dnnl_primitive_execute(p->reorder, e->stream, 2, pack);
        }
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a},
                                   {DNNL_ARG_WEIGHTS, packed_buf ? e->b_packed : e->b},
                                   {DNNL_ARG_DST, e->c},
                                   {DNNL_ARG_SCRATCHPAD, e->scratch}};
        if (st == dnnl_success)
            st = dnnl_primitive_execute(p->prim, e->stream, scratch_buf ? 4 : 3, args);
        if (st == dnnl_success)
            st = dnnl_stream_wait(e->stream);
    }
    cpu_free(0, scratch_buf, p->scratch_bytes);
    cpu_free(0, packed_buf, p->packed_bytes);
    if (e == &local) {
        if (local.stream)
            dnnl_stream_destroy(local.stream);
        dnnl_memory_t m[5] = {local.a, local.b, local.c, local.scratch, local.b_packed};
        for (int i = 0; i < 5; i++)
            if (m[i])
                dnnl_memory_destroy(m[i]);
    } else {
        __atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
    }
    if (tmp.prim)
        dnnl_primitive_destroy(tmp.prim);
    if (tmp.reorder)
        dnnl_primitive_destroy(tmp.reorder);
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
