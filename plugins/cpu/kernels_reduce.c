/* plugins/cpu/kernels_reduce.c: sum, prod, mean, var, max/min (with indices),
 * argmax/argmin, all/any over the trailing dims of a strided input.
 *
 * The front end hands us the input with its k reduced dims last and an output holding
 * the kept dims. Outputs are computed in groups:
 *  - line mode: a group is one output; its reduced elements are walked line by line
 *    along the innermost reduced dim (a contiguous, vectorised loop in the common case);
 *  - column mode: when a kept dim lies closer together in memory than every reduced dim
 *    (sum over dim 0 of a contiguous [N, M]), a group is a block of up to CW_MAX
 *    neighbouring outputs along that dim and every reduced position adds one row of the
 *    block into its accumulators, so memory is read in long runs, not once per output.
 * Floating sums are pairwise within a line and cascaded across lines and rows, so their
 * error grows with log(n) rather than n (PyTorch's cascade sum does the same). Integer
 * sums and products wrap in 64 bits like PyTorch's int64 accumulation. With fewer groups
 * than threads the reduced range is split into chunks whose partials combine in order,
 * which keeps "first occurrence" and NaN rules of max/min exact. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#ifdef _OPENMP
#define OMP_SIMD _Pragma("omp simd")
#else
#define OMP_SIMD
#endif

#define CW_MAX 2048 /* outputs per column-mode group: each row is read in runs this long */
#define RB 16       /* rows summed plainly before entering the cascade */
#define MM_LANES 16 /* independent running extremes in a contiguous max/min line */
#define PW_LEAF 256 /* pairwise summation stops splitting below this length */
#define PW_LANES 32 /* independent partial sums in a leaf (vector registers in flight) */

/* The element loops each op needs; MEAN reuses SUM, VAR runs VSUM then VSQ. */
enum rop { R_SUM, R_PROD, R_MAX, R_MIN, R_ALL, R_ANY, R_VSUM, R_VSQ, R_COUNT };

/* One partial result. Floating kinds keep their value in v.f (a float partial is widened
 * exactly), integer kinds in v.i / v.u. */
struct racc {
    union {
        double f;
        int64_t i;
        uint64_t u;
    } v;
    double mean; /* VSQ: the mean this output's deviations are taken from */
    int64_t idx; /* MAX/MIN: position of v along the reduced dim */
};

/* The reduced positions: dims outermost first, byte strides. */
struct rspace {
    int nr;
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
};

struct rpos {
    int64_t idx[WEFT_MAX_DIMS];
    int64_t off;
};

static inline void rpos_seek(const struct rspace *rs, struct rpos *pos, int64_t r)
{
    pos->off = 0;
    for (int d = rs->nr - 1; d >= 0; d--) {
        pos->idx[d] = r % rs->shape[d];
        r /= rs->shape[d];
        pos->off += pos->idx[d] * rs->stride[d];
    }
}

/* Carries an index that reached the end of dim d into the dims outside it. */
static inline void rpos_carry(const struct rspace *rs, struct rpos *pos, int d)
{
    for (; d >= 0; d--) {
        if (pos->idx[d] < rs->shape[d])
            return;
        pos->off -= rs->stride[d] * rs->shape[d];
        pos->idx[d] = 0;
        if (d > 0) {
            pos->idx[d - 1]++;
            pos->off += rs->stride[d - 1];
        }
    }
}

static inline void rpos_next(const struct rspace *rs, struct rpos *pos)
{
    int last = rs->nr - 1;
    pos->idx[last]++;
    pos->off += rs->stride[last];
    rpos_carry(rs, pos, last);
}

/* n positions forward, staying within the current innermost line or ending on it. */
static inline void rpos_advance(const struct rspace *rs, struct rpos *pos, int64_t n)
{
    int last = rs->nr - 1;
    pos->idx[last] += n;
    pos->off += n * rs->stride[last];
    rpos_carry(rs, pos, last);
}

/* ---- typed element loops, written once per family and expanded per dtype ------------- */

