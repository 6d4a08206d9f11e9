/* plugins/io/mapped.c: whole files mapped read-only, for readers that serve samples
 * straight from the file (npy). Pages are shared with the page cache and read-only, so
 * any number of threads may read them at once. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"

int io_map_open(struct io_map *m, const char *path)
{
    memset(m, 0, sizeof *m);
    int fd = weft_open_regular_file(path, NULL); /* a FIFO is refused, never waited on */
    if (fd < 0)
        return weft_error_code();
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = weft_error_set(WEFT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            rc = weft_error_set(WEFT_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        else {
            m->data = p;
            m->size = (size_t)st.st_size;
        }
    }
    close(fd);
    return rc;
}

void io_map_close(struct io_map *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}
