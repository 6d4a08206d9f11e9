/* train/dist.c: the front end of weft/dist.h, the process group and its collectives.
 *
 * The transport (a communicator plugin) sees only contiguous buffers on a device it said
 * it moves, and only SUM/MAX/MIN: this file checks the arguments, stages views through
 * contiguous copies, turns AVG into SUM and a division, runs the world of one without
 * any transport and implements the deterministic mode (an all_gather, then a reduction
 * in rank order, the same on every rank).
 *
 * State is per process, as torch.distributed's default group; collectives come from one
 * thread at a time, so it takes no lock.
 */
#include "weft/dist.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/backend.h"
#include "weft/error.h"
#include "weft/ops.h"

/* ---- the kind -------------------------------------------------------------------------- */

static int check_communicator(const struct weft_vtable *v)
{
    const struct weft_communicator *c = (const struct weft_communicator *)v;
    if (!c->open || !c->close || !c->supports_device || !c->all_reduce || !c->broadcast ||
        !c->all_gather || !c->test || !c->wait || !c->barrier || !c->abort)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "communicator '%s' lacks a required method (open, close, "
                              "supports_device, all_reduce, broadcast, all_gather, test, wait, "
                              "barrier and abort must all be set)",
                              v->name);
    return 0;
}

/* Registered by kinds.c when the library loads. */
const struct weft_kind weft_communicator_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_COMMUNICATOR, struct weft_kind),
    .description = "collective transports ([distributed] backend = names them)",
    .min_size = sizeof(struct weft_communicator),
    .check = check_communicator,
};

/* ---- names and options ------------------------------------------------------------------ */

const char *weft_reduce_op_name(weft_reduce_op op)
{
    switch (op) {
    case WEFT_REDUCE_SUM: return "sum";
    case WEFT_REDUCE_AVG: return "avg";
    case WEFT_REDUCE_MAX: return "max";
    case WEFT_REDUCE_MIN: return "min";
    }
    return "invalid";
}

struct weft_dist_init_options weft_dist_init_options_default(void)
{
    return (struct weft_dist_init_options){.backend = "auto", .timeout_s = 1800.0};
}

/* ---- the launcher's environment ---------------------------------------------------------- */

/* *out = the value of variable name, when set. 1 when set and well formed, 0 when unset,
 * negative with an error naming the variable when malformed or below min. */
static int env_int(const char *name, int min, int *out)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > INT_MAX)
        return weft_error_set(WEFT_ERR_VALUE,
                              "the launcher's environment variable %s = '%s' is not an integer "
                              ">= %d",
                              name, s, min);
    *out = (int)v;
    return 1;
}

/* The first of names that is set, into *out; 0 when none is. */
static int env_first(const char *const *names, int n, int min, int *out)
{
    for (int i = 0; i < n; i++) {
        int rc = env_int(names[i], min, out);
        if (rc != 0)
            return rc;
    }
    return 0;
}

struct launcher {
    const char *name;
    const char *rank; /* the variable whose presence says this launcher started us */
    const char *size[3], *local_rank[2], *local_size[2];
};

/* In the order weft/dist.h gives. PMIx exports no world size of its own: the one of
 * whatever launched it (PMI_SIZE, Slurm, Open MPI) is taken, else the transport decides. */
static const struct launcher launchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"},
     {"OMPI_COMM_WORLD_LOCAL_RANK"}, {"OMPI_COMM_WORLD_LOCAL_SIZE"}},
    {"pmix", "PMIX_RANK", {"PMI_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"},
     {"PMIX_LOCAL_RANK", "SLURM_LOCALID"}, {"PMIX_LOCAL_SIZE"}},
    {"pmi", "PMI_RANK", {"PMI_SIZE"}, {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"},
     {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}},
    {"slurm", "SLURM_PROCID", {"SLURM_NTASKS"}, {"SLURM_LOCALID"}, {NULL}},
};

static int count_names(const char *const *names, int max)
{
    int n = 0;
    while (n < max && names[n])
        n++;
    return n;
}

