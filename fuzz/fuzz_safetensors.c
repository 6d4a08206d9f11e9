/* fuzz/fuzz_safetensors.c: the safetensors loader (train/safetensors.c) on any file: the
 * header, the JSON, the offsets and the length are validated before anything is
 * allocated. Each input is loaded twice: metadata only, then with its tensors onto the
 * CPU when the cpu backend is there (fuzz/meson.build says why it may not be). */
#include "fuzz.h"

#include <weft/backend.h>
#include <weft/checkpoint.h>
#include <weft/device.h>

static bool have_cpu;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init();
    have_cpu = weft_backend_get(WEFT_DEVICE_CPU) != NULL;
    if (!have_cpu)
        fprintf(stderr, "fuzz_safetensors: no cpu backend (%s): headers only\n",
                weft_error_message());
    weft_error_clear();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("a", data, size);
    struct weft_metadata *meta = NULL;
    struct weft_tensor_dict *dict = NULL;
    int rc = weft_safetensors_load(path, WEFT_CPU, NULL, &meta);
    weft_metadata_free(meta);
    weft_error_clear();
    if (rc == 0 && have_cpu) {
        weft_safetensors_load(path, WEFT_CPU, &dict, &meta);
        weft_tensor_dict_free(dict);
        weft_metadata_free(meta);
        weft_error_clear();
    }
    return 0;
}
