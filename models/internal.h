/* models/internal.h: what the models library's files share; not installed, not ABI. */
#ifndef WEFT_MODELS_INTERNAL_H
#define WEFT_MODELS_INTERNAL_H

#include "weft/nn.h"

#define MODELS_INTERNAL __attribute__((visibility("hidden")))

/* GPT's onnx_export method (gpt_onnx.c; weft/onnx.h). */
MODELS_INTERNAL const char *models_gpt_onnx_export(weft_module *m, struct weft_onnx_graph *g,
                                                   const char *input);

#endif
