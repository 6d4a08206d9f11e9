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

#endif
