/* dream_step.cu: Dream's sampler step (the CUDA backend's dream_draw and dream_commit
 * entries), the arithmetic of kernels/cpu/dream_step.c row for row:
 *   draw    one thread per row runs the CPU's serial code: the token distribution
 *           (exclusion, temperature, top_p over ids sorted by probability, top_k, softmax
 *           with left-to-right float64 sums), the pick (argmax or inverse CDF with the
 *           keyed draw), the alg's confidence and key, and the record's probability; the
 *           sorts order ids by (value descending, id ascending), a total order, so they
 *           give the CPU qsort's order. Scratch: V doubles and V ints per row.
 *   commit  one block per sequence: origin commits the rows that take part; the other
 *           algs a row when fewer than k rows rank before it (higher key, or equal at a
 *           lower position: rows are in position order), the CPU sort's first k.
 * So a rollout is the CPU's bit for bit under the emulation (libm's float64 math); on a
 * GPU the float64 exp/log may differ from libm's in the last ulp. The serial draw is
 * simple, not fast: a row of a 150k vocabulary is a few milliseconds of one thread. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rng_mix.cuh"
#include "kernels/sample.h"

enum { DREAM_DRAW_THREADS = 64, DREAM_COMMIT_THREADS = 128, DLLM_RNG_PURPOSE_SAMPLER_DREAM = 2 };

/* id a comes before id b: value descending, then the lower id */
__device__ __forceinline__ bool before(const double *v, int a, int b)
{
    return v[a] > v[b] || (v[a] == v[b] && a < b);
}

__device__ static void sift(int *id, const double *v, int root, int n)
{
    for (;;) {
        int c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && before(v, id[c], id[c + 1]))
            c++;
        if (!before(v, id[root], id[c]))
            return;
        int t = id[root];
        id[root] = id[c];
        id[c] = t;
        root = c;
    }
}

/* id (V) = 0 .. V-1 sorted so that each id comes before the next (heap sort) */
__device__ static void sort_ids(int *id, const double *v, int V)
{
    for (int i = 0; i < V; i++)
        id[i] = i;
    for (int i = V / 2 - 1; i >= 0; i--)
        sift(id, v, i, V);
    for (int n = V - 1; n > 0; n--) {
        int t = id[0];
        id[0] = id[n];
        id[n] = t;
        sift(id, v, 0, n);
    }
}

__device__ static double u01(uint64_t seed, uint64_t step, uint64_t stream, uint64_t pos)
{
    uint64_t key = dllm_rng_key(seed, DLLM_RNG_PURPOSE_SAMPLER_DREAM, step, stream);
    return dllm_rng_u01(dllm_rng_draw(key, pos + 1)); /* draw pos: the CPU pre-increments */
}

__global__ static void dream_draw_kernel(int32_t *x0, double *key, float *prob, uint8_t *take,
                                         const float *logits, const int64_t *row_seq,
                                         const int32_t *row_pos, int n, int V,
                                         dllm_dream_step a, double *scratch)
{
    // x0, key, prob, take, row_seq, row_pos (n); logits (n, V); scratch (n, 3V doubles)
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint64_t gb = (uint64_t)row_seq[i], pos = (uint64_t)(int64_t)row_pos[i];
    const float *lg = logits + (size_t)i * V;
    double *p = (double *)((char *)scratch + (size_t)i * 12 * V);
    int *id = (int *)(p + V);
    take[i] = 1;
    if (a.alg == DLLM_DREAM_STEP_ORIGIN && !a.last)
        take[i] = u01(a.seed, a.step, 4 * gb + 1, pos) < (double)a.ratio;
    if (!take[i]) {
        x0[i] = -1, key[i] = 0, prob[i] = 0;
        return;
    }
    /* the token distribution (dllm_dream_probs) */
    for (int v = 0; v < V; v++)
        p[v] = lg[v];
    if (a.exclude >= 0)
        p[a.exclude] = -INFINITY;
    if (a.temperature > 0)
        for (int v = 0; v < V; v++)
            p[v] /= a.temperature;
    if (a.top_p < 1) {
        sort_ids(id, p, V);
        double mx = p[id[0]], z = 0;
        for (int v = 0; v < V; v++)
            z += exp(p[v] - mx);
        double cum = 0;
        bool prev_over = false;
        for (int j = 0; j < V; j++) { /* each id read once, before it may be removed */
            int v = id[j];
            cum += exp(p[v] - mx) / z;
            bool over = cum > a.top_p;
            if (j > 0 && prev_over)
                p[v] = -INFINITY;
            prev_over = over;
        }
    }
    if (a.top_k > 0 && a.top_k < V) {
        sort_ids(id, p, V);
        double kth = p[id[a.top_k - 1]];
        for (int v = 0; v < V; v++)
            if (p[v] < kth)
                p[v] = -INFINITY;
    }
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++)
        mx = p[v] > mx ? p[v] : mx;
    for (int v = 0; v < V; v++)
        z += (p[v] = exp(p[v] - mx));
    for (int v = 0; v < V; v++)
        p[v] /= z;
    /* the pick (dllm_dream_pick) */
    int32_t x = 0;
    if (a.temperature > 0) {
        const double u = u01(a.seed, a.step, 4 * gb, pos);
        double cum = 0;
        x = -1;
        for (int v = 0; v < V; v++)
            if (p[v] > 0) {
                cum += p[v];
                x = v;
                if (u < cum)
                    break;
            }
    } else {
        for (int v = 1; v < V; v++)
            if (p[v] > p[x])
                x = v;
    }
    double conf = p[x];
    if (a.alg == DLLM_DREAM_STEP_TOPK_MARGIN) {
        double t1 = -1, t2 = -1;
        for (int v = 0; v < V; v++)
            if (p[v] > t1) {
                t2 = t1;
                t1 = p[v];
            } else if (p[v] > t2) {
                t2 = p[v];
            }
        conf = t1 - t2;
    } else if (a.alg == DLLM_DREAM_STEP_ENTROPY) {
        double h = 0;
        for (int v = 0; v < V; v++)
            h += p[v] * log(p[v] + 1e-10);
        conf = h;
    }
    x0[i] = x;
    key[i] = conf;
    if (a.alg != DLLM_DREAM_STEP_ORIGIN && a.alg_temp > 0)
        key[i] = conf / a.alg_temp - log(-log(u01(a.seed, a.step, 4 * gb + 2, pos)));
    /* softmax(logits)[x] at temperature 1 (dllm_sampler_prob) */
    double m1 = -INFINITY;
    for (int v = 0; v < V; v++)
        if (lg[v] > m1)
            m1 = lg[v];
    double z1 = 0;
    if (m1 != -INFINITY)
        for (int v = 0; v < V; v++)
            z1 += exp((double)lg[v] - m1);
    prob[i] = m1 == -INFINITY ? 0.0f : (float)(exp((double)lg[x] - m1) / z1);
}

