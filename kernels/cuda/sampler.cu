/* sampler.cu: the denoising sampler's per-row draw of x0 and its confidence, the same
 * arithmetic as draw_x0 and softmax_at in dllm/sampler.c.
 *   temperature == 0:  x0 = argmax_v logit[v] (first maximum; NaN never wins; a NaN at
 *                      v = 0 gives 0, as the CPU loop does)
 *   temperature  > 0:  x0 = argmax_v exp(logit[v]) / (-log u_v)^temperature in float64,
 *                      u_v = uniform draw (pos*V + v) of the stream
 *                      dllm_rng_make(seed, DLLM_RNG_SAMPLER, gstep, 2*b) (draw index
 *                      pos*V + v + 1, since dllm_rng_u64 pre-increments); ties and NaN as
 *                      the CPU's strict ">" scan: the lowest v among equal maxima.
 *   prob = softmax(logit)[x0] with float64 sums; rand_conf = uniform draw pos of stream
 *   2*b + 1 (random remasking).
 *   exclude >= 0 (mask_token = forbid) leaves that id out of the draw, as
 *   dllm_sampler_draw_x0_excl: the scan starts from id 1 instead of 0 when it is 0, and
 *   prob keeps it in the normaliser.
 * The max/argmax reductions are order-independent, so x0 is the CPU's bit for bit
 * (the device's float64 exp/log/pow may differ from libm's in the last ulp, which could
 * only matter for two scores equal to ~1e-16). One block per row. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rng_mix.cuh"

enum { SAMPLER_THREADS = 256, DLLM_RNG_PURPOSE_SAMPLER = 2 };

/* (score, index): larger score wins, then the lower index. */
__device__ __forceinline__ bool beats(double s, int i, double s2, int i2)
{
    return s > s2 || (s == s2 && i < i2);
}

__device__ static void block_argmax(double &s, int &i)
{
    __shared__ double ps[32];
    __shared__ int pi[32];
    for (int o = 16; o > 0; o >>= 1) {
        double s2 = __shfl_xor_sync(0xffffffffu, s, o);
        int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        if (beats(s2, i2, s, i)) {
            s = s2;
            i = i2;
        }
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        ps[wid] = s;
        pi[wid] = i;
    }
    __syncthreads();
    s = lane < nw ? ps[lane] : -INFINITY;
    i = lane < nw ? pi[lane] : 0x7FFFFFFF;
    for (int o = 16; o > 0; o >>= 1) {
        double s2 = __shfl_xor_sync(0xffffffffu, s, o);
        int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        if (beats(s2, i2, s, i)) {
            s = s2;
            i = i2;
        }
    }
}

__global__ static void sampler_x0_kernel(int32_t *x0, float *prob, double *rand_conf,
                                         const float *logits, const int64_t *row_seq,
                                         const int32_t *row_pos, int V, double temperature,
                                         uint64_t seed, uint64_t gstep,
                                         const int32_t *seq_step, uint64_t seq_offset,
                                         int exclude)
{
    // x0, prob, rand_conf, row_seq, row_pos (n); logits (n, V); seq_step (B); grid.x = n
    int row = blockIdx.x;
    const float *lg = logits + (size_t)row * V;
    uint64_t b = (uint64_t)row_seq[row]; /* the global sequence index, 64-bit as on the CPU */
    if (seq_step)
        gstep = (uint64_t)seq_step[b - seq_offset];
    uint64_t pos = (uint64_t)(int64_t)row_pos[row];

    /* scores below any real one: -inf for the argmax, -1 for Gumbel (scores are >= 0) */
    double best_s = temperature == 0.0 ? -INFINITY : -1.0;
    int best = 0x7FFFFFFF;
    if (temperature == 0.0) {
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            double x = (double)lg[v];
            if (v != exclude && x > best_s) { /* per-thread v ascends: strict ">" keeps the first */
                best_s = x;
                best = v;
            }
        }
    } else {
        uint64_t key = dllm_rng_key(seed, DLLM_RNG_PURPOSE_SAMPLER, gstep, 2 * b);
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            if (v == exclude)
                continue;
            double u = dllm_rng_u01(dllm_rng_draw(key, pos * (uint64_t)V + (uint64_t)v + 1));
            double sc = exp((double)lg[v]) / pow(-log(u), temperature);
            if (sc > best_s) {
                best_s = sc;
                best = v;
            }
        }
    }
    block_argmax(best_s, best);
    /* the CPU scan's start: id 0, or 1 when 0 is excluded */
    const int start = exclude == 0 && V > 1 ? 1 : 0;
    int pick = best == 0x7FFFFFFF ? start : best; /* nothing beat the start */
    if (temperature == 0.0 && isnan(lg[start]))
        pick = start; /* the CPU scan compares against logit[start] first and never moves */

    /* softmax(logit)[pick] in double, max subtracted (NaN skipped by the max) */
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        if (lg[v] > mx)
            mx = lg[v];
    mx = block_max(mx);
    double z = 0.0;
    if (mx != -INFINITY)
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            z += exp((double)lg[v] - (double)mx);
    z = block_sum_d(z);
    if (threadIdx.x == 0) {
        x0[row] = pick;
        prob[row] = mx == -INFINITY ? 0.0f : (float)(exp((double)lg[pick] - (double)mx) / z);
        if (rand_conf) {
            uint64_t rkey = dllm_rng_key(seed, DLLM_RNG_PURPOSE_SAMPLER, gstep, 2 * b + 1);
            rand_conf[row] = dllm_rng_u01(dllm_rng_draw(rkey, pos + 1));
        }
    }
}

