/* weft/runtime.h: process-wide set-up from a configuration. */
#ifndef WEFT_RUNTIME_H
#define WEFT_RUNTIME_H

#include <stdbool.h>

#include "weft/config.h"
#include "weft/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads [runtime] (backend, device, threads, seed, plugins, plugin_path, wait_policy,
 * allow_tf32) from cfg (NULL:
 * defaults), extends the plugin search path, loads the named plugins and the backend's
 * plugin, applies threads and seed, and sets *device (unless NULL) to the selected device. Errors name
 * the key; an unusable backend fails with the plugin's probe reason (WEFT_ERR_DEVICE). */
int weft_runtime_init(struct weft_config *cfg, weft_device *device);

#ifdef __cplusplus
}
#endif
#endif
