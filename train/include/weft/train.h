/* weft/train.h: the train library (libweft-train): INI configuration and run set-up,
 * datasets and the data loader, optimizers and schedulers, safetensors checkpoints. It
 * builds on the nn library (weft/nn.h) and the core (weft.h). */
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include "weft.h"
#include "weft/nn.h"
#include "weft/config.h"
#include "weft/runtime.h"
#include "weft/dataset.h"
#include "weft/dataloader.h"
#include "weft/file.h"
#include "weft/transforms.h"
#include "weft/checkpoint.h"
#include "weft/optim.h"
#include "weft/grad_scaler.h"
#include "weft/model.h"
#include "weft/tensorboard.h"

#endif
