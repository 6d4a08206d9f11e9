/* train/model.c: the model an INI file describes (weft/model.h). */
#include "weft/model.h"

#include <stdio.h>
#include <string.h>

#include "weft/error.h"

/* An error from a constructor (a value it refused) gets the section it came from; a
 * config error already names it. */
static void blame_section(struct weft_config *cfg, const char *section)
{
    int code = weft_error_code();
    if (code == WEFT_OK) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] could not build the layer",
                       weft_config_name(cfg), section);
    } else if (code == WEFT_ERR_OUT_OF_MEMORY || code == WEFT_ERR_IO) {
        /* not the config's fault: keep the code (and the exit status it gives) */
        weft_error_prefix("%s: [%s]", weft_config_name(cfg), section);
    } else if (code != WEFT_ERR_CONFIG) {
        char msg[1536];
        snprintf(msg, sizeof msg, "%s", weft_error_message());
        weft_error_clear();
        weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s", weft_config_name(cfg), section, msg);
    }
}

/* The module [section] describes through its `type` key. */
static weft_module *build(struct weft_config *cfg, const char *section, const char *type)
{
    const weft_options *o = weft_config_options(cfg, section);
    weft_options_has(o, "type"); /* read, so the unknown-key check knows it */
    weft_module *m = weft_module_create(type, o);
    if (!m) {
        if (weft_error_code() == WEFT_ERR_PLUGIN && !weft_registry_find(WEFT_KIND_MODULE, type)) {
            char msg[1536];
            snprintf(msg, sizeof msg, "%s", weft_error_message());
            weft_error_clear();
            weft_options_bad_value(o, "type", "%s", msg);
        }
        blame_section(cfg, section);
    }
    return m;
}

static weft_module *build_sequential(struct weft_config *cfg)
{
    weft_module *seq = weft_nn_sequential(0, NULL);
    if (!seq)
        return NULL;
    int count = 0;
    for (const char *const *sec = weft_config_sections(cfg); *sec; sec++) {
        if (strncmp(*sec, "layer.", 6) != 0)
            continue;
        const char *type = weft_config_string(cfg, *sec, "type", NULL);
        if (!type) {
            weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'type'",
                           weft_config_name(cfg), *sec);
            goto fail;
        }
        weft_module *layer = build(cfg, *sec, type);
        if (!layer || weft_nn_sequential_append(seq, layer) != 0)
            goto fail;
        count++;
    }
    int64_t segments = 0;
    if (weft_config_int(cfg, "model", "checkpoint_segments", 0, &segments) != 0)
        goto fail;
    if (segments < 0 || segments > count) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: [model] checkpoint_segments = %lld: expected 0 (off) "
                                        "up to the number of layers (%d)",
                       weft_config_name(cfg), (long long)segments, count);
        goto fail;
    }
    if (count > 0 && weft_nn_sequential_checkpoint(seq, (int)segments) != 0)
        goto fail;
    if (count == 0) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: the model has no layers: add [layer.<name>] sections "
                                        "with a 'type' key (one of linear, conv2d, relu, ...)",
                       weft_config_name(cfg));
        goto fail;
    }
    return seq;
fail:
    weft_module_free(seq);
    return NULL;
}

weft_module *weft_model_from_config(struct weft_config *cfg)
{
    if (!cfg) {
        weft_error_set(WEFT_ERR_VALUE, "weft_model_from_config: the config is NULL");
        return NULL;
    }
    const char *type = weft_config_string(cfg, "model", "type", "sequential");
    if (strcmp(type, "sequential") == 0)
        return build_sequential(cfg);
    return build(cfg, "model", type);
}
