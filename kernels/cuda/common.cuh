/* common.cuh: small device helpers shared by the kernels: warp and block reductions,
 * grid sizing, the launch form and its check, and the argument check that aborts with
 * the op name.
 * Everything here is static/inline: no definitions with external linkage. */
#ifndef DLLM_CUDA_COMMON_CUH
#define DLLM_CUDA_COMMON_CUH

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda_ops.h"

/* The one launch form of every kernel:
 *   DLLM_LAUNCH(kernel, grid, block, smem, stream)(args...);
 * is kernel<<<grid, block, smem, stream>>>(args...) under nvcc, and in the emulation
 * build (host C++ compiler) runs the grid on the host (kernels/cuda_emu/cuda_emu.h). */
#ifdef __CUDACC__
#define DLLM_LAUNCH(kernel, grid, block, smem, stream) kernel<<<(grid), (block), (smem), (stream)>>>
#ifndef DLLM_DYNAMIC_SHARED
#define DLLM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
#else
#define DLLM_LAUNCH(kernel, grid, block, smem, stream) DLLM_EMU_LAUNCH(kernel, grid, block, smem, stream)
#endif

/* A kernel launch is checked at once (configuration errors); faults inside the kernel
 * surface at the next synchronising call. */
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())

/* A programming error in the arguments: say which op and why, then abort. */
#define DLLM_CUDA_REQUIRE(cond, ...)                                                        \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "dllm-rl: %s: ", __func__);                                     \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                              \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static inline cudaStream_t as_stream(dllm_cuda_stream s) { return (cudaStream_t)s; }

/* Blocks for a grid-stride loop over n items: enough to fill the GPU, capped so the
 * count fits the grid limit. */
static inline unsigned grid_for(size_t n, int threads)
{
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b < 1)
        b = 1;
    if (b > 65535u * 8u)
        b = 65535u * 8u;
    return (unsigned)b;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread
 * gets the result. Uses 32 words of shared memory and two barriers. */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0)
        part[wid] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ double block_sum_d(double v)
{
    __shared__ double partd[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0)
        partd[wid] = v;
    __syncthreads();
    v = lane < nw ? partd[lane] : 0.0;
    return warp_sum_d(v);
}

__device__ __forceinline__ float block_max(float v)
{
    __shared__ float partm[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        partm[wid] = v;
    __syncthreads();
    v = lane < nw ? partm[lane] : -INFINITY;
    return warp_max(v);
}

#endif
