/* core/manifest.c: plugin manifests (weft/plugin.h): reading the .weft_manifest section
 * out of a plugin file without loading it, and reading its directives.
 *
 * Loading a plugin to learn what it provides would map its libraries too (weft-cuda.so
 * brings cuBLAS: 80 ms here), so the manifest is a section of the file that the loader
 * reads as plain bytes: the ELF header, the section headers, the section-name table and
 * the one section, each bounded by the file's size before anything is allocated. */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
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

/* The section called `want` of an ELF file of this machine's class, as a malloc'd
 * NUL-terminated copy; NULL when there is none (or the file is not such an ELF file). */
static char *read_section(int fd, uint64_t file_size, const char *want)
{
    ElfW(Ehdr) eh;
    if (!read_exact(fd, &eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
        eh.e_shentsize != sizeof(ElfW(Shdr)) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum ||
        eh.e_shoff > file_size || (uint64_t)eh.e_shnum * sizeof(ElfW(Shdr)) > file_size - eh.e_shoff)
        return NULL;
    ElfW(Shdr) *sh = malloc((size_t)eh.e_shnum * sizeof *sh);
    char *names = NULL, *text = NULL;
    if (!sh || !read_exact(fd, sh, (size_t)eh.e_shnum * sizeof *sh, eh.e_shoff))
        goto out;
    const ElfW(Shdr) *strtab = &sh[eh.e_shstrndx];
    if (strtab->sh_size == 0 || strtab->sh_size > SHSTRTAB_MAX || strtab->sh_offset > file_size ||
        strtab->sh_size > file_size - strtab->sh_offset)
        goto out;
    names = malloc(strtab->sh_size + 1);
    if (!names || !read_exact(fd, names, strtab->sh_size, strtab->sh_offset))
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    char *text = fstat(fd, &st) == 0 ? read_section(fd, (uint64_t)st.st_size,
                                                    WEFT_PLUGIN_MANIFEST_SECTION)
                                     : NULL;
    close(fd);
    return text;
}

/* ---- directives ------------------------------------------------------------------------ */

/* The next line of *p as [start, end) without the newline; false at the end. */
static bool next_line(const char **p, const char **start, const char **end)
{
    if (!**p)
        return false;
    *start = *p;
    const char *nl = strchr(*p, '\n');
    *end = nl ? nl : *p + strlen(*p);
    *p = nl ? nl + 1 : *end;
    return true;
}

/* The next space-separated word of [*p, end) into buf; false when there is none. */
static bool next_word(const char **p, const char *end, char *buf, size_t size)
{
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r'))
        (*p)++;
    const char *w = *p;
    while (*p < end && **p != ' ' && **p != '\t' && **p != '\r')
        (*p)++;
    size_t n = (size_t)(*p - w);
    if (n == 0 || n >= size)
        return false;
    memcpy(buf, w, n);
    buf[n] = '\0';
    return true;
}

int weft_manifest_check(const char *text, const char *plugin)
{
    const char *p = text ? text : "", *line, *end;
    for (int lineno = 1; next_line(&p, &line, &end); lineno++) {
        char word[256], rest[3][256];
        const char *q = line;
        if (!next_word(&q, end, word, sizeof word) || word[0] == '#')
            continue;
        if (strcmp(word, "provides") == 0) {
            int n = 0;
            for (; next_word(&q, end, rest[0], sizeof rest[0]); n++) {
                char *colon = strchr(rest[0], ':');
                if (!colon || colon == rest[0] || !colon[1])
                    return weft_error_set(WEFT_ERR_PLUGIN,
                                          "plugin %s: manifest line %d: '%s' is not KIND:NAME",
                                          plugin, lineno, rest[0]);
            }
            if (n == 0)
                return weft_error_set(WEFT_ERR_PLUGIN,
                                      "plugin %s: manifest line %d: 'provides' lists nothing",
                                      plugin, lineno);
        } else if (strcmp(word, "env") == 0) {
            int n = 0;
            while (n < 3 && next_word(&q, end, rest[n], sizeof rest[n]))
                n++;
            if (n != 3 || next_word(&q, end, word, sizeof word))
                return weft_error_set(WEFT_ERR_PLUGIN,
                                      "plugin %s: manifest line %d: expected 'env VARIABLE KEY "
                                      "DEFAULT'",
                                      plugin, lineno);
        } else {
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "plugin %s: manifest line %d: unknown directive '%s' "
                                  "(expected provides or env)",
                                  plugin, lineno, word);
        }
    }
    return 0;
}

int weft_manifest_each_provided(const char *text,
                                int (*fn)(void *ctx, const char *kind, const char *name),
                                void *ctx)
{
    const char *p = text ? text : "", *line, *end;
    while (next_line(&p, &line, &end)) {
        char word[256];
        const char *q = line;
        if (!next_word(&q, end, word, sizeof word) || strcmp(word, "provides") != 0)
            continue;
        while (next_word(&q, end, word, sizeof word)) {
            char *colon = strchr(word, ':');
            if (!colon)
                continue;
            *colon = '\0';
            int rc = fn(ctx, word, colon + 1);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

struct provides_query {
    const char *kind, *name;
};

static int match_provided(void *ctx, const char *kind, const char *name)
{
    const struct provides_query *q = ctx;
    return strcmp(kind, q->kind) == 0 && strcmp(name, q->name) == 0;
}

bool weft_manifest_provides(const char *text, const char *kind, const char *name)
{
    struct provides_query q = {kind, name};
    return weft_manifest_each_provided(text, match_provided, &q) == 1;
}

void weft_manifest_apply_env(const char *text, const weft_options *options)
{
    const char *p = text ? text : "", *line, *end;
    while (next_line(&p, &line, &end)) {
        char word[256], var[256], key[256], def[256];
        const char *q = line;
        if (!next_word(&q, end, word, sizeof word) || strcmp(word, "env") != 0 ||
            !next_word(&q, end, var, sizeof var) || !next_word(&q, end, key, sizeof key) ||
            !next_word(&q, end, def, sizeof def))
            continue;
        /* The plugin's init() reads the key again and rejects a bad value. */
        setenv(var, weft_options_string(options, key, def), 0);
    }
}
