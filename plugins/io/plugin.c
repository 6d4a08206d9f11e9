/* plugins/io/plugin.c: weft-io.so's descriptor; init registers the dataset readers. */
#include <weft/plugin.h>
#include <weft/version.h>

#include "io.h"

static int io_probe(char *why, size_t why_size)
{
    (void)why;
    (void)why_size;
    return 0;
}

static int io_init(const weft_options *options)
{
    (void)options;
    const void *const readers[] = {
        &io_idx_reader,       &io_csv_reader, &io_npy_reader,
        &io_synthetic_reader, &io_mtx_reader, &io_libsvm_reader,
        &io_text_reader,      &io_tokens_reader,
    };
    return weft_register_all((int)(sizeof readers / sizeof *readers), readers);
}

WEFT_PLUGIN_MANIFEST("provides reader:idx reader:csv reader:npy reader:synthetic reader:mtx "
                     "reader:libsvm reader:text reader:tokens\n");

static const struct weft_plugin io_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "io", struct weft_plugin),
    .manifest = weft_plugin_manifest,
    .version = WEFT_VERSION_STRING,
#ifdef WEFT_IO_HAVE_ZLIB
    .description = "dataset readers: idx, csv, npy, synthetic, mtx, libsvm, text, tokens "
                   "(gzip'd files too)",
#else
    .description = "dataset readers: idx, csv, npy, synthetic, mtx, libsvm, text, tokens "
                   "(built without zlib)",
#endif
    .probe = io_probe,
    .init = io_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &io_plugin;
}
