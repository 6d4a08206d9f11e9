/* weft/cuda_probe.h: the probe of the CUDA plugin's API (beside weft/cuda.h), which every
 * plugin that needs a CUDA device answers with (weft-cuda.so, weft-sparse-cuda.so,
 * weft-dist-nccl.so), so they refuse in the same words. Header-only, and the one header
 * of the API that needs the CUDA toolkit's: each plugin is its own shared object and
 * links the CUDA runtime itself. */
#ifndef WEFT_CUDA_PROBE_H
#define WEFT_CUDA_PROBE_H

#include <stddef.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

/* 0 when the runtime finds a device. Without a driver cudaGetDeviceCount fails with
 * error 35 and why says so: "no CUDA device: CUDA driver version is insufficient for
 * CUDA runtime version". */
static inline int weft_cuda_probe_devices(char *why, size_t why_size)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, why_size, "no CUDA device: %s", cudaGetErrorString(err));
        return 1;
    }
    if (n == 0) {
        snprintf(why, why_size, "no CUDA device: the CUDA runtime found none");
        return 1;
    }
    return 0;
}

#endif
