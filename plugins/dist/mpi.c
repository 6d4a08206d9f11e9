/* plugins/dist/mpi.c: weft-dist-mpi.so, the communicator "mpi": host tensors over Open
 * MPI's non-blocking collectives (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather).
 *
 * Every weft dtype moves: the integers and floats as MPI's own types; bool as MPI_C_BOOL,
 * whose sum and max are a logical or and min a logical and, as torch reduces bools;
 * float16 and bfloat16, which MPI lacks, as a 2-byte type with user-defined reductions
 * that compute in float and round once per step.
 *
 * MPI counts are ints: larger buffers are split into several collectives (all_reduce,
 * broadcast) or described by a derived type (all_gather); one request waits for them all.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/half.h>
#include <weft/plugin.h>
#include <weft/version.h>

#include "dist_plugin.h"

struct mpi_group {
    struct dist_world world;
    MPI_Datatype half; /* 2 bytes, for float16 and bfloat16 */
    MPI_Op half_ops[2][3]; /* [f16, bf16][sum, max, min] */
};

/* One collective, possibly split in n MPI requests. */
struct mpi_req {
    const char *what;
    int n;
    MPI_Request r[];
};

/* ---- float16 and bfloat16 reductions ---------------------------------------------------- */

/* torch's max/min propagate NaN. */
static inline float red_sum(float a, float b) { return a + b; }
static inline float red_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }
static inline float red_min(float a, float b) { return (a < b || isnan(a)) ? a : b; }

#define HALF_OP(name, to_float, from_float, red)                                              \
    static void name(void *in, void *inout, int *len, MPI_Datatype *type)                     \
    {                                                                                         \
        (void)type;                                                                           \
        const uint16_t *a = in;                                                               \
        uint16_t *b = inout;                                                                  \
        for (int i = 0; i < *len; i++)                                                        \
            b[i] = from_float(red(to_float(a[i]), to_float(b[i])));                           \
    }
HALF_OP(f16_sum, weft_f16_to_float, weft_float_to_f16, red_sum)
HALF_OP(f16_max, weft_f16_to_float, weft_float_to_f16, red_max)
HALF_OP(f16_min, weft_f16_to_float, weft_float_to_f16, red_min)
HALF_OP(bf16_sum, weft_bf16_to_float, weft_float_to_bf16, red_sum)
HALF_OP(bf16_max, weft_bf16_to_float, weft_float_to_bf16, red_max)
HALF_OP(bf16_min, weft_bf16_to_float, weft_float_to_bf16, red_min)

static MPI_User_function *const half_fns[2][3] = {
    {f16_sum, f16_max, f16_min},
    {bf16_sum, bf16_max, bf16_min},
};

/* 0 sum, 1 max, 2 min (the front end never sends AVG). */
static int op_index(weft_reduce_op op)
{
    return op == WEFT_REDUCE_MAX ? 1 : op == WEFT_REDUCE_MIN ? 2 : 0;
}

/* The MPI type and op for dtype and op; false for a dtype weft does not have. */
static bool mpi_type_op(const struct mpi_group *g, enum weft_dtype dtype, weft_reduce_op op,
                        MPI_Datatype *type, MPI_Op *mop)
{
    static const MPI_Op plain[3] = {MPI_SUM, MPI_MAX, MPI_MIN};
    int k = op_index(op);
    *mop = plain[k];
    switch (dtype) {
    case WEFT_BOOL:
        *type = MPI_C_BOOL;
        *mop = k == 2 ? MPI_LAND : MPI_LOR;
        return true;
    case WEFT_U8: *type = MPI_UINT8_T; return true;
    case WEFT_I8: *type = MPI_INT8_T; return true;
    case WEFT_I16: *type = MPI_INT16_T; return true;
    case WEFT_I32: *type = MPI_INT32_T; return true;
    case WEFT_I64: *type = MPI_INT64_T; return true;
    case WEFT_F32: *type = MPI_FLOAT; return true;
    case WEFT_F64: *type = MPI_DOUBLE; return true;
    case WEFT_F16:
    case WEFT_BF16:
        *type = g->half;
        *mop = g->half_ops[dtype == WEFT_BF16][k];
        return true;
    default: return false;
    }
}

/* ---- requests --------------------------------------------------------------------------- */