static void launch_x0(int32_t *x0, float *prob, double *rand_conf, const float *logits,
                      const int64_t *row_seq, const int32_t *row_pos, int n, int V,
                      double temperature, uint64_t seed, uint64_t gstep, const int32_t *seq_step,
                      uint64_t seq_offset, int exclude, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(n >= 0 && V > 0, "bad shape n=%d V=%d", n, V);
    DLLM_CUDA_REQUIRE(temperature >= 0.0, "temperature %g < 0", temperature);
    if (n == 0)
        return;
    DLLM_LAUNCH(sampler_x0_kernel, n, SAMPLER_THREADS, 0, as_stream(s))(x0, prob, rand_conf, logits,
        row_seq, row_pos, V, temperature, seed, gstep, seq_step, seq_offset, exclude);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_sampler_x0_excl(int32_t *x0, float *prob, double *rand_conf,
                                          const float *logits, const int64_t *row_seq,
                                          const int32_t *row_pos, int n, int V,
                                          double temperature, uint64_t seed, uint64_t gstep,
                                          int exclude, dllm_cuda_stream s)
{
    launch_x0(x0, prob, rand_conf, logits, row_seq, row_pos, n, V, temperature, seed, gstep,
              NULL, 0, exclude, s);
}

extern "C" void dllm_cuda_sampler_x0_steps(int32_t *x0, float *prob, double *rand_conf,
                                           const float *logits, const int64_t *row_seq,
                                           const int32_t *row_pos, int n, int V,
                                           double temperature, uint64_t seed,
                                           const int32_t *seq_step, uint64_t seq_offset,
                                           int exclude, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(seq_step != NULL, "no step array");
    launch_x0(x0, prob, rand_conf, logits, row_seq, row_pos, n, V, temperature, seed, 0,
              seq_step, seq_offset, exclude, s);
}

extern "C" void dllm_cuda_sampler_x0(int32_t *x0, float *prob, double *rand_conf,
                                     const float *logits, const int64_t *row_seq,
                                     const int32_t *row_pos, int n, int V, double temperature,
                                     uint64_t seed, uint64_t gstep, dllm_cuda_stream s)
{
    dllm_cuda_sampler_x0_excl(x0, prob, rand_conf, logits, row_seq, row_pos, n, V, temperature,
                              seed, gstep, -1, s);
}

__global__ static void rng_u64_kernel(uint64_t *out, size_t n, uint64_t key, uint64_t ctr0)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = dllm_rng_draw(key, ctr0 + i + 1);
}

extern "C" void dllm_cuda_rng_u64(uint64_t *out, size_t n, uint64_t seed, uint64_t a,
                                  uint64_t b, uint64_t c, uint64_t ctr0, dllm_cuda_stream s)
{
    if (n == 0)
        return;
    uint64_t key = dllm_rng_key(seed, a, b, c); /* the host half of the shared header */
    DLLM_LAUNCH(rng_u64_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, n, key, ctr0);
    cudaLaunchCheck();
}
