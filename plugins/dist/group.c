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
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return dist_mpi_error(rc, who, "MPI_Init_thread");
        w->initialized_mpi = true;
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
    if (rc != MPI_SUCCESS) {
        dist_mpi_error(rc, who, "MPI_Comm_dup");
        goto fail;
    }
    /* Errors come back as codes we turn into weft errors, rather than ending the job. */
    MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
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
    if (w->comm != MPI_COMM_NULL)
        MPI_Comm_free(&w->comm);
    if (w->initialized_mpi)
        MPI_Finalize();
    return -1;
}

/* Polls once every 50 us after a first millisecond of spinning. 1 done, 0 timed out,
 * negative failed. */
static int poll_until(double timeout_s, void *group, void *request,
                      int (*test)(void *group, void *request))
{
    double start = now_s();
    for (;;) {
        int done = test(group, request);
        if (done != 0)
            return done;
        double elapsed = now_s() - start;
        if (elapsed > timeout_s)
            return 0;
        if (elapsed > 1e-3)
            nanosleep(&(struct timespec){0, 50000}, NULL);
    }
}

int dist_wait(struct dist_world *w, void *group, const char *what, void *request,
              int (*test)(void *group, void *request), void (*release)(void *request))
{
    int done = poll_until(w->timeout_s, group, request, test);
    if (done == 0) {
        struct dist_stale *s = malloc(sizeof *s);
        if (s) {
            *s = (struct dist_stale){request, test, release, w->stale};
            w->stale = s;
        } /* else: the request leaks, as its buffers do; the job is ending anyway */
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: rank %d waited %g s for the other ranks (timeout_s = %g); "
                              "a rank died or stopped calling collectives",
                              what, w->rank, w->timeout_s, w->timeout_s);
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
        if (poll_until(w->timeout_s, group, s->request, s->test) == 1)
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
    int rc = w->initialized_mpi ? MPI_Finalize() : MPI_SUCCESS;
    return rc == MPI_SUCCESS ? 0 : dist_mpi_error(rc, "weft_dist_finalize", "MPI_Finalize");
}

void dist_world_abort(struct dist_world *w, int code)
{
    MPI_Abort(w->comm != MPI_COMM_NULL ? w->comm : MPI_COMM_WORLD, code);
    exit(code);
}