typedef void (*line_fn)(struct racc *a, const char *p, int64_t stride, int64_t n);
/* Column mode: w outputs whose elements are cs bytes apart; scratch holds
 * (nlevels + 2) * w * 8 bytes (accumulators and the cascade's levels). */
typedef void (*block_fn)(struct racc *acc, const char *p, int64_t cs, int w,
                         const struct rspace *rs, int64_t r0, int64_t r1, void *scratch,
                         int nlevels);

static inline bool red_isnan_f(float x) { return isnan(x); }
static inline bool red_isnan_d(double x) { return isnan(x); }
static inline bool red_isnan_i(int64_t x) { (void)x; return false; }
#define RED_ISNAN(x) _Generic((x), float: red_isnan_f, double: red_isnan_d, default: red_isnan_i)(x)

#define IS_FP(C) _Generic((C)0, float: 1, double: 1, default: 0)
/* Sum/product accumulator: float for 16/32-bit floats, double, or wrapping 64-bit. */
#define SUM_ACC(C)                                                                            \
    __typeof__(_Generic((C)0, float: (float)0, double: (double)0, default: (uint64_t)0))
/* Max/min value: the compute type for floats, int64 for bool and integers. */
#define MM_VAL(C)                                                                             \
    __typeof__(_Generic((C)0, float: (float)0, double: (double)0, default: (int64_t)0))
#define RACC_SET(a, A, val)                                                                   \
    do {                                                                                      \
        if (IS_FP(A))                                                                         \
            (a)->v.f = (double)(val);                                                         \
        else                                                                                  \
            (a)->v.i = (int64_t)(val);                                                        \
    } while (0)

#define MAP_PLAIN(A, x, m) ((void)(m), (A)(x))
#define MAP_SQDEV(A, x, m) (((double)(x) - (m)) * ((double)(x) - (m)))
#define BETTER_GT(a, b) ((a) > (b))
#define BETTER_LT(a, b) ((a) < (b))

/* Each family once per dtype: FAMILY_<dtype>_line and FAMILY_<dtype>_block. */
#define FAMILY sum
#define A SUM_ACC(C)
#define MAP MAP_PLAIN
#define CPU_KERNEL_INC "reduce_sum.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC
#undef A
#undef MAP
#undef FAMILY
#define FAMILY prod
#define A SUM_ACC(C)
#define CPU_KERNEL_INC "reduce_prod.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC
#undef A
#undef FAMILY
#define FAMILY max
#define V MM_VAL(C)
#define BETTER BETTER_GT
#define CPU_KERNEL_INC "reduce_minmax.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC
#undef V
#undef BETTER
#undef FAMILY
#define FAMILY min
#define V MM_VAL(C)
#define BETTER BETTER_LT
#define CPU_KERNEL_INC "reduce_minmax.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC
#undef V
#undef BETTER
#undef FAMILY
#define FAMILY all
#define IS_ALL 1
#define CPU_KERNEL_INC "reduce_logic.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC
#undef IS_ALL
#undef FAMILY
#define FAMILY any
#define IS_ALL 0
#define CPU_KERNEL_INC "reduce_logic.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC
#undef IS_ALL
#undef FAMILY
#define FAMILY vsum
#define A double
#define MAP MAP_PLAIN
#define CPU_KERNEL_INC "reduce_sum.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC
#undef A
#undef MAP
#undef FAMILY
#define FAMILY vsq
#define A double
#define MAP MAP_SQDEV
#define CPU_KERNEL_INC "reduce_sum.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC
#undef A
#undef MAP
#undef FAMILY

struct rfns {
    line_fn line;
    block_fn block;
};

/* name is an argument here, so it is expanded before pasting as PER_DTYPE's is: the bool
 * dtype's functions are sum__Bool_line and so on. */