int weft_dist_env_read(struct weft_dist_env *env)
{
    if (!env)
        return weft_error_set(WEFT_ERR_VALUE, "weft_dist_env_read: env is NULL");
    *env = (struct weft_dist_env){0, 1, 0, 1, "none"};
    for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++) {
        const struct launcher *l = &launchers[i];
        int rank;
        int rc = env_int(l->rank, 0, &rank);
        if (rc < 0)
            return rc;
        if (rc == 0)
            continue;
        /* 0: the launcher did not say; the transport's own view decides. */
        int size = 0, local_rank = 0, local_size = 1;
        if (env_first(l->size, count_names(l->size, 3), 1, &size) < 0 ||
            env_first(l->local_rank, count_names(l->local_rank, 2), 0, &local_rank) < 0 ||
            env_first(l->local_size, count_names(l->local_size, 2), 1, &local_size) < 0)
            return -1;
        if (size > 0 && rank >= size)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "the launcher's environment variable %s = %d is not below the "
                                  "world size %d",
                                  l->rank, rank, size);
        if (local_rank >= local_size && local_size > 1)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "the launcher says local rank %d of %d local processes (%s)",
                                  local_rank, local_size, l->name);
        if (local_size < local_rank + 1)
            local_size = local_rank + 1;
        *env = (struct weft_dist_env){rank, size, local_rank, local_size, l->name};
        return 0;
    }
    return 0;
}

/* ---- the group ------------------------------------------------------------------------------ */

struct weft_work {
    const char *what;       /* "all_reduce", "broadcast", "all_gather" */
    weft_reduce_op op;      /* all_reduce's, as the caller gave it */
    void *request;          /* the transport's; NULL when already done (world of one) */
    weft_tensor *dst;       /* the caller's tensor the result goes to (detached), retained */
    weft_tensor *buf;       /* contiguous: dst itself, or its staging copy; retained */
    weft_tensor *in;        /* all_gather's contiguous input, retained */
    weft_tensor *gathered;  /* deterministic all_reduce: [world, *shape], retained */
    struct weft_work *next; /* on the list of abandoned works */
};

static struct {
    bool initialized;
    const struct weft_communicator *comm; /* NULL: the world of one, no transport */
    void *group;
    struct weft_dist_init_options options;
    char backend[16];
    int rank, world_size, local_rank;
    /* Works whose wait failed: the transport may still write their buffers (MPI cannot
     * cancel a collective), so they live until the group is closed. */
    struct weft_work *abandoned;
    /* Set by the first failed wait: the ranks no longer agree on which collective comes
     * next, so every later one fails at once (with this reason) instead of each waiting
     * out its own timeout: the job ends within one timeout_s. */
    char failed[256];
} dist = {.world_size = 1, .backend = "none"};

static void work_free(struct weft_work *w)
{
    weft_tensor_release(w->dst);
    weft_tensor_release(w->buf);
    weft_tensor_release(w->in);
    weft_tensor_release(w->gathered);
    free(w);
}

static int open_transport(const struct weft_dist_init_options *o, const char *name,
                          const struct weft_dist_env *env)
{
    const struct weft_communicator *comm = weft_registry_get(WEFT_KIND_COMMUNICATOR, name);
    if (!comm)
        return weft_error_prefix("weft_dist_init: backend '%s'", name);
    /* The transport reads its settings as every plugin does, through options. */
    weft_options *opts = weft_options_new("dist", NULL);
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%.17g", o->timeout_s);
    if (!opts || weft_options_set(opts, "backend", name) != 0 ||
        weft_options_set(opts, "timeout_s", timeout) != 0 ||
        weft_options_set(opts, "deterministic", o->deterministic ? "true" : "false") != 0) {
        weft_options_free(opts);
        return weft_error_code() ? weft_error_code() : WEFT_ERR_OUT_OF_MEMORY;
    }
    int rank = -1, size = 0;
    void *group = comm->open(opts, env, &rank, &size);
    weft_options_free(opts);
    if (!group)
        return weft_error_prefix("weft_dist_init: backend '%s'", name);
    if (rank < 0 || size < 1 || rank >= size) {
        comm->close(group);
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "weft_dist_init: communicator '%s' says rank %d of %d", name, rank,
                              size);
    }
    dist.comm = comm;
    dist.group = group;
    dist.rank = rank;
    dist.world_size = size;
    return 0;
}

