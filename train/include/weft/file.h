/* weft/file.h (libweft-train): opening a file a user named (a data path, a checkpoint, a
 * config) without trusting that it is one. A FIFO opened for reading waits for a writer,
 * a directory reads as an error deep in a parser, a character device may never end: the
 * type is checked first, and a FIFO is never waited on. (The plugin loader checks its
 * files itself, core/elf.c.) */
#ifndef WEFT_FILE_H
#define WEFT_FILE_H

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when path names a regular file (after symbolic links), checked with stat() and
 * without opening it; else WEFT_ERR_IO with "<path>: cannot open <what>: <why>" (what may
 * be NULL: "<path>: cannot open: <why>"), why being the system's reason ("No such file or
 * directory") or what the path is ("a directory, not a regular file", "a FIFO (named
 * pipe), not a regular file", a socket, a device). */
int weft_check_regular_file(const char *path, const char *what);

/* open(path, O_RDONLY | O_CLOEXEC) of a regular file: opened with O_NONBLOCK (so a FIFO
 * cannot block), its type checked on the descriptor, then the flag cleared. The
 * descriptor, or -1 with weft_check_regular_file's errors. */
int weft_open_regular_file(const char *path, const char *what);

#ifdef __cplusplus
}
#endif
#endif