#define RFN(family, name, part) CPU_CAT(CPU_CAT(CPU_CAT(family, _), name), part)
#define RFNS(family, name, id) [id] = {RFN(family, name, _line), RFN(family, name, _block)},
#define TAB_SUM(name, id, T, C) RFNS(sum, name, id)
#define TAB_PROD(name, id, T, C) RFNS(prod, name, id)
#define TAB_MAX(name, id, T, C) RFNS(max, name, id)
#define TAB_MIN(name, id, T, C) RFNS(min, name, id)
#define TAB_ALL(name, id, T, C) RFNS(all, name, id)
#define TAB_ANY(name, id, T, C) RFNS(any, name, id)
#define TAB_VSUM(name, id, T, C) RFNS(vsum, name, id)
#define TAB_VSQ(name, id, T, C) RFNS(vsq, name, id)
static const struct rfns rtable[R_COUNT][WEFT_DTYPE_COUNT] = {
    [R_SUM] = {WEFT_FOR_ALL_DTYPES(TAB_SUM)},
    [R_PROD] = {WEFT_FOR_ALL_DTYPES(TAB_PROD)},
    [R_MAX] = {WEFT_FOR_ALL_DTYPES(TAB_MAX)},
    [R_MIN] = {WEFT_FOR_ALL_DTYPES(TAB_MIN)},
    [R_ALL] = {WEFT_FOR_ALL_DTYPES(TAB_ALL)},
    [R_ANY] = {WEFT_FOR_ALL_DTYPES(TAB_ANY)},
    [R_VSUM] = {WEFT_FOR_FLOATING_DTYPES(TAB_VSUM)},
    [R_VSQ] = {WEFT_FOR_FLOATING_DTYPES(TAB_VSQ)},
};

/* ---- combining partials ----------------------------------------------------------------- */

/* a covers earlier positions than b; the result keeps a's mean. */
static struct racc racc_combine(int op, bool isfloat, struct racc a, struct racc b)
{
    switch (op) {
    case R_SUM:
    case R_VSUM:
    case R_VSQ:
        if (isfloat)
            a.v.f += b.v.f;
        else
            a.v.u += b.v.u;
        return a;
    case R_PROD:
        if (isfloat)
            a.v.f *= b.v.f;
        else
            a.v.u *= b.v.u;
        return a;
    case R_MAX:
    case R_MIN: {
        bool take;
        if (isfloat) {
            if (isnan(a.v.f))
                return a;
            take = isnan(b.v.f) || (op == R_MAX ? b.v.f > a.v.f : b.v.f < a.v.f);
        } else {
            take = op == R_MAX ? b.v.i > a.v.i : b.v.i < a.v.i;
        }
        if (take) {
            b.mean = a.mean;
            return b;
        }
        return a;
    }
    case R_ALL:
        a.v.i = a.v.i && b.v.i;
        return a;
    case R_ANY:
        a.v.i = a.v.i || b.v.i;
        return a;
    default:
        return a;
    }
}

static void racc_identity(int op, bool isfloat, struct racc *a)
{
    a->idx = 0;
    switch (op) {
    case R_PROD:
        if (isfloat)
            a->v.f = 1;
        else
            a->v.i = 1;
        return;
    case R_ALL:
        a->v.i = 1;
        return;
    default:
        if (isfloat)
            a->v.f = 0;
        else
            a->v.i = 0;
        return;
    }
}

/* Pairwise combination of a stream of partials: a binary counter whose level l holds the
 * combination of 2^l partials. Order is kept: higher levels hold earlier positions. */
struct rcascade {
    struct racc level[64];
    uint64_t used;
};

static void cascade_push(struct rcascade *c, int op, bool isfloat, struct racc a)
{
    int l = 0;
    while (c->used >> l & 1u) {
        a = racc_combine(op, isfloat, c->level[l], a);
        c->used &= ~(1ull << l);
        l++;
    }
    c->level[l] = a;
    c->used |= 1ull << l;
}

static struct racc cascade_result(const struct rcascade *c, int op, bool isfloat)
{
    struct racc acc = {{0}, 0, 0};
    bool have = false;
    for (int l = 63; l >= 0; l--) {
        if (!(c->used >> l & 1u))
            continue;
        acc = have ? racc_combine(op, isfloat, acc, c->level[l]) : c->level[l];
        have = true;
    }
    return acc;
}

