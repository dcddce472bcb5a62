/* rmsnorm.cu: RMSNorm as in LLaMA/LLaDA.
 * Forward, per row of C:  rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd,  out = w * y.
 * Backward, with dy = dout * w:
 *   dx += rstd * (dy - y * mean(dy * y))          one block per row
 *   dw += sum over rows of dout * y               column sums over fixed row chunks into a
 *                                                 scratch [chunks, C] the caller provides
 *                                                 (no allocation inside the op, so memory
 *                                                 caps see it), then summed in chunk order:
 *                                                 deterministic, no atomics.
 * fp32 sums (block tree reductions) instead of the CPU's double: agreement to ~1e-6.
 * The FP8 variant (rmsnorm_fp8_fwd) also quantises each row's 1 x gc groups in the same
 * block: the row's rstd, then per group (one warp each) out, its absmax, the scale and
 * the codes. rms_rstd and rms_out are shared with the plain forward, so out, the scales
 * and the codes are bit for bit those of the forward followed by fp8_quant.cu's pass. The
 * INT8 variant (rmsnorm_int8_fwd) does the same with the INT8 codes of the linear's own
 * activation pass (gemm_int8.cu: 1 x 128 groups, or the whole row under channel scaling,
 * whose maximum is the block's), the row stride ld padded with zero codes. The BF16
 * variant (rmsnorm_bf16_fwd) writes out's bf16 copy beside it (bf16_codec.cuh's rounding,
 * as the conversion pass). */
#include "kernels/cuda/quant_group.cuh"

enum { RMS_THREADS = 256, DW_ROWS = 64 /* rows per chunk of the dw partial sums */ };

/* 1/sqrt(mean(x^2) + eps) of one row x (C), in every thread of the block. */
__device__ __forceinline__ float rms_rstd(const float *x, int C, float eps)
{
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        ss += x[c] * x[c];
    ss = block_sum(ss);
    return 1.0f / sqrtf(ss / (float)C + eps);
}

__device__ __forceinline__ float rms_out(float w, float x, float r) { return w * (x * r); }

