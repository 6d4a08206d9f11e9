/* weft.h: the user API of weft, a deep-learning tensor framework in C. */
#ifndef WEFT_H
#define WEFT_H

#include "weft/version.h"
#include "weft/error.h"
#include "weft/dtype.h"
#include "weft/device.h"
#include "weft/storage.h"
#include "weft/tensor.h"
#include "weft/ops.h"
#include "weft/autograd.h"
#include "weft/config.h"
#include "weft/runtime.h"
#include "weft/dataset.h"
#include "weft/dataloader.h"
#include "weft/checkpoint.h"
#include "weft/nn.h"
#include "weft/optim.h"
#include "weft/conformance.h"
#include "weft/layout.h"
#include "weft/sparse.h"

#endif
