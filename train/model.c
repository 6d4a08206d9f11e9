/* train/model.c: the model an INI file describes (weft/model.h). */
#include "weft/model.h"

#include <stdio.h>
#include <string.h>

#include "internal.h"
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

weft_module *train_model_layer(struct weft_config *cfg, const char *section)
{
    const char *type = weft_config_string(cfg, section, "type", NULL);
    if (!type) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'type'",
                       weft_config_name(cfg), section);
        return NULL;
    }
    weft_module *layer = build(cfg, section, type);
    if (layer && train_layer_setup(cfg, section, layer) != 0) {
        weft_module_free(layer);
        return NULL;
    }
    return layer;
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
        if (weft_config_has(cfg, *sec, "inputs")) {
            weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] inputs: the layers of a sequential model "
                                            "read the layer before them; for layers that name "
                                            "their inputs set [model] type = graph",
                           weft_config_name(cfg), *sec);
            goto fail;
        }
        weft_module *layer = train_model_layer(cfg, *sec);
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

/* [train] freeze's names in a sequential model: [layer.NAME] is child "<its index>". */
static weft_module *sequential_layer(weft_module *model, struct weft_config *cfg,
                                     const char *name)
{
    int i = 0;
    for (const char *const *sec = weft_config_sections(cfg); *sec; sec++) {
        if (strncmp(*sec, "layer.", 6) != 0)
            continue;
        if (strcmp(*sec + 6, name) == 0)
            return weft_module_child_at(model, i);
        i++;
    }
    return NULL;
}

weft_module *weft_model_from_config(struct weft_config *cfg)
{
    if (!cfg) {
        weft_error_set(WEFT_ERR_VALUE, "weft_model_from_config: the config is NULL");
        return NULL;
    }
    const char *type = weft_config_string(cfg, "model", "type", "sequential");
    weft_module *m;
    weft_module *(*layer_of)(weft_module *, struct weft_config *, const char *) = NULL;
    if (strcmp(type, "sequential") == 0) {
        m = build_sequential(cfg);
        layer_of = sequential_layer;
    } else if (strcmp(type, "graph") == 0) {
        m = train_build_graph(cfg);
    } else {
        m = build(cfg, "model", type);
    }
    if (m && train_model_freeze(cfg, m, layer_of) != 0) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}
