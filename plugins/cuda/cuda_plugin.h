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

/* backend.c: counts the devices and registers the backend and api:cuda (weft/cuda.h);
 * shutdown returns every cached block to the driver. */
int cuda_backend_register(void);
/* The device type weft gave the backend when it registered (not a fixed number). */
extern int cuda_device_type;
void cuda_backend_shutdown(void);
/* Number of devices (cached at init). */
int cuda_device_count(void);
/* Makes `index` the calling thread's current device; 0 or negative with error. */
int cuda_set_device(int index);
/* The stream weft queues work for device `index` on: the legacy default stream (NULL)
 * unless set through api:cuda's set_stream. Kernels, copies and cuBLAS all use
 * it, so weft's work on a device runs in order. */
cudaStream_t cuda_current_stream(int index);

/* ---- kernel families: each file's table of its kernels (plugin.c registers them) ------
 * Each ends with a row of fn NULL. */
extern const struct weft_kernel_entry cuda_elementwise_kernels[]; /* copy (with conversion), unary, binary */
extern const struct weft_kernel_entry cuda_fill_kernels[];        /* fill, arange, linspace, rand_* */
extern const struct weft_kernel_entry cuda_matmul_kernels[];      /* matmul through cuBLAS */
extern const struct weft_kernel_entry cuda_where_clamp_kernels[]; /* where, clamp */
extern const struct weft_kernel_entry cuda_reduce_kernels[];      /* sum ... any, max/min with indices */
extern const struct weft_kernel_entry cuda_softmax_kernels[];     /* softmax, log_softmax */
extern const struct weft_kernel_entry cuda_index_kernels[];       /* index_select, gather, scatter_add */
extern const struct weft_kernel_entry cuda_conv_kernels[];        /* im2col, col2im, max/avg pool2d (+ backward) */
extern const struct weft_kernel_entry cuda_optim_kernels[];       /* sgd_step, adam_step, rmsprop_step */
extern const struct weft_kernel_entry cuda_norm_kernels[];        /* native_layer_norm and its backward */
extern const struct weft_kernel_entry cuda_activation_kernels[];  /* gelu_tanh, gelu_backward, add_bias_gelu */
extern const struct weft_kernel_entry cuda_embedding_kernels[];   /* embedding_dense_backward */
extern const struct weft_kernel_entry cuda_attention_kernels[];   /* sdpa_flash and its backward */
extern const struct weft_kernel_entry cuda_divmod_kernels[];      /* floor_divide, remainder */
extern const struct weft_kernel_entry cuda_scatter_kernels[];     /* scatter, scatter_reduce */
extern const struct weft_kernel_entry cuda_scan_sort_kernels[];   /* cumsum, cumprod, sort */
extern const struct weft_kernel_entry cuda_rnn_kernels[];         /* rnn_layer and its backward */
extern const struct weft_kernel_entry cuda_interpolate_kernels[]; /* upsample and its backward */
extern const struct weft_kernel_entry cuda_cdist_kernels[];       /* cdist and its backward */
/* The fused optimizer steps' ids, which their kernel tells apart (kernels_optim.cu). */
int cuda_optim_ops_init(void);
int cuda_register_rnn_kernels(void);         /* rnn_layer and its backward */
/* The device's cuBLAS handle (a cublasHandle_t; kernels_matmul.c makes it on first use),
 * bound to its current stream; NULL with the error set. The caller has made `index` the
 * current device. */
void *cuda_blas_handle(int index);
/* "cuBLAS 13.0.2" into buf (for features). */
void cuda_blas_version(char *buf, size_t size);
/* Destroys the cuBLAS handles (plugin fini). */
void cuda_blas_shutdown(void);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* ---- device helpers the kernels share (nvcc only) ------------------------------------ */
#include <string.h>
#include <type_traits>

namespace wc {

/* Linear index -> byte offset of each operand, over a weft_iter's shape (innermost last,
 * row-major as weft_iter_run walks it). Kernels also fill a weft_iter by hand (one
 * operand, dims in row-major order) to walk a sub-space such as a reduction's dims. */
template <int NOPS>
__host__ __device__ __forceinline__ void iter_offsets(const weft_iter &it, int64_t linear,
                                                      int64_t *off)
{
    for (int k = 0; k < NOPS; k++)
        off[k] = 0;
    for (int d = it.ndim - 1; d >= 0; d--) {
        int64_t size = it.shape[d];
        int64_t c = linear % size;
        linear /= size;
        for (int k = 0; k < NOPS; k++)
            off[k] += c * it.strides[k][d];
    }
}

/* A double scalar operand as compute type C, as the cpu plugin converts it: integers
 * through int64 (saturated, NaN is 0), bool "!= 0", floating types a cast. */
template <typename C> __host__ __device__ inline C scalar_as(double v)
{
    if constexpr (std::is_same<C, bool>::value)
        return v != 0;
    else if constexpr (std::is_floating_point<C>::value)
        return (C)v;
    else {
        if (v != v)
            return 0;
        if (v >= 9223372036854775807.0)
            return (C)INT64_MAX;
        if (v <= -9223372036854775808.0)
            return (C)INT64_MIN;
        return (C)(int64_t)v;
    }
}

/* __shfl_xor_sync for any trivially copyable value whose size is a multiple of 4. */
template <typename T> __device__ __forceinline__ T shfl_xor(T v, int mask)
{
    static_assert(sizeof(T) % 4 == 0, "shuffled values are moved as 32-bit words");
    int w[sizeof(T) / 4];
    memcpy(w, &v, sizeof v);
    for (int i = 0; i < (int)(sizeof(T) / 4); i++)
        w[i] = __shfl_xor_sync(0xffffffffu, w[i], mask);
    memcpy(&v, w, sizeof v);
    return v;
}

/* Every lane of a full warp gets f over the warp's 32 values (f associative and
 * commutative). */
template <typename T, typename F> __device__ __forceinline__ T warp_reduce(T v, F f)
{
    for (int mask = 16; mask > 0; mask >>= 1)
        v = f(v, shfl_xor(v, mask));
    return v;
}

/* Every thread of the block gets f over the block's values. blockDim.x is a multiple of
 * 32 (at most 1024), every thread calls it, and smem holds 32 values. */
template <typename T, typename F> __device__ __forceinline__ T block_reduce(T v, F f, T *smem)
{
    v = warp_reduce(v, f);
    int warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    if (threadIdx.x % 32 == 0)
        smem[warp] = v;
    __syncthreads();
    v = smem[0];
    for (int w = 1; w < nwarps; w++)
        v = f(v, smem[w]);
    __syncthreads(); /* smem may be reused at once */
    return v;
}

} // namespace wc
#endif
#endif