static struct mpi_req *req_new(const char *what, size_t n)
{
    if (n > INT_MAX) {
        weft_error_set(WEFT_ERR_VALUE, "%s: too large for MPI", what);
        return NULL;
    }
    struct mpi_req *r = malloc(sizeof *r + n * sizeof(MPI_Request));
    if (!r) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        return NULL;
    }
    r->what = what;
    r->n = (int)n;
    for (size_t i = 0; i < n; i++)
        r->r[i] = MPI_REQUEST_NULL;
    return r;
}

/* After starting r->r[0 .. started) the next call failed with rc: the started ones cannot
 * be cancelled, so wait for them (the other ranks started them too) before failing. */
static void *req_failed(struct mpi_req *r, int started, int rc, const char *call)
{
    MPI_Waitall(started, r->r, MPI_STATUSES_IGNORE);
    dist_mpi_error(rc, r->what, call);
    free(r);
    return NULL;
}

static int mpi_test(void *group, void *request)
{
    (void)group;
    struct mpi_req *r = request;
    int flag = 0;
    int rc = MPI_Testall(r->n, r->r, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
        return dist_mpi_error(rc, r->what, "MPI_Testall");
    return flag ? 1 : 0;
}

static int mpi_wait(void *group, void *request)
{
    struct mpi_group *g = group;
    struct mpi_req *r = request;
    return dist_wait(&g->world, group, r->what, r, mpi_test, free);
}

/* ---- collectives ------------------------------------------------------------------------ */

/* Chunks of at most this many elements (or bytes), so counts fit MPI's int. */
#define CHUNK ((size_t)1 << 30)

static void *mpi_all_reduce(void *group, void *buffer, size_t count, enum weft_dtype dtype,
                            weft_device device, weft_reduce_op op)
{
    (void)device;
    struct mpi_group *g = group;
    MPI_Datatype type;
    MPI_Op mop;
    if (!mpi_type_op(g, dtype, op, &type, &mop)) {
        weft_error_set(WEFT_ERR_TYPE, "all_reduce: dtype %d is not a weft dtype", (int)dtype);
        return NULL;
    }
    size_t itemsize = weft_dtype_size(dtype);
    struct mpi_req *r = req_new("all_reduce", (count + CHUNK - 1) / CHUNK);
    if (!r)
        return NULL;
    for (int i = 0; i < r->n; i++) {
        size_t start = (size_t)i * CHUNK;
        size_t n = count - start < CHUNK ? count - start : CHUNK;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buffer + start * itemsize, (int)n, type,
                                mop, g->world.comm, &r->r[i]);
        if (rc != MPI_SUCCESS)
            return req_failed(r, i, rc, "MPI_Iallreduce");
    }
    return r;
}

static void *mpi_broadcast(void *group, void *buffer, size_t nbytes, weft_device device,
                           int root)
{
    (void)device;
    struct mpi_group *g = group;
    struct mpi_req *r = req_new("broadcast", (nbytes + CHUNK - 1) / CHUNK);
    if (!r)
        return NULL;
    for (int i = 0; i < r->n; i++) {
        size_t start = (size_t)i * CHUNK;
        size_t n = nbytes - start < CHUNK ? nbytes - start : CHUNK;
        int rc = MPI_Ibcast((char *)buffer + start, (int)n, MPI_BYTE, root, g->world.comm,
                            &r->r[i]);
        if (rc != MPI_SUCCESS)
            return req_failed(r, i, rc, "MPI_Ibcast");
    }
    return r;
}

/* A type of exactly nbytes bytes: CHUNK-byte blocks and the rest, so that one rank's
 * share is one element whatever its size. */
static int bytes_type(size_t nbytes, MPI_Datatype *type)
{
    MPI_Datatype block, blocks;
    int q = (int)(nbytes / CHUNK), rest = (int)(nbytes % CHUNK);
    int rc = MPI_Type_contiguous((int)CHUNK, MPI_BYTE, &block);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_contiguous(q, block, &blocks);
    if (rc == MPI_SUCCESS) {
        int lens[2] = {1, rest};
        MPI_Aint displs[2] = {0, (MPI_Aint)((size_t)q * CHUNK)};
        MPI_Datatype types[2] = {blocks, MPI_BYTE};
        rc = MPI_Type_create_struct(rest ? 2 : 1, lens, displs, types, type);
        MPI_Type_free(&blocks);
    }
    MPI_Type_free(&block);
    return rc == MPI_SUCCESS ? MPI_Type_commit(type) : rc;
}

