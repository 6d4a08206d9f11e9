/* nn/internal.h: what the nn library's files share; not installed, not ABI. */
#ifndef WEFT_NN_INTERNAL_H
#define WEFT_NN_INTERNAL_H

#include "weft.h"
#include "weft/nn.h"

#define NN_INTERNAL __attribute__((visibility("hidden")))

/* A module's children in order (module.c), for containers such as Sequential. */
NN_INTERNAL int weft_module_num_children(const weft_module *m);
NN_INTERNAL weft_module *weft_module_child_at(const weft_module *m, int i);

#endif
