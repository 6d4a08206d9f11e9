/* train/file.c: opening a file a user named, refusing what is not a regular file before
 * anything could block on it (weft/file.h). Its callers are the ones that read what a
 * user names: the config loader, checkpoint loads, the io plugin's readers and
 * weft-train's argument checks. */
#define _GNU_SOURCE
#include "weft/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft/error.h"

/* "<path>: cannot open[ <what>]: <why>" */
static int cannot_open(const char *path, const char *what, const char *why)
{
    return weft_error_set(WEFT_ERR_IO, "%s: cannot open%s%s: %s", path, what ? " " : "",
                          what ? what : "", why);
}

/* Refuses st unless it is a regular file, naming what it is. */
static int regular_or_error(const char *path, const char *what, const struct stat *st)
{
    const char *type = S_ISDIR(st->st_mode)    ? "a directory"
                       : S_ISFIFO(st->st_mode) ? "a FIFO (named pipe)"
                       : S_ISSOCK(st->st_mode) ? "a socket"
                       : S_ISCHR(st->st_mode)  ? "a character device"
                       : S_ISBLK(st->st_mode)  ? "a block device"
                                               : NULL;
    if (S_ISREG(st->st_mode))
        return 0;
    char why[96];
    snprintf(why, sizeof why, "%s, not a regular file", type ? type : "a file of no known type");
    return cannot_open(path, what, why);
}

int weft_check_regular_file(const char *path, const char *what)
{
    struct stat st;
    if (!path)
        return weft_error_set(WEFT_ERR_IO, "weft_check_regular_file: path is NULL");
    if (stat(path, &st) != 0)
        return cannot_open(path, what, strerror(errno));
    return regular_or_error(path, what, &st);
}

int weft_open_regular_file(const char *path, const char *what)
{
    if (!path) {
        weft_error_set(WEFT_ERR_IO, "weft_open_regular_file: path is NULL");
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        cannot_open(path, what, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? cannot_open(path, what, strerror(errno))
                                 : regular_or_error(path, what, &st);
    int flags = rc == 0 ? fcntl(fd, F_GETFL) : -1;
    if (rc == 0 && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0))
        rc = cannot_open(path, what, strerror(errno));
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}
