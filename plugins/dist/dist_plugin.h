/* plugins/dist/dist_plugin.h: what the communicator plugins share (group.c): the MPI
 * world every transport joins (NCCL bootstraps over it and uses it for barriers), and the
 * polling wait with a timeout. Not installed; hidden in each plugin's shared object. */
#ifndef WEFT_DIST_PLUGIN_H
#define WEFT_DIST_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>

#include <mpi.h>

#include <weft/dist.h>

#define DIST_INTERNAL __attribute__((visibility("hidden")))

/* A request that timed out: MPI cannot cancel a collective, so it stays here, with the
 * buffers the front end keeps alive, until close() drains it or the job is aborted. */
struct dist_stale {
    void *request;
    int (*test)(void *group, void *request); /* as the vtable's */
    void (*release)(void *request);
    struct dist_stale *next;
};

/* The MPI side of a group: a duplicate of MPI_COMM_WORLD that returns errors, and a
 * second one on which a rank that timed out asks the others whether they are waiting too
 * (dist_wait), so that its error names the ranks that did not arrive. */
struct dist_world {
    MPI_Comm comm;
    MPI_Comm ask;
    int rank, size;
    double timeout_s;
    bool initialized_mpi; /* this plugin called MPI_Init_thread, so it finalizes */
    struct dist_stale *stale;
};

/* Initialises MPI unless the program did, duplicates the world and checks it against
 * what the launcher's environment said ("the launcher says rank 1 of 2 but MPI says
 * rank 0 of 1"). who names the backend in messages. 0 or negative with an error. */
DIST_INTERNAL int dist_world_open(struct dist_world *w, const char *who,
                                  const weft_options *options,
                                  const struct weft_dist_env *env);
/* Drains stale requests (up to the timeout), frees the communicator and finalizes MPI
 * when this plugin initialised it. With a request still pending MPI is left as is (its
 * finalize would hang) and the error says so. 0 or negative. */
DIST_INTERNAL int dist_world_close(struct dist_world *w, void *group);

/* Polls test(group, request) until it says finished (1) or failed (negative), spinning for
 * a millisecond and then sleeping 50 us between polls, for at most w->timeout_s; while it
 * waits it answers the other ranks' "are you waiting?". On a timeout it asks them in turn
 * (answers within a quarter second), the error names what, the rank, the timeout and the
 * ranks that did not answer (stopped, dead, or busy outside the collectives), and the
 * request joins the stale list (release frees it later); otherwise release(request) is
 * called. 0 or negative. */
DIST_INTERNAL int dist_wait(struct dist_world *w, void *group, const char *what, void *request,
                            int (*test)(void *group, void *request),
                            void (*release)(void *request));

/* MPI's error text for code, into an error: "<what>: MPI_Iallreduce failed: <text>". */
DIST_INTERNAL int dist_mpi_error(int code, const char *what, const char *call);

/* MPI_Ibarrier and dist_wait. */
DIST_INTERNAL int dist_world_barrier(struct dist_world *w);

/* MPI_Abort on the world; exit(code) should it return. */
DIST_INTERNAL __attribute__((noreturn)) void dist_world_abort(struct dist_world *w, int code);

#endif
