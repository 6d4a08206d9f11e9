/* apps/train/train_signals.c: the signals that stop a run, each ending it as Ctrl-C does: a
 * checkpoint saved at the next step, the command that resumes printed, the exit status
 * 128 + the signal (130 for SIGINT).
 *
 *  - SIGINT, Ctrl-C. A second one kills at once (the handler is reset).
 *  - SIGTERM: what schedulers and `kill` send first (Slurm, Kubernetes, systemd), and what
 *    mpirun sends its ranks when it is interrupted.
 *  - SIGPIPE: `weft-train cfg.ini | head` after head exits. The run's output has nowhere
 *    to go, and the run stops as if interrupted, saying so on stderr, rather than dying
 *    without a checkpoint.
 *  - Under Open MPI, SIGCONT that no stop came before: Ctrl-C reaches only mpirun (each
 *    rank is in a process group of its own), which then sends its ranks SIGCONT,
 *    SIGTERM a second later and SIGKILL a second after that (odls_base_sigkill_timeout =
 *    1, measured on Open MPI 4.1). The SIGCONT is the first word a rank gets, so it
 *    counts as the interrupt: that doubles the time left to save. A SIGCONT after a
 *    SIGTSTP (Ctrl-Z, which mpirun forwards) is a resumed job and goes on.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

static volatile sig_atomic_t stopped; /* SIGTSTP came: the next SIGCONT resumes */

static void on_stop_signal(int sig)
{
    if (!train_interrupted)
        train_interrupted = sig;
}

static void on_tstp(int sig)
{
    (void)sig;
    stopped = 1;
    raise(SIGSTOP); /* stop as the default action would; SIGCONT goes on from here */
}

static void on_cont(int sig)
{
    if (stopped) {
        stopped = 0;
        return;
    }
    on_stop_signal(sig);
}

void train_signals_install(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* every later write to the broken pipe raises it again: keep the handler (the writes
     * fail with EPIPE and the run goes on to its checkpoint) */
    sa.sa_flags = 0;
    sigaction(SIGPIPE, &sa, NULL);
    if (getenv("OMPI_COMM_WORLD_SIZE")) { /* a rank of Open MPI's mpirun */
        struct sigaction st = {.sa_handler = on_tstp, .sa_flags = SA_RESTART};
        struct sigaction sc = {.sa_handler = on_cont, .sa_flags = SA_RESTART};
        sigemptyset(&st.sa_mask);
        sigemptyset(&sc.sa_mask);
        sigaction(SIGTSTP, &st, NULL);
        sigaction(SIGCONT, &sc, NULL);
    }
}

int train_signals_exit_code(void)
{
    switch (train_interrupted) {
    case 0:
        return EXIT_OK;
    case SIGTERM:
    case SIGPIPE:
        return 128 + train_interrupted;
    default: /* SIGINT, mpirun's SIGCONT, another rank's */
        return EXIT_INTERRUPTED;
    }
}

static const char *cause(void)
{
    switch (train_interrupted) {
    case SIGTERM:
        return " (SIGTERM)";
    case SIGPIPE:
        return " (SIGPIPE: the output's reader went away)";
    case SIGCONT:
        return " (mpirun was interrupted)";
    default:
        return "";
    }
}

int train_say_interrupted(const struct trainer *t, const char *where)
{
    /* no rank leaves before rank 0's save is complete: mpirun ends the job when one exits */
    double done = 0;
    int rc = train_dist_sum(t, &done, 1);
    if (rc != 0 || t->rank != 0)
        return rc;
    /* stdout may be the pipe that broke: then stderr says it */
    FILE *out[2] = {stdout, train_interrupted == SIGPIPE ? stderr : NULL};
    for (int i = 0; i < 2 && out[i]; i++) {
        fprintf(out[i], "interrupted%s at %s: checkpoint saved to %s\n", cause(), where,
                t->ckpt_path);
        train_print_resume_command(t, out[i]);
        fflush(out[i]);
    }
    return 0;
}