static void *mpi_all_gather(void *group, const void *in, void *out, size_t nbytes,
                            weft_device device)
{
    (void)device;
    struct mpi_group *g = group;
    struct mpi_req *r = req_new("all_gather", 1);
    if (!r)
        return NULL;
    MPI_Datatype type = MPI_BYTE;
    int count = (int)nbytes;
    if (nbytes > INT_MAX) {
        int rc = bytes_type(nbytes, &type);
        if (rc != MPI_SUCCESS)
            return req_failed(r, 0, rc, "MPI_Type_create_struct");
        count = 1;
    }
    int rc = MPI_Iallgather(in, count, type, out, count, type, g->world.comm, &r->r[0]);
    if (type != MPI_BYTE)
        MPI_Type_free(&type); /* the started collective keeps what it needs */
    if (rc != MPI_SUCCESS)
        return req_failed(r, 0, rc, "MPI_Iallgather");
    return r;
}

static int mpi_barrier(void *group)
{
    return dist_world_barrier(&((struct mpi_group *)group)->world);
}

static void mpi_abort(void *group, int code)
{
    dist_world_abort(&((struct mpi_group *)group)->world, code);
}

static bool mpi_supports_device(void *group, int device_type)
{
    (void)group;
    return device_type == WEFT_DEVICE_CPU;
}

/* ---- the group ---------------------------------------------------------------------------- */

static void free_types(struct mpi_group *g)
{
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            if (g->half_ops[d][k] != MPI_OP_NULL)
                MPI_Op_free(&g->half_ops[d][k]);
    if (g->half != MPI_DATATYPE_NULL)
        MPI_Type_free(&g->half);
}

static void *mpi_open(const weft_options *options,
                      const struct weft_dist_env *env, int *rank, int *world_size)
{
    struct mpi_group *g = calloc(1, sizeof *g);
    if (!g) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "mpi: out of memory");
        return NULL;
    }
    if (dist_world_open(&g->world, "mpi", options, env) < 0) {
        free(g);
        return NULL;
    }
    g->half = MPI_DATATYPE_NULL;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            g->half_ops[d][k] = MPI_OP_NULL;
    int rc = MPI_Type_contiguous(2, MPI_BYTE, &g->half);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_commit(&g->half);
    for (int d = 0; d < 2 && rc == MPI_SUCCESS; d++)
        for (int k = 0; k < 3 && rc == MPI_SUCCESS; k++)
            rc = MPI_Op_create(half_fns[d][k], 1, &g->half_ops[d][k]);
    if (rc != MPI_SUCCESS) {
        dist_mpi_error(rc, "mpi", "creating the float16 reductions");
        free_types(g);
        dist_world_close(&g->world, g);
        free(g);
        return NULL;
    }
    *rank = g->world.rank;
    *world_size = g->world.size;
    return g;
}

static int mpi_close(void *group)
{
    struct mpi_group *g = group;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized && !g->world.stale)
        free_types(g);
    int rc = dist_world_close(&g->world, g);
    free(g);
    return rc;
}

#define STR_(x) #x
#define STR(x) STR_(x)

static const struct weft_communicator mpi_communicator = {
    .base = WEFT_VTABLE(WEFT_KIND_COMMUNICATOR, "mpi", struct weft_communicator),
    .description = "Open MPI " STR(OMPI_MAJOR_VERSION) "." STR(OMPI_MINOR_VERSION) "." STR(
        OMPI_RELEASE_VERSION) ", host tensors",
    .open = mpi_open,
    .close = mpi_close,
    .supports_device = mpi_supports_device,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .all_gather = mpi_all_gather,
    .test = mpi_test,
    .wait = mpi_wait,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
};

static int dist_mpi_init(const weft_options *options)
{
    (void)options;
    return weft_register(&mpi_communicator) < 0 ? -1 : 0;
}

WEFT_PLUGIN_MANIFEST("provides communicator:mpi\n");

static const struct weft_plugin dist_mpi_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "dist-mpi", struct weft_plugin),
    .version = WEFT_VERSION_STRING,
    .description = "collectives over MPI for host tensors (communicator mpi)",
    .manifest = weft_plugin_manifest,
    .init = dist_mpi_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &dist_mpi_plugin;
}
