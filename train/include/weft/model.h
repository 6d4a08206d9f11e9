/* weft/model.h: the model an INI file describes (the train library).
 *
 *     [model]
 *     type = sequential          ; the default
 *
 *     [layer.fc1]                ; every [layer.<name>] section, in file order
 *     type = linear              ; a registered module type (weft/nn.h)
 *     in_features = 784          ; that type's keys: its torch.nn constructor's
 *     out_features = 256
 *
 * A sequential model is a torch.nn.Sequential of its layers (children "0", "1", ...,
 * so its state_dict loads into PyTorch's). Any other type is one module built from the
 * keys of [model] itself (a plugin's `type = gpt`). Every type is found in the registry,
 * which loads the plugin that provides it: a plugin adds a layer type by registering it
 * (its manifest saying "provides module:<name>"), with nothing to change here.
 */
#ifndef WEFT_MODEL_H
#define WEFT_MODEL_H

#include "weft/config.h"
#include "weft/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model of cfg; NULL with an error (WEFT_ERR_CONFIG) naming the file, the section
 * and the key on a bad config: an unknown type lists the registered ones and the
 * closest. The caller owns the result (weft_module_free). */
weft_module *weft_model_from_config(struct weft_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
