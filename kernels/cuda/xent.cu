/* xent.cu: log-probability of the target under softmax(logits), one block per row.
 * Forward:  lse = log sum_j exp(x_j) by an online logsumexp in fp32 (each thread keeps a
 *           running (max, sum) pair, rescaling its sum when the max grows; the pairs are
 *           merged the same way across the block), logp = x[target] - lse.
 *           A target outside [0, V) gives NaN; a row of all -inf gives lse = -inf.
 * Backward (accumulated, rows with dlogp == 0 skipped):
 *   dlogits[j] += -dlogp * exp(x_j - lse), then dlogits[target] += dlogp,
 * the CPU's order of the two updates. lse from the forward, or recomputed if NULL. */
#include "kernels/cuda/common.cuh"

enum { XENT_THREADS = 512 };

/* (m, s) represents s * exp(m); merging keeps the larger max. */
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2)
{
    if (m2 == -INFINITY)
        return;
    if (m == -INFINITY) {
        m = m2;
        s = s2;
        return;
    }
    if (m2 > m) {
        s = s * expf(m - m2) + s2;
        m = m2;
    } else {
        s = s + s2 * expf(m2 - m);
    }
}

/* The block's logsumexp of x[0, V); every thread gets it. */
__device__ static float block_logsumexp(const float *x, int V)
{
    __shared__ float sm[32], ss[32];
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = x[j];
        if (v == -INFINITY)
            continue;
        if (v > m) {
            s = (m == -INFINITY ? 0.0f : s * expf(m - v)) + 1.0f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        sm[wid] = m;
        ss[wid] = s;
    }
    __syncthreads();
    m = lane < nw ? sm[lane] : -INFINITY;
    s = lane < nw ? ss[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
    /* NaN logits: m stays a number but s becomes NaN, so lse is NaN (loud) */
    return m == -INFINITY ? -INFINITY : m + logf(s);
}

__global__ static void xent_fwd_kernel(float *logp, float *lse_out, const float *logits,
                                       const int32_t *target, int V)
{
    // logp (N), lse_out (N) or NULL, logits (N, V), target (N); grid.x = N
    int n = blockIdx.x;
    const float *x = logits + (size_t)n * V;
    float lse = block_logsumexp(x, V);
    if (threadIdx.x == 0) {
        int tg = target[n];
        logp[n] = (tg >= 0 && tg < V) ? x[tg] - lse : NAN;
        if (lse_out)
            lse_out[n] = lse;
    }
}

__global__ static void xent_bwd_kernel(float *dlogits, const float *dlogp, const float *logits,
                                       const float *lse_in, const int32_t *target, int V)
{
    int n = blockIdx.x;
    float g = dlogp[n];
    if (g == 0.0f)
        return; /* uniform over the block: no barrier is skipped by some threads only */
    const float *x = logits + (size_t)n * V;
    float *d = dlogits + (size_t)n * V;
    float lse = lse_in ? lse_in[n] : block_logsumexp(x, V);
    int tg = target[n];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float dj = d[j] - g * expf(x[j] - lse);
        if (j == tg)
            dj += g;
        d[j] = dj;
    }
}

extern "C" void dllm_cuda_xent_fwd(float *logp, float *lse, const float *logits,
                                   const int32_t *target, int N, int V, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && V > 0, "bad shape N=%d V=%d", N, V);
    if (N == 0)
        return;
    DLLM_LAUNCH(xent_fwd_kernel, N, XENT_THREADS, 0, as_stream(s))(logp, lse, logits, target, V);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_xent_bwd(float *dlogits, const float *dlogp, const float *logits,
                                   const float *lse, const int32_t *target, int N, int V,
                                   dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && V > 0, "bad shape N=%d V=%d", N, V);
    if (N == 0 || !dlogits)
        return;
    DLLM_LAUNCH(xent_bwd_kernel, N, XENT_THREADS, 0, as_stream(s))(dlogits, dlogp, logits, lse,
        target, V);
    cudaLaunchCheck();
}
