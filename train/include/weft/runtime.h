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
 * (WEFT_ERR_DEVICE). cfg must outlive the plugins' loading; weft_config_free() ends its
 * role as their source. */
int weft_runtime_init(struct weft_config *cfg, weft_device *device);
/* Stops handing cfg's sections to plugins (weft_config_free calls it). */
void weft_runtime_forget_config(const struct weft_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
