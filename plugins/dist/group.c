/* plugins/dist/group.c: the MPI world the communicator plugins join, and the polling wait
 * that turns "a rank died or stopped calling collectives" into an error after the
 * group's timeout instead of a hang. */
#include "dist_plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/error.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dist_mpi_error(int code, const char *what, const char *call)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", code);
    return weft_error_set(WEFT_ERR_RUNTIME, "%s: %s failed: %s", what, call, text);
}

/* Open MPI's shared-memory transport (btl vader; "sm" from 5.0) moves a message above its
 * eager limit in one of two ways: the receiver reads the sender's pages itself (CMA,
 * process_vm_readv: its default where the kernel allows it), or both copy through the
 * shared segment, 32 KB fragments pipelined ("none"). On the 2-core machine weft is
 * measured on, copies won at every size, two ranks' MPI_Iallreduce of float32 (best of
 * 180): 940 KB, the MLP's one bucket, 0.12 ms against 0.24 with CMA; 256 KB 0.036 against
 * 0.081; 26 MB 7.0 against 10.9; and DDP's scaling on the MLP at batch 256 went from 0.86
 * to 0.97 (bench/ddp-scaling.sh, docs/distributed.md). A container may also forbid CMA's
 * cross-process reads outright. So weft asks for the copies, through the environment
 * MPI_Init reads, unless the launcher or the user chose already under either name
 * (mpirun --mca btl_vader_single_copy_mechanism cma exports the variable). A choice made
 * only in an Open MPI parameter file is overridden: the environment ranks above those. */
static void prefer_shared_memory_copies(void)
{
#ifdef OMPI_MAJOR_VERSION
    if (getenv("OMPI_MCA_btl_vader_single_copy_mechanism") ||
        getenv("OMPI_MCA_btl_sm_single_copy_mechanism"))
        return;
#if OMPI_MAJOR_VERSION >= 5
    setenv("OMPI_MCA_btl_sm_single_copy_mechanism", "none", 1);
#else
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
#endif
#endif
}

int dist_world_open(struct dist_world *w, const char *who,
                    const weft_options *options,
                    const struct weft_dist_env *env)
{
    *w = (struct dist_world){.comm = MPI_COMM_NULL};
    if (weft_options_double(options, "timeout_s", 1800, &w->timeout_s) != 0)
        return weft_error_code();
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: MPI was already finalized in this process and cannot be "
                              "initialized again",
                              who);
    if (!inited) {
        /* Collectives come from one thread at a time (weft/dist.h), which SERIALIZED
         * allows; a program that initialised MPI itself chose its own level. */
        int provided = 0;
        prefer_shared_memory_copies();
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return dist_mpi_error(rc, who, "MPI_Init_thread");
        w->initialized_mpi = true;
    }
    w->ask = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->ask);
    if (rc != MPI_SUCCESS) {
        dist_mpi_error(rc, who, "MPI_Comm_dup");
        goto fail;
    }
    /* Errors come back as codes we turn into weft errors, rather than ending the job. */
    MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(w->ask, MPI_ERRORS_RETURN);
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    if (strcmp(env->launcher, "none") != 0 &&
        (env->rank != w->rank || (env->world_size > 0 && env->world_size != w->size))) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "%s: the launcher (%s) says rank %d of %d but MPI says rank %d of %d; "
                       "start the processes with the launcher of the MPI weft was built with",
                       who, env->launcher, env->rank, env->world_size, w->rank, w->size);
        goto fail;
    }
    return 0;
fail:
    if (w->ask != MPI_COMM_NULL)
        MPI_Comm_free(&w->ask);
    if (w->comm != MPI_COMM_NULL)
        MPI_Comm_free(&w->comm);
    if (w->initialized_mpi)
        MPI_Finalize();
    return -1;
}

/* ---- who did not arrive --------------------------------------------------------------- */

/* A rank that timed out sends ASK to every other rank; a rank waiting in a collective
 * answers HERE from its polling loop. Payloads are one constant int: the sends are freed
 * at once and never wait for their buffer. Messages to a stopped rank stay unread; the job
 * ends after such a timeout anyway. */
enum { TAG_ASK = 1, TAG_HERE = 2 };
static const int ping = 1;

static void send_to(struct dist_world *w, int to, int tag)
{
    MPI_Request r;
    if (MPI_Isend(&ping, 1, MPI_INT, to, tag, w->ask, &r) == MPI_SUCCESS)
        MPI_Request_free(&r);
}

/* Answers every ASK that has arrived; with here != NULL, also counts the HERE answers
 * (here[rank] set). */
static void serve_asks(struct dist_world *w, bool *here)
{
    for (int tag = TAG_ASK; tag <= (here ? TAG_HERE : TAG_ASK); tag++)
        for (;;) {
            int flag = 0, got;
            MPI_Status st;
            if (MPI_Iprobe(MPI_ANY_SOURCE, tag, w->ask, &flag, &st) != MPI_SUCCESS || !flag)
                break;
            MPI_Recv(&got, 1, MPI_INT, st.MPI_SOURCE, tag, w->ask, MPI_STATUS_IGNORE);
            if (tag == TAG_ASK)
                send_to(w, st.MPI_SOURCE, TAG_HERE);
            else
                here[st.MPI_SOURCE] = true;
        }
}

/* After a timeout: asks the others whether they are waiting too, gives them a quarter of a
 * second (they poll every 50 us), and writes "rank 1 did not arrive (...)" or "ranks 1, 3
 * did not arrive (...); rank 2 waits too" into out. */
