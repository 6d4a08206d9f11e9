/* weft/runtime.h: process-wide set-up from a configuration. */
#ifndef WEFT_RUNTIME_H
#define WEFT_RUNTIME_H

#include <stdbool.h>

#include "weft/config.h"
#include "weft/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads [runtime] (backend, device, seed, plugins, plugin_path, allow_tf32) from cfg
 * (NULL: defaults), extends the plugin search path, makes cfg the source of plugins'
 * options (each plugin loaded from now on gets the section named after it: [cpu]
 * threads, wait_policy for weft-cpu.so), loads the backend's plugin and the named
 * plugins, applies the seed and sets *device (unless NULL) to the selected device.
 * Errors name the key; an unusable backend fails with the plugin's probe reason
 * (WEFT_ERR_DEVICE). cfg stays the plugins' source until it is freed
 * (weft_config_serve_plugins). */
int weft_runtime_init(struct weft_config *cfg, weft_device *device);

#ifdef __cplusplus
}
#endif
#endif