/* ---- the job: geometry, groups, phases ---------------------------------------------------- */

/* Kept dims other than the column dim: byte strides in the input and both outputs. */
struct ospace {
    int n;
    int64_t shape[WEFT_MAX_DIMS], in[WEFT_MAX_DIMS], o0[WEFT_MAX_DIMS], o1[WEFT_MAX_DIMS];
};

struct opos {
    int64_t idx[WEFT_MAX_DIMS];
    int64_t in, o0, o1;
};

struct rjob {
    int wop;         /* the weft op: decides how a result is written */
    int ops[2];      /* element loops per phase */
    int nphases;     /* 2 for var (mean, then squared deviations) */
    bool isfloat;    /* accumulator kind of SUM/PROD/MAX/MIN */
    enum weft_dtype out_dt;
    double correction;
    struct rfns fns[2];
    const char *in;
    char *out0, *out1;
    struct ospace os;
    struct rspace rs;
    int64_t R;
    bool columns;
    int64_t col_n, col_in, col_o0, col_o1; /* column dim: size, byte strides */
    int64_t cw;      /* outputs per group: up to CW_MAX in column mode, else 1 */
    int64_t nblk;    /* column blocks per kept position (1 in line mode) */
    int64_t ngroups;
    int nlevels;     /* cascade levels a column-mode group may need */
    int failed;      /* a thread could not get scratch memory */
};

static void opos_seek(const struct ospace *os, struct opos *pos, int64_t g)
{
    pos->in = pos->o0 = pos->o1 = 0;
    for (int d = os->n - 1; d >= 0; d--) {
        pos->idx[d] = g % os->shape[d];
        g /= os->shape[d];
        pos->in += pos->idx[d] * os->in[d];
        pos->o0 += pos->idx[d] * os->o0[d];
        pos->o1 += pos->idx[d] * os->o1[d];
    }
}

static void opos_next(const struct ospace *os, struct opos *pos)
{
    for (int d = os->n - 1; d >= 0; d--) {
        pos->idx[d]++;
        pos->in += os->in[d];
        pos->o0 += os->o0[d];
        pos->o1 += os->o1[d];
        if (pos->idx[d] < os->shape[d])
            return;
        pos->in -= os->in[d] * os->shape[d];
        pos->o0 -= os->o0[d] * os->shape[d];
        pos->o1 -= os->o1[d] * os->shape[d];
        pos->idx[d] = 0;
    }
}

/* Where group (kept position pos, column block blk) starts, and how many outputs it has. */
struct group {
    const char *in;
    char *o0, *o1;
    int w;
};

static struct group group_at(const struct rjob *job, const struct opos *pos, int64_t blk)
{
    struct group g;
    int64_t first = blk * job->cw;
    g.in = job->in + pos->in + first * job->col_in;
    g.o0 = job->out0 + pos->o0 + first * job->col_o0;
    g.o1 = job->out1 ? job->out1 + pos->o1 + first * job->col_o1 : NULL;
    g.w = (int)(job->columns && job->col_n - first < job->cw ? job->col_n - first : job->cw);
    return g;
}

/* Line mode: walks [r0, r1) as segments of innermost lines, cascading their partials. */
static void line_reduce(const struct rjob *job, int phase, const char *base, int64_t r0,
                        int64_t r1, struct racc *acc)
{
    const struct rspace *rs = &job->rs;
    int last = rs->nr - 1, op = job->ops[phase];
    int64_t len = rs->shape[last], s = rs->stride[last];
    line_fn line = job->fns[phase].line;
    double mean = acc->mean;
    struct rpos pos;
    rpos_seek(rs, &pos, r0);
    if (pos.idx[last] + (r1 - r0) <= len) { /* one segment: the common case */
        line(acc, base + pos.off, s, r1 - r0);
        acc->idx += r0;
        return;
    }
    struct rcascade c;
    c.used = 0;
    for (int64_t r = r0; r < r1;) {
        int64_t n = len - pos.idx[last];
        if (n > r1 - r)
            n = r1 - r;
        struct racc a = {{0}, mean, 0};
        line(&a, base + pos.off, s, n);
        a.idx += r;
        cascade_push(&c, op, job->isfloat, a);
        r += n;
        rpos_advance(rs, &pos, n);
    }
    *acc = cascade_result(&c, op, job->isfloat);
    acc->mean = mean;
}

