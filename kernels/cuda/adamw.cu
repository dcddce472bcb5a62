/* adamw.cu: the AdamW step, global gradient norm and clipping (torch semantics, as
 * kernels/cpu/adamw.c).
 * Step t (from 1), scalars formed in double on the host exactly as the CPU does:
 *   p  = p * (1 - lr*wd)
 *   m  = lerp(m, g, 1-b1)  (fma(w1, g - m, m) if w1 < 0.5, else fma(-(1-w1), g - m, g))
 *   v  = fma(w2*g, g, v*b2)
 *   p  = p + (-step) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),  step = lr / (1 - b1^t)
 * Every fp32 operation is spelled with a round-to-nearest intrinsic so the compiler
 * cannot fuse or reorder it: the result is bit-identical to the CPU.
 * Norm: sum of g^2 accumulated in double per thread and block, blocks combined with a
 * double atomicAdd (order may vary: last-bit differences of the norm only). Clip:
 * coef = max_norm / (sqrt(sumsq) + 1e-6) in double on the device; if < 1, g *= (float)coef. */
#include "kernels/cuda/common.cuh"

#include <cmath>

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v,
                                    uint16_t *p_bf16, size_t n, float decay, float step,
                                    float bc2_sqrt, float w1, float w2, float b2, float eps)
{
    // p, g, m, v, p_bf16 (n)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i], mi0 = m[i];
        float pi = __fmul_rn(p[i], decay);
        float diff = __fsub_rn(gi, mi0);
        float mi = w1 < 0.5f ? __fmaf_rn(w1, diff, mi0)
                             : __fmaf_rn(-__fsub_rn(1.0f, w1), diff, gi);
        float vi = __fmaf_rn(__fmul_rn(w2, gi), gi, __fmul_rn(v[i], b2));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        float pn = __fadd_rn(pi, __fdiv_rn(__fmul_rn(-step, mi), denom));
        p[i] = pn;
        m[i] = mi;
        v[i] = vi;
        if (p_bf16) {
            uint32_t u = __float_as_uint(pn);
            p_bf16[i] = (u & 0x7FFFFFFFu) > 0x7F800000u
                            ? (uint16_t)((u >> 16) | 0x0040u)
                            : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        }
    }
}

extern "C" void dllm_cuda_adamw(float *p, const float *g, float *m, float *v, uint16_t *p_bf16,
                                size_t n, int t, float lr, float b1, float b2, float eps,
                                float wd, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(t >= 1, "step t=%d: AdamW steps count from 1", t);
    if (n == 0)
        return;
    /* the same host arithmetic as op_adamw */
    double bc1 = 1.0 - pow((double)b1, t);
    double bc2 = 1.0 - pow((double)b2, t);
    float decay = (float)(1.0 - (double)lr * wd);
    float step = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float w1 = (float)(1.0 - (double)b1);
    float w2 = (float)(1.0 - (double)b2);
    DLLM_LAUNCH(adamw_kernel, grid_for(n, 256), 256, 0, as_stream(s))(p, g, m, v, p_bf16, n, decay,
        step, bc2_sqrt, w1, w2, b2, eps);
    cudaLaunchCheck();
}

__global__ static void sumsq_kernel(double *acc, const float *g, size_t n)
{
    double sum = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double x = (double)g[i];
        sum += x * x;
    }
    sum = block_sum_d(sum);
    if (threadIdx.x == 0)
        atomicAdd(acc, sum);
}

extern "C" void dllm_cuda_sumsq_accum(double *acc, const float *g, size_t n, dllm_cuda_stream s)
{
    if (n == 0)
        return;
    unsigned blocks = grid_for(n, 256);
    if (blocks > 1024)
        blocks = 1024; /* few atomics; each thread loops */
    DLLM_LAUNCH(sumsq_kernel, blocks, 256, 0, as_stream(s))(acc, g, n);
    cudaLaunchCheck();
}

__global__ static void clip_kernel(float *g, size_t n, const double *sumsq, double max_norm)
{
    double coef = max_norm / (sqrt(*sumsq) + 1e-6);
    if (!(coef < 1.0))
        return;
    float c = (float)coef;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] = __fmul_rn(g[i], c);
}

extern "C" void dllm_cuda_clip_grad(float *g, size_t n, const double *sumsq, double max_norm,
                                    dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(clip_kernel, grid_for(n, 256), 256, 0, as_stream(s))(g, n, sumsq, max_norm);
    cudaLaunchCheck();
}

extern "C" double dllm_cuda_grad_norm(const float *g, size_t n, double *scratch,
                                      dllm_cuda_stream s)
{
    double h = 0.0;
    cudaStream_t st = as_stream(s);
    DLLM_CUDA_REQUIRE(scratch, "a device double of scratch is required");
    cudaCheck(cudaMemsetAsync(scratch, 0, sizeof(double), st));
    dllm_cuda_sumsq_accum(scratch, g, n, s);
    cudaCheck(cudaMemcpyAsync(&h, scratch, sizeof(double), cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    return sqrt(h);
}