int weft_dist_init_with(const struct weft_dist_init_options *options)
{
    struct weft_dist_init_options o =
        options ? *options : weft_dist_init_options_default();
    const char *name = o.backend ? o.backend : "auto";
    if (dist.initialized)
        return weft_error_set(WEFT_ERR_RUNTIME, "weft_dist_init: already initialized with "
                                                "backend %s",
                              dist.backend);
    if (strcmp(name, "auto") != 0 && strcmp(name, "mpi") != 0 && strcmp(name, "nccl") != 0 &&
        strcmp(name, "none") != 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_dist_init: backend '%s' is not one of auto, mpi, nccl, none",
                              name);
    if (!(o.timeout_s > 0) || isinf(o.timeout_s))
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_dist_init: timeout_s = %g; expected a finite number of "
                              "seconds > 0",
                              o.timeout_s);
    struct weft_dist_env env;
    if (weft_dist_env_read(&env) < 0)
        return weft_error_prefix("weft_dist_init");
    if (strcmp(name, "auto") == 0)
        name = env.world_size == 1 ? "none" : "mpi";
    if (strcmp(name, "none") == 0 && env.world_size != 1)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_dist_init: backend none cannot join a world of %d processes "
                              "(launcher %s): each would train alone; use backend mpi or nccl",
                              env.world_size, env.launcher);
    snprintf(dist.backend, sizeof dist.backend, "%s", name);
    o.backend = dist.backend;
    dist.options = o;
    dist.local_rank = env.local_rank;
    if (strcmp(name, "none") == 0) {
        dist.comm = NULL;
        dist.group = NULL;
        dist.rank = 0;
        dist.world_size = 1;
    } else if (open_transport(&o, name, &env) < 0) {
        snprintf(dist.backend, sizeof dist.backend, "none");
        dist.local_rank = 0;
        return -1;
    }
    dist.initialized = true;
    return 0;
}

int weft_dist_init(const char *backend, double timeout_s)
{
    struct weft_dist_init_options o = weft_dist_init_options_default();
    o.backend = backend;
    o.timeout_s = timeout_s;
    return weft_dist_init_with(&o);
}

bool weft_dist_is_initialized(void)
{
    return dist.initialized;
}

int weft_dist_finalize(void)
{
    if (!dist.initialized)
        return 0;
    int rc = dist.comm ? dist.comm->close(dist.group) : 0;
    while (dist.abandoned) {
        struct weft_work *w = dist.abandoned;
        dist.abandoned = w->next;
        work_free(w);
    }
    dist.initialized = false;
    dist.failed[0] = '\0';
    dist.comm = NULL;
    dist.group = NULL;
    dist.rank = 0;
    dist.world_size = 1;
    dist.local_rank = 0;
    snprintf(dist.backend, sizeof dist.backend, "none");
    return rc < 0 ? weft_error_prefix("weft_dist_finalize") : 0;
}

int weft_dist_rank(void) { return dist.rank; }
int weft_dist_world_size(void) { return dist.world_size; }
int weft_dist_local_rank(void) { return dist.local_rank; }
const char *weft_dist_backend(void) { return dist.backend; }
double weft_dist_timeout_s(void)
{
    return dist.initialized ? dist.options.timeout_s : weft_dist_init_options_default().timeout_s;
}
bool weft_dist_deterministic(void) { return dist.initialized && dist.options.deterministic; }

void weft_dist_abort(int code, const char *message)
{
    if (code == 0)
        code = 1;
    fprintf(stderr, "weft: rank %d: %s\n", dist.rank, message ? message : "aborted");
    fflush(stderr);
    if (dist.comm)
        dist.comm->abort(dist.group, code);
    exit(code);
}

/* ---- argument checks --------------------------------------------------------------------- */

static int check_ready(const char *what)
{
    if (!dist.initialized)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: the process group is not initialized (call weft_dist_init "
                              "first)",
                              what);
    if (dist.failed[0])
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: the process group failed earlier: %s",
                              what, dist.failed);
    return 0;
}

/* Where host tensors go through when the transport moves none (NCCL): a device of a type
 * it moves, this process's (local rank % count). False when there is none. */
static bool staging_device(weft_device *out)
{
    for (int type = 0; dist.comm && type < WEFT_MAX_DEVICE_TYPES; type++) {
        if (type == WEFT_DEVICE_CPU || !weft_backend_find(type) ||
            !dist.comm->supports_device(dist.group, type))
            continue;
        int count = weft_device_count(type);
        if (count > 0) {
            *out = (weft_device){(int16_t)type, (int16_t)(dist.local_rank % count)};
            return true;
        }
    }
    return false;
}

/* True when t's collective runs through a device copy (a host tensor under NCCL). */
static bool needs_staging(const weft_tensor *t, weft_device *dev)
{
    return dist.comm && t->device.type == WEFT_DEVICE_CPU &&
           !dist.comm->supports_device(dist.group, WEFT_DEVICE_CPU) && staging_device(dev);
}

