/* train/internal.h: what the train library's files share; not installed, not ABI. */
#ifndef WEFT_TRAIN_INTERNAL_H
#define WEFT_TRAIN_INTERNAL_H

#include "weft/registry.h"

#define TRAIN_INTERNAL __attribute__((visibility("hidden")))

/* The kinds this library defines (dataset.c, dist.c, optim.c), registered when it loads
 * (kinds.c). */
TRAIN_INTERNAL extern const struct weft_kind weft_reader_kind;
TRAIN_INTERNAL extern const struct weft_kind weft_communicator_kind;
TRAIN_INTERNAL extern const struct weft_kind weft_optimizer_kind;

/* The model an INI file describes (weft/model.h), in parts: one [layer.*] section's layer
 * with what the section says beyond its constructor (model.c, layer_setup.c: init,
 * bias_init, requires_grad), a graph model (model_graph.c) and [train] freeze, whose
 * names layer_of finds in the model (NULL: module paths only). */
struct weft_config;
typedef struct weft_module weft_module;
TRAIN_INTERNAL weft_module *train_model_layer(struct weft_config *cfg, const char *section);
TRAIN_INTERNAL int train_layer_setup(struct weft_config *cfg, const char *section,
                                     weft_module *layer);
TRAIN_INTERNAL weft_module *train_build_graph(struct weft_config *cfg);
TRAIN_INTERNAL int train_model_freeze(struct weft_config *cfg, weft_module *model,
                                      weft_module *(*layer_of)(weft_module *model,
                                                               struct weft_config *cfg,
                                                               const char *name));

#endif
