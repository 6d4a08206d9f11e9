/* plugins/cuda/cuda_plugin.h: what the CUDA plugin's files share (not installed, not
 * ABI). Included by the plain-C files (gcc) and by the kernels (nvcc). */
#ifndef WEFT_CUDA_PLUGIN_H
#define WEFT_CUDA_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <weft/backend.h>
#include <weft/error.h>
#include <weft/kernel.h>
#include <weft/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_MAX_DEVICES 64

/* Checks a CUDA runtime call: 0, or WEFT_ERR_DEVICE with CUDA's message and the call's
 * text ("CUDA error: out of memory (cudaMemcpyAsync(...) at backend.c:120)"). */
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)
int cuda_check(cudaError_t err, const char *call, const char *file, int line);
/* Checks the launch of the kernel just queued (cudaGetLastError). */
#define CUDA_CHECK_LAUNCH(what) cuda_check(cudaGetLastError(), what, __FILE__, __LINE__)

/* backend.c: counts the devices and registers the backend and the "cuda.*" extras;
 * shutdown returns every cached block to the driver. */
int cuda_backend_register(void);
void cuda_backend_shutdown(void);
/* Number of devices (cached at init). */
int cuda_device_count(void);
/* Makes `index` the calling thread's current device; 0 or negative with error. */
int cuda_set_device(int index);
/* The stream weft queues work for device `index` on: the legacy default stream (NULL)
 * unless set through the "cuda.set_stream" extra. Kernels, copies and cuBLAS all use
 * it, so weft's work on a device runs in order. */
cudaStream_t cuda_current_stream(int index);

/* ---- kernel families: each registers its kernels for device type cuda ------------- */
int cuda_register_elementwise_kernels(void); /* copy (with conversion), unary, binary */
int cuda_register_fill_kernels(void);        /* fill, arange, rand_uniform/normal, randint */
int cuda_register_matmul_kernels(void);      /* matmul through cuBLAS */
/* "cuBLAS 13.0.2" into buf (for features). */
void cuda_blas_version(char *buf, size_t size);
/* Destroys the cuBLAS handles (plugin fini). */
void cuda_blas_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