/* t (named `name` in messages) is a strided tensor on a device the transport moves. */
static int check_tensor(const char *what, const char *name, const weft_tensor *t)
{
    if (!t)
        return weft_error_code() != WEFT_OK
                   ? -1 /* a failed op upstream already said why */
                   : weft_error_set(WEFT_ERR_VALUE, "%s: %s is NULL", what, name);
    if (t->layout != WEFT_LAYOUT_STRIDED)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: %s has a sparse layout; collectives move strided tensors",
                              what, name);
    weft_device staged;
    if (dist.comm && !dist.comm->supports_device(dist.group, t->device.type) &&
        !needs_staging(t, &staged)) {
        char dev[32];
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: %s is on %s, which backend %s does not move (mpi moves cpu "
                              "tensors, nccl cuda tensors)",
                              what, name, weft_device_str(t->device, dev, sizeof dev),
                              dist.backend);
    }
    return 0;
}

/* A result is written into t: no two of its elements may share memory, as torch refuses
 * in-place writes into an expanded view. */
static int check_writable(const char *what, const char *name, const weft_tensor *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1 && t->stride[d] == 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "%s: %s is an expanded view (dim %d has stride 0) whose "
                                  "elements share memory; pass a tensor that owns them "
                                  "(clone it)",
                                  what, name, d);
    return 0;
}

/* ---- works ----------------------------------------------------------------------------------- */

/* A work writing into t: dst is t detached (torch.distributed works on .data), buf a
 * contiguous tensor the transport fills (dst itself when contiguous). copy_in: the staging
 * copy starts with t's values (all_reduce, broadcast) rather than empty (all_gather). */
static struct weft_work *work_new(const char *what, weft_tensor *t, bool copy_in)
{
    struct weft_work *w = calloc(1, sizeof *w);
    if (!w) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        return NULL;
    }
    w->what = what;
    weft_scope_push();
    weft_tensor *dst = weft_detach(t);
    weft_tensor *buf = NULL;
    weft_device staged;
    if (dst && needs_staging(dst, &staged)) /* host tensor, device transport */
        buf = copy_in ? weft_to(dst, staged, dst->dtype, false)
                      : weft_empty(dst->ndim, dst->shape, dst->dtype, staged);
    else if (dst && weft_tensor_is_contiguous(dst))
        buf = dst;
    else if (dst)
        buf = copy_in ? weft_contiguous(dst)
                      : weft_empty(dst->ndim, dst->shape, dst->dtype, dst->device);
    w->dst = weft_tensor_retain(dst);
    w->buf = weft_tensor_retain(buf);
    weft_scope_pop();
    if (!w->dst || !w->buf) {
        work_free(w);
        return NULL;
    }
    return w;
}

/* Writes the result from buf into the caller's tensor and marks it modified. */
static int work_write_back(struct weft_work *w)
{
    if (w->buf == w->dst) {
        weft_tensor_bump_version(w->dst);
        return 0;
    }
    return weft_copy_(w->dst, w->buf);
}

/* out op= in, elementwise in place, as the transports reduce (bool: or / and). */
static int reduce_into(weft_tensor *out, weft_tensor *in, weft_reduce_op op)
{
    weft_tensor *r;
    if (out->dtype == WEFT_BOOL)
        r = op == WEFT_REDUCE_MIN ? weft_logical_and_(out, in) : weft_logical_or_(out, in);
    else if (op == WEFT_REDUCE_MAX)
        r = weft_maximum_(out, in);
    else if (op == WEFT_REDUCE_MIN)
        r = weft_minimum_(out, in);
    else
        r = weft_add_(out, in);
    return r ? 0 : -1;
}

/* Finishes a work whose transport part is done: the deterministic reduction, AVG's
 * division, the write back. */
static int work_finish(struct weft_work *w)
{
    int rc = 0;
    weft_scope_push();
    if (w->gathered) {
        rc = weft_copy_(w->buf, weft_select(w->gathered, 0, 0));
        for (int i = 1; i < dist.world_size && rc == 0; i++)
            rc = reduce_into(w->buf, weft_select(w->gathered, 0, i), w->op);
    }
    if (rc == 0 && w->op == WEFT_REDUCE_AVG && dist.world_size > 1 &&
        strcmp(w->what, "all_reduce") == 0)
        rc = weft_div_scalar_(w->buf, (double)dist.world_size) ? 0 : -1;
    if (rc == 0)
        rc = work_write_back(w);
    weft_scope_pop();
    return rc;
}

