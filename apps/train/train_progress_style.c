/* apps/train/train_progress_style.c: [train] progress = auto | bar | lines | none.
 *
 * auto draws the progress bar where the output is a terminal and prints whole lines
 * elsewhere (a file, a pipe, CI). Under Open MPI's mpirun the rank's own stdout says
 * nothing: mpirun gives each rank a pseudo-terminal of its own, whatever its own output
 * is, and sets no variable that tells (the environment of a rank is the same, bar ids and
 * ports, with mpirun's output on a terminal or in a file: checked on Open MPI 4.1). So
 * the rank looks at mpirun's: its parent on the launching node is mpirun (a daemon,
 * orted, elsewhere, whose output is no terminal), and /proc/<parent>/fd/1 is mpirun's
 * stdout.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train.h"

/* Whether the launcher that started this process (Open MPI's mpirun or its daemon) writes
 * to a terminal; -1 when the parent is no such launcher. */
static int launcher_writes_to_tty(void)
{
    char path[64], comm[64] = "";
    pid_t parent = getppid();
    snprintf(path, sizeof path, "/proc/%ld/comm", (long)parent);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    if (!fgets(comm, sizeof comm, f))
        comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    static const char *const launchers[] = {"mpirun", "mpiexec", "orterun", "orted", "prterun",
                                            "prted", NULL};
    bool known = false;
    for (int i = 0; launchers[i] && !known; i++)
        known = strcmp(comm, launchers[i]) == 0;
    if (!known)
        return -1;
    snprintf(path, sizeof path, "/proc/%ld/fd/1", (long)parent);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISCHR(st.st_mode))
        return 0; /* a file, a pipe, a socket, or nothing we may see */
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int tty = isatty(fd);
    close(fd);
    return tty;
}

int train_progress_style(struct trainer *t)
{
    static const char *const styles[] = {"auto", "bar", "lines", "none", NULL};
    int style;
    if (weft_config_choice(t->cfg, "train", "progress", styles, 0, &style) != 0)
        return weft_error_code();
    if (style == 0) {
        bool tty = isatty(STDOUT_FILENO);
        int launcher = tty && getenv("OMPI_COMM_WORLD_SIZE") ? launcher_writes_to_tty() : -1;
        style = (launcher >= 0 ? launcher : tty) ? 1 : 2;
    }
    t->tty = style == 1;
    t->quiet_steps = style == 3;
    return 0;
}