extern "C" size_t dllm_cuda_dream_scratch_bytes(int n, int V)
{
    return (size_t)(n > 0 ? n : 1) * (size_t)V * 12;
}

extern "C" void dllm_cuda_dream_draw(int32_t *x0, double *key, float *prob, uint8_t *take,
                                     const float *logits, const int64_t *row_seq,
                                     const int32_t *row_pos, int n, int V,
                                     const dllm_dream_step *a, double *scratch,
                                     dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(n >= 0 && V > 0 && a->temperature >= 0, "bad shape n=%d V=%d", n, V);
    if (n == 0)
        return;
    DLLM_LAUNCH(dream_draw_kernel, grid_for((size_t)n, DREAM_DRAW_THREADS), DREAM_DRAW_THREADS, 0,
                as_stream(s))(x0, key, prob, take, logits, row_seq, row_pos, n, V, *a, scratch);
    cudaLaunchCheck();
}

__global__ static void dream_commit_kernel(int32_t *canvas, int16_t *commit_step,
                                           float *commit_prob, const int32_t *x0,
                                           const double *key, const float *prob,
                                           const uint8_t *take, const int32_t *row_pos,
                                           const int32_t *seq_start, int T, int P, int G,
                                           int mask_id, dllm_dream_step a)
{
    // canvas (B, T); commit_step, commit_prob (B, G); per row x0, key, prob, take, row_pos;
    // seq_start (B+1); grid.x = B
    const int b = blockIdx.x;
    const int i0 = seq_start[b], i1 = seq_start[b + 1], nm = i1 - i0;
    const int k = a.last ? nm : (int)__fmul_rn((float)nm, a.ratio); /* float32, as published */
    for (int i = i0 + (int)threadIdx.x; i < i1; i += blockDim.x) {
        if (!take[i])
            continue;
        if (a.alg != DLLM_DREAM_STEP_ORIGIN) {
            int rank = 0;
            for (int j = i0; j < i1 && rank < k; j++)
                rank += key[j] > key[i] || (key[j] == key[i] && j < i);
            if (rank >= k)
                continue;
        }
        const int pos = row_pos[i];
        canvas[(size_t)b * T + pos] = x0[i];
        if (x0[i] == mask_id)
            continue; /* a committed mask id leaves the position masked */
        commit_step[(size_t)b * G + (pos - P)] = (int16_t)a.step;
        commit_prob[(size_t)b * G + (pos - P)] = prob[i];
    }
}

extern "C" void dllm_cuda_dream_commit(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                                       const int32_t *x0, const double *key, const float *prob,
                                       const uint8_t *take, const int32_t *row_pos,
                                       const int32_t *seq_start, int B, int T, int P, int G,
                                       int mask_id, const dllm_dream_step *a, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(B > 0 && P >= 0 && G > 0 && T == P + G && a->step <= 32767,
                      "bad arguments B=%d P=%d G=%d T=%d", B, P, G, T);
    DLLM_LAUNCH(dream_commit_kernel, B, DREAM_COMMIT_THREADS, 0, as_stream(s))(canvas,
        commit_step, commit_prob, x0, key, prob, take, row_pos, seq_start, T, P, G, mask_id, *a);
    cudaLaunchCheck();
}
