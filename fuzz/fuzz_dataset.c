/* fuzz/fuzz_dataset.c: one dataset reader (FUZZ_READER: "idx", "csv", ...) on any file,
 * through the public API a program uses: weft_dataset_open() on a [data] section, then
 * every field of the first samples read.
 *
 * The input is the file, optionally preceded by keys for the section and followed by a
 * second file (the labels of idx and npy):
 *     #keys\nheader = false\nlabel_column = 0\n#end\n<file a>\n#file2\n<file b>
 * Keys the input does not give get FUZZ_KEYS ("block_size=4;vocab_size=300" for the
 * token readers). */
#include "fuzz.h"

#include <weft/config.h>
#include <weft/dataset.h>

#ifndef FUZZ_READER
#error "FUZZ_READER names the reader this target exercises"
#endif
#ifndef FUZZ_KEYS
#define FUZZ_KEYS ""
#endif
/* "images" for idx, "path" for the others */
#ifndef FUZZ_FILE_KEY
#define FUZZ_FILE_KEY "path"
#endif

#define KEYS_OPEN "#keys\n"
#define KEYS_CLOSE "#end\n"
#define SECOND_FILE "\n#file2\n"
#define MAX_READ_BYTES (64u << 20)

static bool verbose;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init();
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    return 0;
}

static const uint8_t *find(const uint8_t *p, size_t n, const char *what)
{
    size_t m = strlen(what);
    for (size_t i = 0; n >= m && i <= n - m; i++)
        if (memcmp(p + i, what, m) == 0)
            return p + i;
    return NULL;
}

/* The "key=value;key=value" of FUZZ_KEYS that the input's own keys leave out. */
static int put_defaults(struct weft_config *cfg)
{
    char *keys = strdup(FUZZ_KEYS);
    if (!keys)
        return -1;
    int rc = 0;
    for (char *line = strtok(keys, ";"); line && rc == 0; line = strtok(NULL, ";")) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (!weft_config_has(cfg, "data", line))
            rc = weft_config_put(cfg, "data", line, eq + 1);
    }
    free(keys);
    return rc;
}

static void read_samples(weft_dataset *ds)
{
    int64_t n = weft_dataset_length(ds);
    int nf = weft_dataset_num_fields(ds);
    if (n <= 0 || nf <= 0 || nf > WEFT_DATASET_MAX_FIELDS)
        return;
    int64_t take = n < 16 ? n : 16;
    int64_t idx[16];
    for (int64_t i = 0; i < take; i++)
        idx[i] = i < take - 1 ? i : n - 1; /* the first ones and the last */
    void *buffers[WEFT_DATASET_MAX_FIELDS] = {NULL};
    bool ok = true;
    for (int f = 0; f < nf && ok; f++) {
        size_t bytes = weft_dataset_sample_bytes(ds, f);
        ok = bytes <= MAX_READ_BYTES / (size_t)take &&
             (buffers[f] = malloc(bytes * (size_t)take + 1)) != NULL;
    }
    if (ok)
        weft_dataset_read(ds, take, idx, buffers);
    for (int f = 0; f < nf; f++)
        free(buffers[f]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char ini[4096];
    size_t used = (size_t)snprintf(ini, sizeof ini, "[data]\nreader = %s\n", FUZZ_READER);
    if (size >= strlen(KEYS_OPEN) && memcmp(data, KEYS_OPEN, strlen(KEYS_OPEN)) == 0) {
        const uint8_t *close = find(data, size, KEYS_CLOSE);
        if (!close)
            return 0;
        size_t n = (size_t)(close - data) - strlen(KEYS_OPEN);
        if (n >= sizeof ini - used || memchr(data + strlen(KEYS_OPEN), '\0', n))
            return 0;
        memcpy(ini + used, data + strlen(KEYS_OPEN), n);
        used += n;
        ini[used] = '\0';
        size -= (size_t)(close - data) + strlen(KEYS_CLOSE);
        data = close + strlen(KEYS_CLOSE);
    }
    const uint8_t *second = find(data, size, SECOND_FILE);
    size_t size_a = second ? (size_t)(second - data) : size;
    fuzz_write("a", data, size_a);
    if (second)
        fuzz_write("b", second + strlen(SECOND_FILE),
                   size - size_a - strlen(SECOND_FILE));
    /* the config next to the files: relative paths resolve there */
    struct weft_config *cfg = weft_config_parse(ini, fuzz_path("fuzz.ini"));
    if (cfg && put_defaults(cfg) == 0 && weft_config_put(cfg, "data", FUZZ_FILE_KEY, "a") == 0 &&
        (!second || weft_config_put(cfg, "data", "labels", "b") == 0)) {
        weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, "data"));
        if (ds)
            read_samples(ds);
        if (verbose) /* what a seed does: FUZZ_VERBOSE=1 fuzz_dataset_csv corpus/... */
            fprintf(stderr, "%s: %s\n", FUZZ_READER,
                    ds ? "opened and read" : weft_error_message());
        weft_dataset_close(ds);
    }
    weft_config_free(cfg);
    weft_error_clear();
    unlink(fuzz_path("b"));
    return 0;
}
