/* fuzz/fuzz_dataset.c: one dataset reader (FUZZ_READER: "idx", "csv", ...) on any file,
 * through the public API a program uses: weft_dataset_open() on a [data] section, then
 * every field of the first samples read.
 *
 * The input is a control byte and the file, optionally followed by a second file (the
 * labels of idx and npy):
 *     <control><file a>\n#file2\n<file b>
 * The control byte picks the reader's keys from FUZZ_CONTROL (fuzz/meson.build), so that
 * the fuzzer reaches the code each key leads to by flipping bits: for the token readers
 * block_size, vocab_size, split and val_fraction, for csv header, label_column, delimiter
 * and num_classes. FUZZ_CONTROL lists each key's choices, "block_size=4|1|2|8;split=
 * train|val" (an empty choice leaves the key out); each key takes as many bits of the
 * control value as its choices need, in order, lowest first, so control 0 is every key's
 * first choice. Two control bytes when the choices need more than 8 bits. An input may
 * instead start with keys of its own (the control value is then 0 for the others):
 *     #keys\nheader = false\nlabel_column = 0\n#end\n<file a>... */
#include "fuzz.h"

#include <weft/config.h>
#include <weft/dataset.h>

#ifndef FUZZ_READER
#error "FUZZ_READER names the reader this target exercises"
#endif
#ifndef FUZZ_CONTROL
#define FUZZ_CONTROL ""
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

/* Walks FUZZ_CONTROL: for each key, fn(ctx, key, choice k of its n) where k takes the next
 * bits of *control; the number of bits all keys take. */
static int each_control_key(uint32_t control, int (*fn)(void *ctx, const char *key,
                                                        const char *value),
                            void *ctx)
{
    char spec[512];
    snprintf(spec, sizeof spec, "%s", FUZZ_CONTROL);
    int bits = 0;
    char *save = NULL;
    for (char *item = strtok_r(spec, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            continue;
        *eq = '\0';
        int n = 1, width = 0;
        for (const char *p = eq + 1; *p; p++)
            n += *p == '|';
        while ((1 << width) < n)
            width++;
        int k = (int)(control & ((1u << width) - 1)) % n;
        control >>= width;
        bits += width;
        const char *choice = eq + 1;
        for (int i = 0; i < k; i++)
            choice = strchr(choice, '|') + 1;
        char value[64];
        snprintf(value, sizeof value, "%.*s", (int)strcspn(choice, "|"), choice);
        if (fn && value[0] && fn(ctx, item, value) != 0)
            return -1;
    }
    return bits;
}

/* A key the input's own keys leave out, as the control value chose it. */
static int put_choice(void *ctx, const char *key, const char *value)
{
    struct weft_config *cfg = ctx;
    return weft_config_has(cfg, "data", key) ? 0 : weft_config_put(cfg, "data", key, value);
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
    uint32_t control = 0;
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
    } else {
        size_t bytes = ((size_t)each_control_key(0, NULL, NULL) + 7) / 8;
        bytes = bytes ? bytes : 1; /* one byte even where no key varies: one input format */
        if (size < bytes)
            return 0;
        for (size_t i = 0; i < bytes; i++)
            control |= (uint32_t)data[i] << (8 * i);
        data += bytes;
        size -= bytes;
    }
    const uint8_t *second = find(data, size, SECOND_FILE);
    size_t size_a = second ? (size_t)(second - data) : size;
    fuzz_write("a", data, size_a);
    if (second)
        fuzz_write("b", second + strlen(SECOND_FILE),
                   size - size_a - strlen(SECOND_FILE));
    /* the config next to the files: relative paths resolve there */
    struct weft_config *cfg = weft_config_parse(ini, fuzz_path("fuzz.ini"));
    if (cfg && each_control_key(control, put_choice, cfg) >= 0 &&
        weft_config_put(cfg, "data", FUZZ_FILE_KEY, "a") == 0 &&
        (!second || weft_config_put(cfg, "data", "labels", "b") == 0)) {
        weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, "data"));
        if (ds)
            read_samples(ds);
        if (verbose) { /* what a seed does: FUZZ_VERBOSE=1 fuzz_dataset_csv corpus/... */
            fprintf(stderr, "%s (control 0x%x):", FUZZ_READER, (unsigned)control);
            for (const char *const *k = weft_config_keys(cfg, "data"); k && *k; k++)
                fprintf(stderr, " %s=%s", *k, weft_config_string(cfg, "data", *k, ""));
            fprintf(stderr, ": %s\n", ds ? "opened and read" : weft_error_message());
        }
        weft_dataset_close(ds);
    }
    weft_config_free(cfg);
    weft_error_clear();
    unlink(fuzz_path("b"));
    return 0;
}
