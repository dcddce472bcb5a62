/* ar_sample.cu: one step of the autoregressive sampler (the CUDA backend's ar_choose
 * entry), the choice of dllm_ar_choose (kernels/cpu/ar_choose.c) per row of logits z [V]:
 *   temperature 0:  argmax z, ties to the lowest id (logp 0);
 *   temperature t:  p = softmax(z / t) in float64 (max subtracted), the token the first id
 *                   whose cumulative p exceeds u (increasing id; none: the last id with
 *                   p > 0), u = draw 1 of the keyed stream
 *                   (seed, DLLM_RNG_SAMPLER, g, seq_offset + row); logp = log p[token];
 *   logp_t1 = log softmax(z)[token] in float64.
 * Only the whole nucleus (top_p = 1): the caller keeps top_p < 1 on the host.
 * The max and the argmax are order-independent, so greedy tokens are the CPU's bit for
 * bit. The sums are not the CPU's left-to-right loops: the normaliser is a tree, and the
 * cumulative sum is per thread over a contiguous run of ids, the runs' totals scanned in
 * order; a sampled token can differ from the CPU's only when u lies within a few ulps of
 * a cumulative boundary, and the log-probs agree to rounding (and a GPU's float64
 * exp/log may differ from libm's in the last ulp).
 * A row already finished (done) keeps its records and feeds EOS to the next step. One
 * block per row. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rng_mix.cuh"

enum { AR_THREADS = 256, DLLM_RNG_PURPOSE_SAMPLER_AR = 2 };

__device__ static double block_max_d(double v)
{
    __shared__ double pm[AR_THREADS];
    __syncthreads();
    pm[threadIdx.x] = v;
    __syncthreads();
    for (int o = AR_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o && pm[threadIdx.x + o] > pm[threadIdx.x])
            pm[threadIdx.x] = pm[threadIdx.x + o];
        __syncthreads();
    }
    return pm[0];
}

/* The lowest (lowest = true) or highest id over the block; -1 entries do not count. */
__device__ static int block_pick(int id, bool lowest)
{
    __shared__ int pi[AR_THREADS];
    __syncthreads();
    pi[threadIdx.x] = id;
    __syncthreads();
    for (int o = AR_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) {
            int a = pi[threadIdx.x], b = pi[threadIdx.x + o];
            if (b >= 0 && (a < 0 || (lowest ? b < a : b > a)))
                pi[threadIdx.x] = b;
        }
        __syncthreads();
    }
    return pi[0];
}

/* (value, id) argmax: larger value, then the lower id. */
__device__ static int block_argmax_f(float z, int id)
{
    __shared__ float pz[AR_THREADS];
    __shared__ int pi[AR_THREADS];
    __syncthreads();
    pz[threadIdx.x] = z;
    pi[threadIdx.x] = id;
    __syncthreads();
    for (int o = AR_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) {
            float z2 = pz[threadIdx.x + o];
            int i2 = pi[threadIdx.x + o];
            if (i2 >= 0 && (pi[threadIdx.x] < 0 || z2 > pz[threadIdx.x] ||
                            (z2 == pz[threadIdx.x] && i2 < pi[threadIdx.x]))) {
                pz[threadIdx.x] = z2;
                pi[threadIdx.x] = i2;
            }
        }
        __syncthreads();
    }
    return pi[0];
}