/* Hands w back as started: finished at once in the world of one (request NULL). On a
 * transport failure w is freed and NULL returned. */
static weft_work *work_started(struct weft_work *w, void *request)
{
    if (dist.comm && !request) {
        work_free(w); /* the transport's error names the collective */
        return NULL;
    }
    w->request = request;
    return w;
}

/* ---- collectives ----------------------------------------------------------------------------- */

weft_work *weft_dist_all_reduce_async(weft_tensor *t, weft_reduce_op op)
{
    const char *what = "all_reduce";
    if (check_ready(what) < 0 || check_tensor(what, "t", t) < 0 ||
        check_writable(what, "t", t) < 0)
        return NULL;
    if (op != WEFT_REDUCE_SUM && op != WEFT_REDUCE_AVG && op != WEFT_REDUCE_MAX &&
        op != WEFT_REDUCE_MIN) {
        weft_error_set(WEFT_ERR_VALUE, "%s: op %d is not a weft_reduce_op", what, (int)op);
        return NULL;
    }
    if (op == WEFT_REDUCE_AVG && !weft_dtype_is_floating(t->dtype)) {
        weft_error_set(WEFT_ERR_TYPE,
                       "%s: op avg needs a floating dtype, but t is %s (the mean of integers "
                       "is not one: reduce with sum and divide)",
                       what, weft_dtype_name(t->dtype));
        return NULL;
    }
    struct weft_work *w = work_new(what, t, true);
    if (!w)
        return NULL;
    w->op = op;
    int64_t n = weft_tensor_numel(t);
    if (!dist.comm || n == 0)
        return work_finish(w) < 0 ? (work_free(w), NULL) : w;
    void *req;
    if (dist.options.deterministic) {
        int64_t shape[WEFT_MAX_DIMS + 1] = {dist.world_size};
        memcpy(shape + 1, t->shape, (size_t)t->ndim * sizeof *shape);
        if (t->ndim >= WEFT_MAX_DIMS) {
            weft_error_set(WEFT_ERR_VALUE,
                           "%s: deterministic mode gathers t into a tensor of one more dim, "
                           "but t already has %d dims (at most %d)",
                           what, t->ndim, WEFT_MAX_DIMS - 1);
            work_free(w);
            return NULL;
        }
        weft_scope_push();
        w->gathered = weft_tensor_retain(
            weft_empty(t->ndim + 1, shape, t->dtype, w->buf->device));
        weft_scope_pop();
        if (!w->gathered) {
            work_free(w);
            return NULL;
        }
        req = dist.comm->all_gather(dist.group, weft_tensor_data(w->buf),
                                    weft_tensor_data(w->gathered),
                                    (size_t)n * weft_tensor_itemsize(t), w->buf->device);
    } else {
        req = dist.comm->all_reduce(dist.group, weft_tensor_data(w->buf), (size_t)n, t->dtype,
                                    w->buf->device, op == WEFT_REDUCE_AVG ? WEFT_REDUCE_SUM : op);
    }
    return work_started(w, req);
}

weft_work *weft_dist_broadcast_async(weft_tensor *t, int root)
{
    const char *what = "broadcast";
    if (check_ready(what) < 0 || check_tensor(what, "t", t) < 0 ||
        check_writable(what, "t", t) < 0)
        return NULL;
    if (root < 0 || root >= dist.world_size) {
        weft_error_set(WEFT_ERR_VALUE, "%s: root %d is not a rank of this world (0 .. %d)",
                       what, root, dist.world_size - 1);
        return NULL;
    }
    struct weft_work *w = work_new(what, t, true);
    if (!w)
        return NULL;
    int64_t n = weft_tensor_numel(t);
    if (!dist.comm || n == 0)
        return work_finish(w) < 0 ? (work_free(w), NULL) : w;
    return work_started(w, dist.comm->broadcast(dist.group, weft_tensor_data(w->buf),
                                                (size_t)n * weft_tensor_itemsize(t),
                                                w->buf->device, root));
}

