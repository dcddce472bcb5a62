/* bf16_codec.cuh: fp32 -> bf16 on the device, the bits of kernels/cpu/convert.c: NaN keeps
 * its top bits with the quiet bit forced; otherwise add 0x7FFF + (lowest kept bit) and
 * truncate (round to nearest, ties to even; values past the largest bf16 carry into inf).
 * Shared by the conversion pass and the producers that write a bf16 copy as they go. */
#ifndef DLLM_CUDA_BF16_CODEC_CUH
#define DLLM_CUDA_BF16_CODEC_CUH

#include "kernels/cuda/common.cuh"

__device__ __forceinline__ uint16_t f32_to_bf16_rne(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