static void who_is_missing(struct dist_world *w, char *out, size_t size)
{
    bool *here = calloc((size_t)w->size, sizeof *here);
    if (!here) {
        snprintf(out, size, "a rank died or stopped calling collectives");
        return;
    }
    for (int r = 0; r < w->size; r++)
        if (r != w->rank)
            send_to(w, r, TAG_ASK);
    double start = now_s();
    while (now_s() - start < 0.25) {
        serve_asks(w, here);
        nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    here[w->rank] = true;
    char missing[256] = "", waiting[256] = "";
    int nmissing = 0, nwaiting = 0;
    for (int r = 0; r < w->size; r++) {
        if (r == w->rank)
            continue;
        char *list = here[r] ? waiting : missing;
        int *n = here[r] ? &nwaiting : &nmissing;
        size_t len = strlen(list);
        if (len + 16 < sizeof missing)
            snprintf(list + len, sizeof missing - len, "%s%d", (*n)++ ? ", " : "", r);
        else if (len + 5 < sizeof missing && !strstr(list, "..."))
            snprintf(list + len, sizeof missing - len, ", ...");
    }
    free(here);
    if (nmissing == 0)
        snprintf(out, size, "every other rank answered that it waits too, in another collective "
                            "or one this rank has not started");
    else
        snprintf(out, size, "%s %s did not arrive (no answer: stopped, died, or still busy "
                            "outside the collectives)%s%s%s%s",
                 nmissing == 1 ? "rank" : "ranks", missing, nwaiting ? "; " : "",
                 nwaiting == 1 ? "rank " : nwaiting ? "ranks " : "", waiting,
                 nwaiting == 1 ? " waits too" : nwaiting ? " wait too" : "");
}

/* Polls once every 50 us after a first millisecond of spinning, answering the other ranks'
 * asks. 1 done, 0 timed out, negative failed. */
static int poll_until(struct dist_world *w, void *group, void *request,
                      int (*test)(void *group, void *request))
{
    double start = now_s();
    for (;;) {
        int done = test(group, request);
        if (done != 0)
            return done;
        double elapsed = now_s() - start;
        if (elapsed > w->timeout_s)
            return 0;
        if (elapsed > 1e-3) {
            serve_asks(w, NULL);
            nanosleep(&(struct timespec){0, 50000}, NULL);
        }
    }
}

int dist_wait(struct dist_world *w, void *group, const char *what, void *request,
              int (*test)(void *group, void *request), void (*release)(void *request))
{
    int done = poll_until(w, group, request, test);
    if (done == 0) {
        struct dist_stale *s = malloc(sizeof *s);
        if (s) {
            *s = (struct dist_stale){request, test, release, w->stale};
            w->stale = s;
        } /* else: the request leaks, as its buffers do; the job is ending anyway */
        char who[600];
        who_is_missing(w, who, sizeof who);
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: rank %d waited %g s for the other ranks (timeout_s = %g); %s",
                              what, w->rank, w->timeout_s, w->timeout_s, who);
    }
    release(request);
    return done < 0 ? -1 : 0;
}

struct barrier_req {
    MPI_Request r;
};

static int barrier_test(void *group, void *request)
{
    struct barrier_req *b = request;
    int flag = 0;
    int rc = MPI_Test(&b->r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return dist_mpi_error(rc, "barrier", "MPI_Test");
    (void)group;
    return flag ? 1 : 0;
}

int dist_world_barrier(struct dist_world *w)
{
    struct barrier_req *b = malloc(sizeof *b);
    if (!b)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "barrier: out of memory");
    int rc = MPI_Ibarrier(w->comm, &b->r);
    if (rc != MPI_SUCCESS) {
        free(b);
        return dist_mpi_error(rc, "barrier", "MPI_Ibarrier");
    }
    return dist_wait(w, NULL, "barrier", b, barrier_test, free);
}

int dist_world_close(struct dist_world *w, void *group)
{
    /* A rank that was only late may still come: give each stale collective one more
     * timeout to finish, so a job that survived a timeout ends cleanly. */
    int pending = 0;
    while (w->stale) {
        struct dist_stale *s = w->stale;
        w->stale = s->next;
        if (poll_until(w, group, s->request, s->test) == 1)
            s->release(s->request);
        else
            pending++;
        free(s);
    }
    if (pending)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "weft_dist_finalize: %d collective%s of rank %d never finished; "
                              "MPI is left unfinalized (end the job with weft_dist_abort)",
                              pending, pending == 1 ? "" : "s", w->rank);
    if (w->comm != MPI_COMM_NULL)
        MPI_Comm_free(&w->comm);
    if (w->ask != MPI_COMM_NULL) {
        /* what a late rank asked or answered: read, so nothing is left unmatched */
        for (int flag = 1, got; flag;) {
            MPI_Status st;
            if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w->ask, &flag, &st) != MPI_SUCCESS)
                break;
            if (flag)
                MPI_Recv(&got, 1, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, w->ask, MPI_STATUS_IGNORE);
        }
        MPI_Comm_free(&w->ask);
    }
    int rc = w->initialized_mpi ? MPI_Finalize() : MPI_SUCCESS;
    return rc == MPI_SUCCESS ? 0 : dist_mpi_error(rc, "weft_dist_finalize", "MPI_Finalize");
}

void dist_world_abort(struct dist_world *w, int code)
{
    MPI_Abort(w->comm != MPI_COMM_NULL ? w->comm : MPI_COMM_WORLD, code);
    exit(code);
}