weft_work *weft_dist_all_gather_async(weft_tensor *out, const weft_tensor *in)
{
    const char *what = "all_gather";
    if (check_ready(what) < 0 || check_tensor(what, "in", in) < 0 ||
        check_tensor(what, "out", out) < 0 || check_writable(what, "out", out) < 0)
        return NULL;
    char a[160], e[160];
    int64_t expect[WEFT_MAX_DIMS + 1] = {dist.world_size};
    memcpy(expect + 1, in->shape, (size_t)in->ndim * sizeof *expect);
    if (in->ndim >= WEFT_MAX_DIMS || out->ndim != in->ndim + 1 ||
        memcmp(out->shape, expect, (size_t)out->ndim * sizeof *expect) != 0) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "%s: out has shape %s but expected %s ([world_size, *in.shape])", what,
                       weft_shape_str(out->ndim, out->shape, a, sizeof a),
                       in->ndim >= WEFT_MAX_DIMS
                           ? "one more dim than weft allows"
                           : weft_shape_str(in->ndim + 1, expect, e, sizeof e));
        return NULL;
    }
    if (out->dtype != in->dtype || !weft_device_equal(out->device, in->device)) {
        char od[32], id[32];
        weft_error_set(WEFT_ERR_RUNTIME,
                       "%s: out (%s on %s) must have in's dtype and device (%s on %s)", what,
                       weft_dtype_name(out->dtype), weft_device_str(out->device, od, sizeof od),
                       weft_dtype_name(in->dtype), weft_device_str(in->device, id, sizeof id));
        return NULL;
    }
    struct weft_work *w = work_new(what, out, false);
    if (!w)
        return NULL;
    weft_scope_push();
    weft_device staged;
    w->in = weft_tensor_retain(needs_staging(in, &staged)
                                   ? weft_to((weft_tensor *)in, staged, in->dtype, false)
                                   : weft_contiguous((weft_tensor *)in));
    int rc = w->in ? 0 : -1;
    if (rc == 0 && !dist.comm)
        rc = weft_copy_(w->buf, w->in); /* [1, *shape] <- [*shape] */
    weft_scope_pop();
    if (rc < 0) {
        work_free(w);
        return NULL;
    }
    int64_t n = weft_tensor_numel(in);
    if (!dist.comm || n == 0)
        return work_finish(w) < 0 ? (work_free(w), NULL) : w;
    return work_started(w, dist.comm->all_gather(dist.group, weft_tensor_data(w->in),
                                                 weft_tensor_data(w->buf),
                                                 (size_t)n * weft_tensor_itemsize(in),
                                                 w->buf->device));
}

int weft_work_wait(weft_work *w)
{
    if (!w)
        return weft_error_code() != WEFT_OK
                   ? weft_error_code()
                   : weft_error_set(WEFT_ERR_VALUE, "weft_work_wait: the work is NULL");
    if (!w->request) {
        work_free(w); /* finished when started */
        return 0;
    }
    if (!dist.comm) {
        /* Its transport is gone: nothing may touch the request any more. */
        w->request = NULL;
        work_free(w);
        return weft_error_set(WEFT_ERR_RUNTIME, "weft_work_wait: the process group was "
                                                "finalized before this work was waited for");
    }
    void *req = w->request;
    int failed = dist.failed[0] ? weft_error_set(WEFT_ERR_RUNTIME,
                                                 "%s: the process group failed earlier: %s",
                                                 w->what, dist.failed)
                                : dist.comm->wait(dist.group, req);
    if (failed < 0) {
        /* The transport may still write into w's buffers: keep them until the group is
         * closed (the caller is expected to weft_dist_abort). A request not waited for
         * stays with it. */
        if (!dist.failed[0])
            snprintf(dist.failed, sizeof dist.failed, "%s", weft_error_message());
        w->request = NULL;
        w->next = dist.abandoned;
        dist.abandoned = w;
        return -1;
    }
    w->request = NULL;
    int rc = work_finish(w);
    work_free(w);
    return rc;
}

bool weft_work_is_completed(weft_work *w)
{
    if (!w || !w->request || !dist.comm)
        return true;
    return dist.comm->test(dist.group, w->request) != 0; /* failed: wait() reports it */
}

int weft_dist_all_reduce(weft_tensor *t, weft_reduce_op op)
{
    return weft_work_wait(weft_dist_all_reduce_async(t, op));
}

int weft_dist_broadcast(weft_tensor *t, int root)
{
    return weft_work_wait(weft_dist_broadcast_async(t, root));
}

int weft_dist_all_gather(weft_tensor *out, const weft_tensor *in)
{
    return weft_work_wait(weft_dist_all_gather_async(out, in));
}

int weft_dist_barrier(void)
{
    if (check_ready("barrier") < 0)
        return -1;
    return dist.comm ? dist.comm->barrier(dist.group) : 0;
}
