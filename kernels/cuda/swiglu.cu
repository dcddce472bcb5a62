/* swiglu.cu: the SwiGLU gate of the MLP, elementwise.
 *   out = silu(gate) * up,  silu(x) = x * sigmoid(x) = x / (1 + exp(-x))
 * Backward (written):       dup   = dout * silu(gate)
 *                          dgate = dout * up * sig * (1 + gate * (1 - sig))
 * The FP8 variant (swiglu_fp8_fwd) quantises [R, C] in 1 x gc groups of each row as it
 * goes, one warp per group (as fp8_quant.cu's row kernel): out, the group's absmax, the
 * scale, the codes. swiglu_val is shared with the plain forward, so everything is bit
 * for bit the plain forward followed by the quantise pass. The INT8 variant
 * (swiglu_int8_fwd) likewise with the INT8 linear's codes (gemm_int8.cu), the row stride
 * padded with zero codes. The BF16 variant (swiglu_bf16_fwd) writes out's bf16 copy
 * beside it. */
#include "kernels/cuda/quant_group.cuh"

__device__ __forceinline__ float swiglu_val(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ static void swiglu_fwd_kernel(float *out, const float *gate, const float *up, size_t n)
{
    // out, gate, up (n)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = swiglu_val(gate[i], up[i]);
}

/* The forward and the bf16 copy of out that the BF16 linear reads (out may be NULL). */
__global__ static void swiglu_bf16_fwd_kernel(float *out, uint16_t *o16, const float *gate,
                                              const float *up, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float y = swiglu_val(gate[i], up[i]);
        if (out)
            out[i] = y;
        o16[i] = f32_to_bf16_rne(y);
    }
}

/* A row's gated value of column c (quant_group's producer). */
struct swiglu_row {
    const float *g, *u;
    __device__ float operator()(int c) const { return swiglu_val(g[c], u[c]); }
};

/* One warp per (row r, group j); blockDim.x = 256 (8 warps). */
__global__ static void swiglu_fp8_fwd_kernel(float *out, uint8_t *q, float *scale, long srs,
                                             long scs, const float *gate, const float *up, int R,
                                             int C, int gc, int SC, int f, bool pow2)
{
    // out (R, C) or NULL, q (R, C), gate (R, C), up (R, C)
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)R * SC)
        return; /* whole warp leaves together */
    int r = (int)(warp / SC), j = (int)(warp % SC);
    size_t row = (size_t)r * C;
    quant_group<false>(qg_fp8{f, pow2}, swiglu_row{gate + row, up + row}, j * gc,
                       min(j * gc + gc, C), lane, 32, out ? out + row : NULL, q + row,
                       &scale[(long)r * srs + (long)j * scs]);
}

/* The same with INT8 codes: q (R, ld), scale (R, SC); the last group's warp writes the
 * row's zero codes past C. */
__global__ static void swiglu_int8_fwd_kernel(float *out, int8_t *q, float *scale, int ld,
                                              const float *gate, const float *up, int R, int C,
                                              int gc, int SC)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)R * SC)
        return; /* whole warp leaves together */
    int r = (int)(warp / SC), j = (int)(warp % SC);
    size_t row = (size_t)r * C;
    int8_t *qr = q + (size_t)r * ld;
    quant_group<false>(qg_int8{}, swiglu_row{gate + row, up + row}, j * gc, min(j * gc + gc, C),
                       lane, 32, out ? out + row : NULL, qr, &scale[(size_t)r * SC + j]);
    if (j == SC - 1)
        for (int c = C + lane; c < ld; c += 32)
            qr[c] = 0;
}

__global__ static void swiglu_bwd_kernel(float *dgate, float *dup, const float *dout,
                                         const float *gate, const float *up, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        if (dup)
            dup[i] = dout[i] * g * sig;
        if (dgate)
            dgate[i] = dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    }
}

extern "C" void dllm_cuda_swiglu_fwd(float *out, const float *gate, const float *up, size_t n,
                                     dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(swiglu_fwd_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, gate, up, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_swiglu_bf16_fwd(float *out, uint16_t *o16, const float *gate,
                                          const float *up, size_t n, dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(swiglu_bf16_fwd_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, o16, gate,
        up, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_swiglu_fp8_fwd(float *out, uint8_t *q, float *scale, long srs,
                                         long scs, const float *gate, const float *up, int R,
                                         int C, int gc, fp8_format f, bool pow2,
                                         dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(R >= 0 && C > 0 && gc > 0, "bad shape [%d, %d] group %d", R, C, gc);
    DLLM_CUDA_REQUIRE(f == FP8_E4M3 || f == FP8_E5M2, "unknown fp8 format %d", (int)f);
    if (R == 0)
        return;
    if (gc > C)
        gc = C;
    int SC = (C + gc - 1) / gc;
    size_t blocks = ((size_t)R * SC + 7) / 8;
    DLLM_CUDA_REQUIRE(blocks <= 0x7FFFFFFFu, "too many groups (%zu)", (size_t)R * SC);
    DLLM_LAUNCH(swiglu_fp8_fwd_kernel, (unsigned)blocks, 256, 0, as_stream(s))(out, q, scale, srs,
        scs, gate, up, R, C, gc, SC, (int)f, pow2);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_swiglu_int8_fwd(float *out, int8_t *q, float *scale, int ld,
                                          const float *gate, const float *up, int R, int C,
                                          int gc, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(R >= 0 && C > 0 && gc > 0 && ld >= C, "bad shape [%d, %d] group %d ld %d",
                      R, C, gc, ld);
    if (R == 0)
        return;
    if (gc > C)
        gc = C;
    int SC = (C + gc - 1) / gc;
    size_t blocks = ((size_t)R * SC + 7) / 8;
    DLLM_CUDA_REQUIRE(blocks <= 0x7FFFFFFFu, "too many groups (%zu)", (size_t)R * SC);
    DLLM_LAUNCH(swiglu_int8_fwd_kernel, (unsigned)blocks, 256, 0, as_stream(s))(out, q, scale, ld,
        gate, up, R, C, gc, SC);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_swiglu_bwd(float *dgate, float *dup, const float *dout,
                                     const float *gate, const float *up, size_t n,
                                     dllm_cuda_stream s)
{
    if (n == 0 || (!dgate && !dup))
        return;
    DLLM_LAUNCH(swiglu_bwd_kernel, grid_for(n, 256), 256, 0, as_stream(s))(dgate, dup, dout, gate,
        up, n);
    cudaLaunchCheck();
}
