/* quant_group.cuh: what the producers that quantise as they write share (rmsnorm.cu,
 * swiglu.cu): one 1 x group of a row, its values written (when asked), their absmax, the
 * scale and the codes, by one codec -- FP8 (fp8_codec.cuh) or INT8 (int8_codec.cuh) --
 * with the arithmetic of that format's own quantise pass, so a fused producer's codes are
 * the unfused path's bit for bit. */
#ifndef DLLM_CUDA_QUANT_GROUP_CUH
#define DLLM_CUDA_QUANT_GROUP_CUH

#include "kernels/cuda/bf16_codec.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/int8_codec.cuh"

/* The codecs: a scale from a group's absmax of finite values, a code from a value. */
struct qg_fp8 {
    typedef uint8_t code_t;
    int f;
    bool pow2;
    __device__ float scale(float amax) const { return fp8c_scale_from_amax(amax, f, pow2); }
    __device__ uint8_t code(float y, float s) const { return fp8c_encode(fp8c_div(y, s), f); }
};

struct qg_int8 {
    typedef int8_t code_t;
    __device__ float scale(float amax) const { return i8c_scale(amax, (float)INT8_A_MAX); }
    __device__ int8_t code(float y, float s) const { return i8c_code(y, s, (float)INT8_A_MAX); }
};

/* Columns [c0, c1) of one row, by the threads t, t + step, ... of one warp (BLOCK false:
 * t the lane, step 32) or of the whole block (BLOCK true: t threadIdx.x, step blockDim.x;
 * every thread of the block calls it). v(c) is the producer's value of column c, computed
 * twice (once for the absmax, once for the code) rather than kept. out (the row's fp32
 * values, or NULL) and q (its codes) are indexed by column; the first thread writes
 * *scale. */
template <bool BLOCK, class Q, class V>
__device__ __forceinline__ void quant_group(const Q &qz, const V &v, int c0, int c1, int t,
                                            int step, float *out, typename Q::code_t *q,
                                            float *scale)
{
    float amax = 0.0f;
    for (int c = c0 + t; c < c1; c += step) {
        float y = v(c);
        if (out)
            out[c] = y;
        amax = fmaxf(amax, fp8c_finite_abs(y));
    }
    amax = BLOCK ? block_max(amax) : warp_max(amax);
    float sc = qz.scale(amax);
    if (t == 0)
        *scale = sc;
    for (int c = c0 + t; c < c1; c += step)
        q[c] = qz.code(v(c), sc);
}

#endif
