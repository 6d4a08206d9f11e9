/* nn/rnn_internal.h: what rnn.c and rnn_module.c share; not installed, not ABI. */
#ifndef WEFT_NN_RNN_INTERNAL_H
#define WEFT_NN_RNN_INTERNAL_H

#include "internal.h"
#include "weft/rnn.h"

/* ValueError with PyTorch's text when options could not build a torch.nn.RNN/LSTM/GRU. */
NN_INTERNAL int nn_rnn_check_options(const struct weft_rnn_options *o);

#endif