/* One phase of one group over reduced positions [r0, r1); acc[] carries the means in. */
static void group_phase(const struct rjob *job, int phase, const struct group *g, int64_t r0,
                        int64_t r1, struct racc *acc, void *scratch)
{
    if (r0 >= r1) {
        for (int j = 0; j < g->w; j++)
            racc_identity(job->ops[phase], job->isfloat, &acc[j]);
        return;
    }
    if (job->columns)
        job->fns[phase].block(acc, g->in, job->col_in, g->w, &job->rs, r0, r1, scratch,
                              job->nlevels);
    else
        line_reduce(job, phase, g->in, r0, r1, acc);
}

static void set_means(const struct rjob *job, struct racc *acc, int w)
{
    for (int j = 0; j < w; j++)
        acc[j].mean = acc[j].v.f / (double)job->R;
}

static void store_from_i64(enum weft_dtype dt, void *p, int64_t v)
{
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        *(T *)p = (T)v;                                                                       \
        return;
        WEFT_FOR_INTEGRAL_DTYPES(CASE)
#undef CASE
    case WEFT_BOOL:
        *(uint8_t *)p = v != 0;
        return;
    default:
        cpu_store_from_double(dt, p, (double)v);
        return;
    }
}

static void finish_one(const struct rjob *job, const struct racc *a, char *o0, char *o1)
{
    switch (job->wop) {
    case WEFT_OP_SUM:
    case WEFT_OP_PROD:
        if (job->isfloat)
            cpu_store_from_double(job->out_dt, o0, a->v.f);
        else
            *(int64_t *)o0 = a->v.i;
        return;
    case WEFT_OP_MEAN:
        cpu_store_from_double(job->out_dt, o0, a->v.f / (double)job->R);
        return;
    case WEFT_OP_VAR: {
        double divisor = (double)job->R - job->correction;
        cpu_store_from_double(job->out_dt, o0, a->v.f / (divisor > 0 ? divisor : 0.0));
        return;
    }
    case WEFT_OP_MAX:
    case WEFT_OP_MIN:
        if (job->isfloat)
            cpu_store_from_double(job->out_dt, o0, a->v.f);
        else
            store_from_i64(job->out_dt, o0, a->v.i);
        if (o1)
            *(int64_t *)o1 = a->idx;
        return;
    case WEFT_OP_ARGMAX:
    case WEFT_OP_ARGMIN:
        *(int64_t *)o0 = a->idx;
        return;
    default: /* ALL, ANY */
        *(uint8_t *)o0 = a->v.i != 0;
        return;
    }
}

static void finish_group(const struct rjob *job, const struct group *g, const struct racc *acc)
{
    for (int j = 0; j < g->w; j++)
        finish_one(job, &acc[j], g->o0 + j * job->col_o0, g->o1 ? g->o1 + j * job->col_o1 : NULL);
}

/* Per-thread memory: accumulators for one group and the column kernels' scratch. */
struct work_mem {
    struct racc *acc;
    void *scratch;
};

static bool work_mem_get(struct rjob *job, struct work_mem *m)
{
    m->acc = calloc((size_t)job->cw, sizeof *m->acc);
    m->scratch = job->columns ? malloc((size_t)(job->nlevels + 2) * (size_t)job->cw * 8) : NULL;
    if (m->acc && (m->scratch || !job->columns))
        return true;
    free(m->acc);
    free(m->scratch);
    __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
    return false;
}

static void work_mem_put(struct work_mem *m)
{
    free(m->acc);
    free(m->scratch);
}

