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

static int io_init(void)
{
    const struct weft_dataset_reader *const readers[] = {
        &io_idx_reader, &io_csv_reader,    &io_npy_reader,
        &io_synthetic_reader, &io_mtx_reader, &io_libsvm_reader,
    };
    for (size_t i = 0; i < sizeof readers / sizeof *readers; i++) {
        int rc = weft_dataset_reader_register(readers[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static const struct weft_plugin io_plugin = {
    .abi_version = WEFT_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(struct weft_plugin),
    .name = "io",
    .version = WEFT_VERSION_STRING,
#ifdef WEFT_IO_HAVE_ZLIB
    .description = "dataset readers: idx, csv, npy, synthetic, mtx, libsvm (gzip'd files too)",
#else
    .description = "dataset readers: idx, csv, npy, synthetic, mtx, libsvm (built without "
                   "zlib)",
#endif
    .probe = io_probe,
    .init = io_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &io_plugin;
}
