/* rope.cuh: the rotate-half RoPE of one element, shared by the RoPE kernel (rope.cu) and the
 * attention kernels that rotate q and k as they load their tiles (attention.cu,
 * attention_tc.cu), so that both give the same bits. Products and sums are rounded one by
 * one (no fused multiply-add), as the CPU's op_rope_fwd computes them. */
#ifndef DLLM_CUDA_ROPE_CUH
#define DLLM_CUDA_ROPE_CUH

#include "kernels/cuda/common.cuh"

/* The rotation a kernel applies to the rows it loads: row r of a [B*T] tensor at position
 * pos[r], table cos, sin [max_pos, HD/2]. pos NULL: no rotation. */
struct rope_in {
    const int32_t *pos;
    const float *cos, *sin;
    int max_pos;
};

/* The pair (x1, x2) = (x[i], x[i + HD/2]) rotated by the angle of (c, s): the first half's
 * element x1 c - x2 s and the second half's x2 c + x1 s. */
__device__ __forceinline__ float rope_first(float x1, float x2, float c, float s)
{
    return __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
}
__device__ __forceinline__ float rope_second(float x1, float x2, float c, float s)
{
    return __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

/* Element d < HD of the head row x (HD floats) at position p, rotated; NaN for a position
 * outside the table (as the RoPE kernel writes). */
__device__ __forceinline__ float rope_elem(const float *x, int d, int HD, int p,
                                           const rope_in &r)
{
    if (p < 0 || p >= r.max_pos)
        return NAN;
    const int half = HD / 2, i = d < half ? d : d - half;
    const float c = r.cos[(size_t)p * half + i], s = r.sin[(size_t)p * half + i];
    const float x1 = x[i], x2 = x[i + half];
    return d < half ? rope_first(x1, x2, c, s) : rope_second(x1, x2, c, s);
}

#endif