/* Groups [begin, end), each over the whole reduced range: the usual plan. */
static void run_groups(void *ctx, int64_t begin, int64_t end)
{
    struct rjob *job = ctx;
    struct work_mem mem;
    if (!work_mem_get(job, &mem))
        return;
    struct opos pos;
    opos_seek(&job->os, &pos, begin / job->nblk);
    int64_t blk = begin % job->nblk;
    for (int64_t gi = begin; gi < end; gi++) {
        struct group g = group_at(job, &pos, blk);
        memset(mem.acc, 0, (size_t)g.w * sizeof *mem.acc);
        for (int ph = 0; ph < job->nphases; ph++) {
            if (ph > 0)
                set_means(job, mem.acc, g.w);
            group_phase(job, ph, &g, 0, job->R, mem.acc, mem.scratch);
        }
        finish_group(job, &g, mem.acc);
        if (++blk == job->nblk) {
            blk = 0;
            opos_next(&job->os, &pos);
        }
    }
    work_mem_put(&mem);
}

/* Few groups, long reductions: every (group, chunk of the reduced range) is a task. */
struct chunked {
    struct rjob *job;
    int phase;
    int64_t nchunks;
    struct racc *part;      /* [chunk][group][cw] */
    const struct racc *fin; /* [group][cw]: the means going in */
};

static void run_chunks(void *ctx, int64_t begin, int64_t end)
{
    const struct chunked *ch = ctx;
    struct rjob *job = ch->job;
    struct work_mem mem;
    if (!work_mem_get(job, &mem))
        return;
    for (int64_t t = begin; t < end; t++) {
        int64_t gi = t % job->ngroups, c = t / job->ngroups;
        struct opos pos;
        opos_seek(&job->os, &pos, gi / job->nblk);
        struct group g = group_at(job, &pos, gi % job->nblk);
        struct racc *acc = ch->part + (c * job->ngroups + gi) * job->cw;
        memcpy(acc, ch->fin + gi * job->cw, (size_t)g.w * sizeof *acc);
        group_phase(job, ch->phase, &g, job->R * c / ch->nchunks, job->R * (c + 1) / ch->nchunks,
                    acc, mem.scratch);
    }
    work_mem_put(&mem);
}

static int out_of_memory(void)
{
    return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a reduction");
}

static int run_chunked(struct rjob *job, int64_t nchunks)
{
    size_t per = (size_t)job->ngroups * (size_t)job->cw;
    struct racc *part = calloc((size_t)nchunks * per, sizeof *part);
    struct racc *fin = calloc(per, sizeof *fin);
    if (!part || !fin) {
        free(part);
        free(fin);
        return out_of_memory();
    }
    struct chunked ch = {job, 0, nchunks, part, fin};
    for (int ph = 0; ph < job->nphases && !job->failed; ph++) {
        if (ph > 0)
            set_means(job, fin, (int)per);
        ch.phase = ph;
        cpu_parallel_for(job->ngroups * nchunks, 1, run_chunks, &ch);
        for (size_t k = 0; k < per; k++) {
            struct racc acc = part[k];
            for (int64_t c = 1; c < nchunks; c++)
                acc = racc_combine(job->ops[ph], job->isfloat, acc, part[c * per + k]);
            acc.mean = fin[k].mean;
            fin[k] = acc;
        }
    }
    struct opos pos;
    opos_seek(&job->os, &pos, 0);
    for (int64_t gi = 0, blk = 0; gi < job->ngroups && !job->failed; gi++) {
        struct group g = group_at(job, &pos, blk);
        finish_group(job, &g, fin + gi * job->cw);
        if (++blk == job->nblk) {
            blk = 0;
            opos_next(&job->os, &pos);
        }
    }
    free(part);
    free(fin);
    return job->failed ? out_of_memory() : 0;
}

static int64_t iabs64(int64_t x)
{
    return x < 0 ? -x : x;
}

