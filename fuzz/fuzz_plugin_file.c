/* fuzz/fuzz_plugin_file.c: what the plugin loader reads of a candidate file as bytes
 * before dlopen() ever sees it (core/elf.c): the whole-file check that keeps a cut or
 * damaged shared object from killing the process with SIGBUS, and the manifest section.
 * The input is the file. Nothing here calls dlopen(): the check is the target. */
#include "fuzz.h"

#include <weft/plugin.h>

#include "internal.h" /* weft_manifest_read: elf.c is compiled into this target */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("weft-fuzz.so", data, size);
    weft_plugin_check_file(path);
    weft_error_clear();
    char *manifest = weft_manifest_read(path);
    if (manifest)
        weft_manifest_check(manifest, "fuzz");
    free(manifest);
    weft_error_clear();
    return 0;
}
