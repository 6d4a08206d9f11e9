/* fuzz/fuzz_ini.c: the INI loader (train/config.c over inih) on any bytes: parsed as text,
 * then every section and key read through each typed getter, the unknown-name checks run
 * and an override applied, as weft-train would. A file with a NUL byte goes through
 * weft_config_load, which refuses binary files. */
#include "fuzz.h"

#include <weft/config.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init();
    return 0;
}

static void read_everything(struct weft_config *cfg)
{
    const char *const *sections = weft_config_sections(cfg);
    for (int i = 0; sections[i]; i++) {
        const char *const *keys = weft_config_keys(cfg, sections[i]);
        for (int j = 0; keys[j]; j++) {
            int64_t n;
            double d;
            bool b;
            int c;
            static const char *const choices[] = {"sgd", "adam", "adamw", NULL};
            weft_config_string(cfg, sections[i], keys[j], NULL);
            weft_config_int(cfg, sections[i], keys[j], 0, &n);
            weft_config_double(cfg, sections[i], keys[j], 0, &d);
            weft_config_bool(cfg, sections[i], keys[j], false, &b);
            weft_config_choice(cfg, sections[i], keys[j], choices, 0, &c);
            weft_error_clear();
            if (j % 3 == 2) /* leave some unknown, for the checks */
                break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memchr(data, '\0', size)) {
        struct weft_config *cfg = weft_config_load(fuzz_write("a", data, size));
        weft_config_free(cfg);
        weft_error_clear();
        return 0;
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct weft_config *cfg = weft_config_parse(text, "fuzz.ini");
    if (cfg) {
        read_everything(cfg);
        /* a failed setup, explained by a typo if there is one */
        weft_config_string(cfg, "data", "reader", NULL);
        weft_config_string(cfg, "runtime", "backend", NULL);
        int rc = weft_error_set(WEFT_ERR_CONFIG, "fuzz.ini: [data] missing key 'reader'");
        weft_config_explain_error(cfg, rc);
        weft_error_clear();
        weft_config_check_unknown(cfg);
        weft_error_clear();
        /* the first line as a --set override */
        char *nl = strchr(text, '\n');
        if (nl)
            *nl = '\0';
        weft_config_set(cfg, text);
        weft_error_clear();
        read_everything(cfg);
    }
    weft_config_free(cfg);
    weft_error_clear();
    free(text);
    return 0;
}
