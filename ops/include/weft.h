/* weft.h: the user API of tensors, ops and autograd: the core (libweft: tensors, views,
 * copies, autograd, plugins) and the op layer above it (libweft-ops: the ops, autocast's
 * policies, printing, DLPack). pkg-config's weft links both.
 *
 * The other libraries have headers of their own: weft/nn.h (libweft-nn: layers, losses,
 * modules), weft/train.h (libweft-train: config, datasets, optimizers, checkpoints) and
 * weft/testkit.h (libweft-testkit); weft/sparse.h is the sparse plugin's API. */
#ifndef WEFT_H
#define WEFT_H

#include "weft/version.h"
#include "weft/error.h"
#include "weft/checked.h"
#include "weft/dtype.h"
#include "weft/device.h"
#include "weft/storage.h"
#include "weft/tensor.h"
#include "weft/ops.h"
#include "weft/autograd.h"
#include "weft/autocast.h"
#include "weft/autocast_policy.h"
#include "weft/memory.h"
#include "weft/profiler.h"
#include "weft/dlpack.h"
#include "weft/plugin.h"

#endif