__global__ static void ar_choose_kernel(int32_t *tokens, int32_t *next, float *logp,
                                        float *logp_t1, int32_t *length, uint8_t *done,
                                        const float *logits, int r0, int V, int G, int g,
                                        double temperature, int eos_id, uint64_t seed,
                                        uint64_t seq_offset)
{
    // tokens, logp, logp_t1 (B, G); next, length, done (B); logits (n, V); grid.x = n
    __shared__ double seg[AR_THREADS];
    const int row = r0 + blockIdx.x, tid = threadIdx.x;
    const float *z = logits + (size_t)blockIdx.x * V;
    if (done[row]) {
        if (tid == 0)
            next[row] = eos_id;
        return;
    }
    /* log softmax(z) at temperature 1: max and normaliser */
    double mx1 = -INFINITY;
    for (int j = tid; j < V; j += AR_THREADS)
        mx1 = (double)z[j] > mx1 ? (double)z[j] : mx1;
    mx1 = block_max_d(mx1);
    double s1 = 0.0;
    for (int j = tid; j < V; j += AR_THREADS)
        s1 += exp((double)z[j] - mx1);
    s1 = block_sum_d(s1);

    int tok;
    double lp = 0.0;
    if (temperature == 0.0) {
        float best = -INFINITY;
        int bi = -1;
        for (int j = tid; j < V; j += AR_THREADS) /* ascending j: strict ">" keeps the first */
            if (bi < 0 || z[j] > best) {
                best = z[j];
                bi = j;
            }
        tok = block_argmax_f(best, bi);
    } else {
        double mx = -INFINITY;
        for (int j = tid; j < V; j += AR_THREADS)
            mx = (double)z[j] / temperature > mx ? (double)z[j] / temperature : mx;
        mx = block_max_d(mx);
        double sum = 0.0;
        for (int j = tid; j < V; j += AR_THREADS)
            sum += exp((double)z[j] / temperature - mx);
        sum = block_sum_d(sum);
        /* the cumulative sum: thread tid owns the ids [lo, hi) */
        const int per = (V + AR_THREADS - 1) / AR_THREADS;
        const int lo = tid * per < V ? tid * per : V, hi = lo + per < V ? lo + per : V;
        double own = 0.0;
        int last = -1;
        for (int j = lo; j < hi; j++) {
            double p = exp((double)z[j] / temperature - mx) / sum;
            if (p != 0.0) {
                own += p;
                last = j;
            }
        }
        __syncthreads();
        seg[tid] = own;
        __syncthreads();
        if (tid == 0) { /* exclusive scan of the runs' totals, in id order */
            double c = 0.0;
            for (int k = 0; k < AR_THREADS; k++) {
                double o = seg[k];
                seg[k] = c;
                c += o;
            }
        }
        __syncthreads();
        const double u = dllm_rng_u01(dllm_rng_draw(
            dllm_rng_key(seed, DLLM_RNG_PURPOSE_SAMPLER_AR, (uint64_t)g, seq_offset + (uint64_t)row), 1));
        double cum = seg[tid];
        int hit = -1;
        for (int j = lo; j < hi && hit < 0; j++) {
            double p = exp((double)z[j] / temperature - mx) / sum;
            if (p == 0.0)
                continue;
            cum += p;
            if (cum > u)
                hit = j;
        }
        tok = block_pick(hit, true);
        if (tok < 0)
            tok = block_pick(last, false);
        lp = log(exp((double)z[tok] / temperature - mx) / sum);
    }
    if (tid == 0) {
        size_t rg = (size_t)row * G + g;
        tokens[rg] = tok;
        next[row] = tok;
        logp[rg] = (float)lp;
        logp_t1[rg] = (float)((double)z[tok] - mx1 - log(s1));
        length[row] = g + 1;
        done[row] = tok == eos_id;
    }
}

extern "C" void dllm_cuda_ar_choose(int32_t *tokens, int32_t *next, float *logp, float *logp_t1,
                                    int32_t *length, uint8_t *done, const float *logits, int r0,
                                    int n, int V, int G, int g, double temperature, int eos_id,
                                    uint64_t seed, uint64_t seq_offset, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(temperature >= 0.0 && V > 0 && g >= 0 && g < G,
                      "temperature %g, V %d, step %d of %d", temperature, V, g, G);
    if (n <= 0)
        return;
    DLLM_LAUNCH(ar_choose_kernel, (unsigned)n, AR_THREADS, 0, as_stream(s))(tokens, next, logp,
        logp_t1, length, done, logits, r0, V, G, g, temperature, eos_id, seed, seq_offset);
    cudaLaunchCheck();
}
