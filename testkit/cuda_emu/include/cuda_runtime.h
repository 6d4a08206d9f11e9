/* cuda_runtime.h (weft's CUDA emulator): the runtime API, and for C++ (the .cu sources,
 * which the build includes it into as nvcc does) the device side: weft_cuda_emu/device.h. */
#ifndef WEFT_CUDA_EMU_RUNTIME_H
#define WEFT_CUDA_EMU_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
#include "weft_cuda_emu/device.h"
#endif

#endif
