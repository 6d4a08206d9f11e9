/* core/elf.c: what the loader reads of a plugin file as plain bytes, before (or instead
 * of) dlopen(): its manifest section, and whether the file is whole.
 *
 * Loading a plugin to learn what it provides would map its libraries too (weft-cuda.so
 * brings cuBLAS: 80 ms here), so the manifest is a section of the file read as bytes: the
 * ELF header, the section headers, the section-name table and the one section, each
 * bounded by the file's size before anything is allocated. And dlopen() of a truncated
 * shared object does not fail, it dies of SIGBUS when it touches a segment past the end
 * of the file: the loader checks first that the header's sizes are sane and that the
 * program headers, every loadable segment, the dynamic section and the section headers
 * lie inside the file (weft_plugin_check_file, for tools that dlopen() a plugin
 * themselves). fuzz/fuzz_plugin_file.c runs both readers on arbitrary bytes. */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "weft/error.h"
#include "weft/plugin.h"

#define MANIFEST_MAX (64u << 10)  /* a manifest is a few lines */
#define SHSTRTAB_MAX (1u << 20)

static bool read_exact(int fd, void *buf, size_t n, uint64_t at)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(at + done));
        if (r <= 0)
            return false;
        done += (size_t)r;
    }
    return true;
}

/* The ELF header, when the file is an ELF file of this machine's class. */
static bool read_header(int fd, ElfW(Ehdr) *eh)
{
    return read_exact(fd, eh, sizeof *eh, 0) && memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 &&
           eh->e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32);
}

/* The section called `want` of an ELF file of this machine's class, as a malloc'd
 * NUL-terminated copy; NULL when there is none (or the file is not such an ELF file), and
 * NULL with WEFT_ERR_OUT_OF_MEMORY when a copy could not be allocated: no memory is not
 * "no manifest". */
static char *read_section(int fd, uint64_t file_size, const char *want)
{
    ElfW(Ehdr) eh;
    if (!read_header(fd, &eh) || eh.e_shentsize != sizeof(ElfW(Shdr)) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum ||
        eh.e_shoff > file_size || (uint64_t)eh.e_shnum * sizeof(ElfW(Shdr)) > file_size - eh.e_shoff)
        return NULL;
    ElfW(Shdr) *sh = malloc((size_t)eh.e_shnum * sizeof *sh);
    char *names = NULL, *text = NULL;
    if (!sh) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory reading the section headers of a "
                                               "plugin file");
        goto out;
    }
    if (!read_exact(fd, sh, (size_t)eh.e_shnum * sizeof *sh, eh.e_shoff))
        goto out;
    const ElfW(Shdr) *strtab = &sh[eh.e_shstrndx];
    if (strtab->sh_size == 0 || strtab->sh_size > SHSTRTAB_MAX || strtab->sh_offset > file_size ||
        strtab->sh_size > file_size - strtab->sh_offset)
        goto out;
    names = malloc(strtab->sh_size + 1);
    if (!names) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory reading the section names of a "
                                               "plugin file");
        goto out;
    }
    if (!read_exact(fd, names, strtab->sh_size, strtab->sh_offset))
        goto out;
    names[strtab->sh_size] = '\0';
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        const ElfW(Shdr) *s = &sh[i];
        if (s->sh_name >= strtab->sh_size || strcmp(names + s->sh_name, want) != 0)
            continue;
        if (s->sh_type == SHT_NOBITS || s->sh_size > MANIFEST_MAX || s->sh_offset > file_size ||
            s->sh_size > file_size - s->sh_offset)
            break;
        text = malloc(s->sh_size + 1);
        if (!text)
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory reading a plugin's manifest");
        if (text && !read_exact(fd, text, s->sh_size, s->sh_offset)) {
            free(text);
            text = NULL;
        }
        if (text)
            text[s->sh_size] = '\0'; /* the string's own NUL is inside; this bounds a bad one */
        break;
    }
out:
    free(names);
    free(sh);
    return text;
}

char *weft_manifest_read(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no wait, no manifest */
    if (fd < 0)
        return NULL;
    struct stat st;
    char *text = fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                     ? read_section(fd, (uint64_t)st.st_size, WEFT_PLUGIN_MANIFEST_SECTION)
                     : NULL;
    close(fd);
    return text;
}


/* The loader's check of a candidate file: "cannot load plugin P: truncated ELF file: ..."
 * with what lies where, or 0. */
static int damaged(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int damaged(const char *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return weft_error_set(WEFT_ERR_PLUGIN, "cannot load plugin %s: %s: a cut or damaged file",
                          path, what);
}

/* [offset, offset + n) inside a file of size bytes, without overflow. */
static bool inside(uint64_t offset, uint64_t n, uint64_t size)
{
    return offset <= size && n <= size - offset;
}

/* Everything dlopen() maps or reads before it could fail cleanly: the header's sizes, the
 * program headers, each loadable segment and the dynamic section, and the section header
 * table (which the loader does not need, but a file cut before it is cut). */
static int check_image(int fd, const char *path, uint64_t size)
{
    ElfW(Ehdr) eh;
    if (!read_header(fd, &eh))
        return 0; /* not ELF, or not ours: dlopen() refuses it cleanly */
    if (eh.e_ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB
                                                                           : ELFDATA2MSB))
        return 0; /* the other byte order: dlopen() says "wrong ELF data" */
    if (eh.e_ehsize != sizeof eh || eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 ||
        eh.e_phnum == PN_XNUM)
        return damaged(path, "bad ELF header: header size %u (expected %zu), program header "
                             "size %u (expected %zu), %u program headers",
                       eh.e_ehsize, sizeof eh, eh.e_phentsize, sizeof(ElfW(Phdr)), eh.e_phnum);
    uint64_t phsize = (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr));
    if (!inside(eh.e_phoff, phsize, size))
        return damaged(path, "truncated ELF file: the program headers end at byte %llu, the "
                             "file has %llu",
                       (unsigned long long)eh.e_phoff + (unsigned long long)phsize,
                       (unsigned long long)size);
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        if (!read_exact(fd, &ph, sizeof ph, eh.e_phoff + (uint64_t)i * sizeof ph))
            return damaged(path, "unreadable program header %u", i);
        if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC)
            continue;
        if (!inside(ph.p_offset, ph.p_filesz, size))
            return damaged(path, "truncated ELF file: segment %u ends at byte %llu, the file "
                                 "has %llu",
                           i, (unsigned long long)ph.p_offset + (unsigned long long)ph.p_filesz,
                           (unsigned long long)size);
        if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz)
            return damaged(path, "segment %u has %llu bytes in the file but %llu in memory", i,
                           (unsigned long long)ph.p_filesz, (unsigned long long)ph.p_memsz);
    }
    if (eh.e_shnum != 0 || eh.e_shoff != 0) {
        uint64_t shsize = (uint64_t)eh.e_shnum * eh.e_shentsize;
        if (eh.e_shentsize != sizeof(ElfW(Shdr)) || !inside(eh.e_shoff, shsize, size))
            return damaged(path, "truncated ELF file: the section headers end at byte %llu, "
                                 "the file has %llu",
                           (unsigned long long)eh.e_shoff + (unsigned long long)shsize,
                           (unsigned long long)size);
    }
    return 0;
}

int weft_elf_check_whole(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a FIFO would block dlopen() */
        return weft_error_set(WEFT_ERR_PLUGIN, "cannot load plugin %s: not a regular file",
                              path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0; /* dlopen() says why, in its words */
    int rc = fstat(fd, &st) == 0 ? check_image(fd, path, (uint64_t)st.st_size) : 0;
    close(fd);
    return rc;
}