/* Reduced dims: drop size 1, order by decreasing |stride| (memory order), merge. */
static void setup_reduced(struct rjob *job, const weft_tensor *in, int k, int64_t isz)
{
    struct rspace *rs = &job->rs;
    int n = 0;
    job->R = 1;
    for (int d = in->ndim - k; d < in->ndim; d++) {
        job->R *= in->shape[d];
        if (in->shape[d] == 1)
            continue;
        int at = n++;
        while (at > 0 && iabs64(rs->stride[at - 1]) < iabs64(in->stride[d] * isz)) {
            rs->shape[at] = rs->shape[at - 1];
            rs->stride[at] = rs->stride[at - 1];
            at--;
        }
        rs->shape[at] = in->shape[d];
        rs->stride[at] = in->stride[d] * isz;
    }
    /* Reordering and merging change which linear position an element has; that is safe
     * because the ops that report an index reduce a single dim. */
    int m = 0;
    for (int d = 0; d < n; d++) {
        if (m > 0 && rs->stride[m - 1] == rs->shape[d] * rs->stride[d]) {
            rs->shape[m - 1] *= rs->shape[d];
            rs->stride[m - 1] = rs->stride[d];
            continue;
        }
        rs->shape[m] = rs->shape[d];
        rs->stride[m] = rs->stride[d];
        m++;
    }
    if (m == 0) { /* a single element per output */
        rs->shape[0] = 1;
        rs->stride[0] = isz;
        m = 1;
    }
    rs->nr = m;
}

/* Kept dims: drop size 1, pick the column dim when one is denser than the reduction,
 * merge the rest where every operand allows. */
static void setup_kept(struct rjob *job, const weft_tensor *in, const weft_tensor *out0,
                       const weft_tensor *out1, int k, int64_t isz)
{
    int nk = in->ndim - k, n = 0;
    int64_t shape[WEFT_MAX_DIMS], sin[WEFT_MAX_DIMS], s0[WEFT_MAX_DIMS], s1[WEFT_MAX_DIMS];
    for (int d = 0; d < nk; d++) {
        if (in->shape[d] == 1)
            continue;
        shape[n] = in->shape[d];
        sin[n] = in->stride[d] * isz;
        s0[n] = out0->stride[d] * (int64_t)weft_dtype_size(out0->dtype);
        s1[n] = out1 ? out1->stride[d] * (int64_t)sizeof(int64_t) : 0;
        n++;
    }
    int col = -1;
    int64_t inner = iabs64(job->rs.stride[job->rs.nr - 1]);
    for (int d = 0; d < n && job->R > 1; d++)
        if (sin[d] != 0 && iabs64(sin[d]) < inner && (col < 0 || iabs64(sin[d]) < iabs64(sin[col])))
            col = d;
    job->columns = col >= 0;
    job->cw = 1;
    job->nblk = 1;
    if (job->columns) {
        job->col_n = shape[col];
        job->col_in = sin[col];
        job->col_o0 = s0[col];
        job->col_o1 = s1[col];
        job->cw = shape[col] < CW_MAX ? shape[col] : CW_MAX;
        job->nblk = (shape[col] + job->cw - 1) / job->cw;
    }
    struct ospace *os = &job->os;
    os->n = 0;
    job->ngroups = job->nblk;
    for (int d = 0; d < n; d++) {
        if (d == col)
            continue;
        job->ngroups *= shape[d];
        int m = os->n;
        if (m > 0 && os->in[m - 1] == shape[d] * sin[d] && os->o0[m - 1] == shape[d] * s0[d] &&
            os->o1[m - 1] == shape[d] * s1[d]) {
            os->shape[m - 1] *= shape[d];
            os->in[m - 1] = sin[d];
            os->o0[m - 1] = s0[d];
            os->o1[m - 1] = s1[d];
            continue;
        }
        os->shape[m] = shape[d];
        os->in[m] = sin[d];
        os->o0[m] = s0[d];
        os->o1[m] = s1[d];
        os->n++;
    }
}