__global__ static void rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp,
                                          const float *w, int C, float eps)
{
    // out (N, C), rstd (N) or NULL, inp (N, C), w (C); grid.x = N
    const float *x = inp + (size_t)blockIdx.x * C;
    float *o = out + (size_t)blockIdx.x * C;
    float r = rms_rstd(x, C, eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        o[c] = rms_out(w[c], x[c], r);
    if (rstd && threadIdx.x == 0)
        rstd[blockIdx.x] = r;
}

/* The forward and the bf16 copy of out that the BF16 linears read (out may be NULL). */
__global__ static void rmsnorm_bf16_fwd_kernel(float *out, float *rstd, uint16_t *o16,
                                               const float *inp, const float *w, int C,
                                               float eps)
{
    // out (N, C) or NULL, rstd (N) or NULL, o16 (N, C), inp (N, C), w (C); grid.x = N
    const size_t off = (size_t)blockIdx.x * C;
    const float *x = inp + off;
    float r = rms_rstd(x, C, eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float y = rms_out(w[c], x[c], r);
        if (out)
            out[off + c] = y;
        o16[off + c] = f32_to_bf16_rne(y);
    }
    if (rstd && threadIdx.x == 0)
        rstd[blockIdx.x] = r;
}

/* A row's normalised value of column c (quant_group's producer). */
struct rms_val {
    const float *w, *x;
    float r;
    __device__ float operator()(int c) const { return rms_out(w[c], x[c], r); }
};

/* The forward and its FP8 codes: warp k of the block takes groups k, k + 8, ... of the
 * row (a whole warp per group, so warp_max sees every lane). */
__global__ static void rmsnorm_fp8_fwd_kernel(float *out, float *rstd, uint8_t *q, float *scale,
                                              long srs, long scs, const float *inp,
                                              const float *w, int C, float eps, int gc, int f,
                                              bool pow2)
{
    // out (N, C) or NULL, rstd (N) or NULL, q (N, C), inp (N, C), w (C); grid.x = N
    const size_t row = blockIdx.x, off = row * (size_t)C;
    const float *x = inp + off;
    const rms_val v = {w, x, rms_rstd(x, C, eps)};
    const qg_fp8 qz = {f, pow2};
    int lane = threadIdx.x & 31, nw = blockDim.x >> 5, SC = (C + gc - 1) / gc;
    for (int j = threadIdx.x >> 5; j < SC; j += nw)
        quant_group<false>(qz, v, j * gc, min(j * gc + gc, C), lane, 32, out ? out + off : NULL,
                           q + off, &scale[(long)row * srs + (long)j * scs]);
    if (rstd && threadIdx.x == 0)
        rstd[row] = v.r;
}

/* The forward and its INT8 codes (q (N, ld), scale (N, kb)): under one group per row
 * (kb 1) the whole block's maximum, else warp k of the block takes groups k, k + 8, ...;
 * the row's stride past C zero codes. */
__global__ static void rmsnorm_int8_fwd_kernel(float *out, float *rstd, int8_t *q, float *scale,
                                               int ld, int kb, const float *inp, const float *w,
                                               int C, float eps, int gc)
{
    // out (N, C) or NULL, rstd (N) or NULL, inp (N, C), w (C); grid.x = N
    const size_t row = blockIdx.x, off = row * (size_t)C;
    const float *x = inp + off;
    const rms_val v = {w, x, rms_rstd(x, C, eps)};
    int8_t *qr = q + row * (size_t)ld;
    float *o = out ? out + off : NULL;
    if (kb == 1) {
        quant_group<true>(qg_int8{}, v, 0, C, threadIdx.x, blockDim.x, o, qr, &scale[row]);
    } else {
        int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        for (int j = threadIdx.x >> 5; j < kb; j += nw)
            quant_group<false>(qg_int8{}, v, j * gc, min(j * gc + gc, C), lane, 32, o, qr,
                               &scale[row * kb + j]);
    }
    for (int c = C + threadIdx.x; c < ld; c += blockDim.x)
        qr[c] = 0;
    if (rstd && threadIdx.x == 0)
        rstd[row] = v.r;
}

__global__ static void rmsnorm_dx_kernel(float *dinp, const float *dout, const float *inp,
                                         const float *w, const float *rstd, int C)
{
    size_t off = (size_t)blockIdx.x * C;
    const float *x = inp + off, *g = dout + off;
    float *dx = dinp + off;
    float r = rstd[blockIdx.x];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dot += (g[c] * w[c]) * (x[c] * r);
    float mean = block_sum(dot) / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dx[c] += r * (g[c] * w[c] - x[c] * r * mean);
}

__global__ static void rmsnorm_dw_partial_kernel(float *part, const float *dout,
                                                 const float *inp, const float *rstd, int N,
                                                 int C)
{
    // part (chunks, C); grid (ceil(C / threads), chunks)
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    int n0 = blockIdx.y * DW_ROWS, n1 = min(n0 + DW_ROWS, N);
    float acc = 0.0f;
    for (int n = n0; n < n1; n++)
        acc += dout[(size_t)n * C + c] * (inp[(size_t)n * C + c] * rstd[n]);
    part[(size_t)blockIdx.y * C + c] = acc;
}

__global__ static void rmsnorm_dw_reduce_kernel(float *dw, const float *part, int chunks, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float acc = 0.0f;
    for (int k = 0; k < chunks; k++)
        acc += part[(size_t)k * C + c];
    dw[c] += acc;
}

extern "C" void dllm_cuda_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w,
                                      int N, int C, float eps, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && C > 0, "bad shape N=%d C=%d", N, C);
    if (N == 0)
        return;
    DLLM_LAUNCH(rmsnorm_fwd_kernel, N, RMS_THREADS, 0, as_stream(s))(out, rstd, inp, w, C, eps);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_rmsnorm_bf16_fwd(float *out, float *rstd, uint16_t *o16,
                                           const float *inp, const float *w, int N, int C,
                                           float eps, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && C > 0, "bad shape N=%d C=%d", N, C);
    if (N == 0)
        return;
    DLLM_LAUNCH(rmsnorm_bf16_fwd_kernel, N, RMS_THREADS, 0, as_stream(s))(out, rstd, o16, inp, w,
        C, eps);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_rmsnorm_fp8_fwd(float *out, float *rstd, uint8_t *q, float *scale,
                                          long srs, long scs, const float *inp, const float *w,
                                          int N, int C, float eps, int gc, fp8_format f,
                                          bool pow2, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && C > 0 && gc > 0, "bad shape N=%d C=%d group %d", N, C, gc);
    DLLM_CUDA_REQUIRE(f == FP8_E4M3 || f == FP8_E5M2, "unknown fp8 format %d", (int)f);
    if (N == 0)
        return;
    if (gc > C) /* as the quantise pass: a group never reaches past the row */
        gc = C;
    DLLM_LAUNCH(rmsnorm_fp8_fwd_kernel, N, RMS_THREADS, 0, as_stream(s))(out, rstd, q, scale, srs,
        scs, inp, w, C, eps, gc, (int)f, pow2);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_rmsnorm_int8_fwd(float *out, float *rstd, int8_t *q, float *scale,
                                           int ld, int kb, const float *inp, const float *w,
                                           int N, int C, float eps, int gc, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && C > 0 && gc > 0 && kb == (C + gc - 1) / gc && ld >= C,
                      "bad shape N=%d C=%d group %d kb %d ld %d", N, C, gc, kb, ld);
    if (N == 0)
        return;
    DLLM_LAUNCH(rmsnorm_int8_fwd_kernel, N, RMS_THREADS, 0, as_stream(s))(out, rstd, q, scale, ld,
        kb, inp, w, C, eps, gc);
    cudaLaunchCheck();
}

extern "C" size_t dllm_cuda_rmsnorm_bwd_scratch_floats(int N, int C)
{
    return N > 0 && C > 0 ? (size_t)((N + DW_ROWS - 1) / DW_ROWS) * C : 0;
}

extern "C" void dllm_cuda_rmsnorm_bwd(float *dinp, float *dw, const float *dout,
                                      const float *inp, const float *w, const float *rstd,
                                      int N, int C, float *scratch, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && C > 0, "bad shape N=%d C=%d", N, C);
    if (N == 0)
        return;
    cudaStream_t st = as_stream(s);
    if (dinp) {
        DLLM_LAUNCH(rmsnorm_dx_kernel, N, RMS_THREADS, 0, st)(dinp, dout, inp, w, rstd, C);
        cudaLaunchCheck();
    }
    if (dw) {
        int chunks = (N + DW_ROWS - 1) / DW_ROWS;
        DLLM_CUDA_REQUIRE(chunks <= 65535, "N=%d: too many rows for one call", N);
        DLLM_CUDA_REQUIRE(scratch, "dw needs a scratch of %zu floats",
                          dllm_cuda_rmsnorm_bwd_scratch_floats(N, C));
        float *part = scratch; // (chunks, C)
        dim3 grid((C + 255) / 256, chunks);
        DLLM_LAUNCH(rmsnorm_dw_partial_kernel, grid, 256, 0, st)(part, dout, inp, rstd, N, C);
        cudaLaunchCheck();
        DLLM_LAUNCH(rmsnorm_dw_reduce_kernel, (C + 255) / 256, 256, 0, st)(dw, part, chunks, C);
        cudaLaunchCheck();
    }
}
