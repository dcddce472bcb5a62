/* int8_codec.cuh: the INT8 codes of kernels/int8.h on the device, shared by the linear's
 * own activation pass (gemm_int8.cu) and the producers that quantise as they write
 * (rmsnorm.cu, swiglu.cu), so both give the CPU's bits: scale amax / Q over the finite
 * values (1 when amax is 0), code clamp(rint(x / s), +-Q) with an IEEE fp32 division
 * (__fdiv_rn, whatever nvcc's flags), NaN to +Q. */
#ifndef DLLM_CUDA_INT8_CODEC_CUH
#define DLLM_CUDA_INT8_CODEC_CUH

__device__ __forceinline__ float i8c_finite_abs(float x)
{
    float a = fabsf(x);
    return a <= FLT_MAX ? a : 0.0f;
}

__device__ __forceinline__ float i8c_scale(float amax, float qmax)
{
    return amax > 0.0f ? __fdiv_rn(amax, qmax) : 1.0f;
}

__device__ __forceinline__ int8_t i8c_code(float x, float s, float qmax)
{
    float v = __fdiv_rn(x, s);
    v = v == v ? v : qmax;
    v = v < qmax ? v : qmax;
    v = v > -qmax ? v : -qmax;
    return (int8_t)(int)rintf(v);
}

#endif