static int setup_ops(struct rjob *job, int wop, enum weft_dtype dt)
{
    job->wop = wop;
    job->nphases = 1;
    job->isfloat = weft_dtype_is_floating(dt);
    switch (wop) {
    case WEFT_OP_SUM:
    case WEFT_OP_MEAN:
        job->ops[0] = R_SUM;
        break;
    case WEFT_OP_PROD:
        job->ops[0] = R_PROD;
        break;
    case WEFT_OP_VAR:
        job->ops[0] = R_VSUM;
        job->ops[1] = R_VSQ;
        job->nphases = 2;
        break;
    case WEFT_OP_MAX:
    case WEFT_OP_ARGMAX:
        job->ops[0] = R_MAX;
        break;
    case WEFT_OP_MIN:
    case WEFT_OP_ARGMIN:
        job->ops[0] = R_MIN;
        break;
    case WEFT_OP_ALL:
        job->ops[0] = R_ALL;
        break;
    case WEFT_OP_ANY:
        job->ops[0] = R_ANY;
        break;
    default:
        return weft_error_set(WEFT_ERR_RUNTIME, "reduce kernel called for op %s",
                              weft_op_name(wop));
    }
    for (int ph = 0; ph < job->nphases; ph++) {
        job->fns[ph] = rtable[job->ops[ph]][dt];
        if (!job->fns[ph].line)
            return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                                  "\"%s\" not implemented for '%s' on cpu", weft_op_name(wop),
                                  weft_dtype_torch_name(dt));
    }
    return 0;
}

static int check_call(const struct weft_op_call *call, int k)
{
    const weft_tensor *in = call->in[0];
    int nk = in->ndim - k;
    if (k < 0 || nk < 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "reduce kernel: %d reduced dims of a %d-dim input",
                              k, in->ndim);
    for (int o = 0; o < call->nout; o++) {
        const weft_tensor *out = call->out[o];
        if (out->ndim != nk || memcmp(out->shape, in->shape, (size_t)nk * sizeof(int64_t)) != 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "reduce kernel: output %d does not have the input's kept shape",
                                  o);
    }
    return 0;
}

int cpu_reduce_kernel(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out0 = call->out[0], *out1 = call->nout > 1 ? call->out[1] : NULL;
    int k = (int)call->ints[0];
    if (check_call(call, k) != 0)
        return weft_error_code();
    struct rjob job;
    memset(&job, 0, sizeof job);
    if (setup_ops(&job, call->op, in->dtype) != 0)
        return weft_error_code();
    job.out_dt = out0->dtype;
    job.correction = call->scalar[0];
    int64_t isz = (int64_t)weft_dtype_size(in->dtype);
    setup_reduced(&job, in, k, isz);
    if (weft_tensor_numel(out0) == 0)
        return 0;
    if (job.R == 0 && (job.ops[0] == R_MAX || job.ops[0] == R_MIN))
        return weft_error_set(WEFT_ERR_INDEX, "%s(): Expected reduction dim to have non-zero size.",
                              weft_op_name(call->op));
    setup_kept(&job, in, out0, out1, k, isz);
    /* a column group pushes one partial per RB rows into its cascade */
    for (job.nlevels = 2; (job.R / RB + 1) >> (job.nlevels - 2) != 0; job.nlevels++)
        ;
    job.in = weft_tensor_data(in);
    job.out0 = weft_tensor_data(out0);
    job.out1 = out1 ? weft_tensor_data(out1) : NULL;

    int64_t outputs = weft_tensor_numel(out0);
    int64_t work = outputs * (job.R > 0 ? job.R : 1);
    /* Chunks change the order of the sums: cut for the split, never for how many run. */
    int64_t threads = cpu_split_threads();
    if (work >= CPU_PARALLEL_GRAIN && threads > 1 && job.ngroups < 2 * threads) {
        int64_t nchunks = (2 * threads + job.ngroups - 1) / job.ngroups;
        if (nchunks > job.R / 64)
            nchunks = job.R / 64;
        if (nchunks >= 2)
            return run_chunked(&job, nchunks);
    }
    int64_t per_group = work / job.ngroups;
    int64_t grain = CPU_PARALLEL_GRAIN / (per_group > 0 ? per_group : 1);
    cpu_parallel_for(job.ngroups, grain > 0 ? grain : 1, run_groups, &job);
    return job.failed ? out_of_memory() : 0;
}
