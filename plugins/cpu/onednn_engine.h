/* plugins/cpu/onednn_engine.h: the plugin's one oneDNN CPU engine (onednn_engine.c). */
#ifndef WEFT_CPU_ONEDNN_ENGINE_H
#define WEFT_CPU_ONEDNN_ENGINE_H

#include "onednn_guard.h"

/* Made on the first call; NULL when oneDNN could not make it (its status in *status). */
dnnl_engine_t cpu_onednn_engine(dnnl_status_t *status);

#endif
