/* nn/layer_state.h: the state of the built-in layers whose state is a struct of their
 * own (layers.c), for the files that read it besides (onnx_layers.c); not installed,
 * not ABI. The other built-in types keep public structs (struct weft_conv2d_options,
 * struct weft_pool2d_params) or a plain value (Dropout's double p). */
#ifndef WEFT_NN_LAYER_STATE_H
#define WEFT_NN_LAYER_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/tensor.h"

struct linear_state {
    int64_t in_features, out_features;
};

struct batch_norm_state {
    int64_t num_features;
    double eps, momentum;
    int spatial_dims; /* 1 for BatchNorm1d, 2 for BatchNorm2d */
};

struct layer_norm_state {
    int ndims;
    int64_t shape[WEFT_MAX_DIMS];
    double eps;
    bool elementwise_affine;
};

#endif
