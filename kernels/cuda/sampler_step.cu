/* sampler_step.cu: the parts of one denoising step that the device sampler
 * (dllm/sampler.c) runs around the x0 draw of sampler.cu, each the arithmetic of the CPU
 * backend's entries (kernels/cpu/denoise.c):
 *   rows         the committable rows (every position of [lo, hi) still masked; under a
 *                threshold only in sequences whose block is not done), sequence-major
 *                then by position, with each sequence's first row and the total count
 *                (the one scalar the host reads per step);
 *   block counts the masked count of each sequence's current block at its start (the
 *                transfer-count schedule is derived from it);
 *   logits fix   CFG un + w (cond - un) in fp32 as spelled (no fused multiply-add),
 *                then the EOS logit -inf (logits_eos_inf);
 *   commit       per sequence, the k most confident candidates (confidence descending,
 *                ties to the lower position) or the threshold's, the confidence switch
 *                for EOS/EoT, a committed mask id left masked, the commit records and
 *                the sequence's step count.
 * Every reduction here is over integers or a comparison count, so the results do not
 * depend on thread order. */
#include "kernels/cuda/common.cuh"

enum { ROWS_THREADS = 1024, COMMIT_THREADS = 128 }; /* rows: one block, as wide as it goes */

/* Exclusive prefix sum of v over the block (blockDim.x a multiple of 32); *total gets the
 * block's sum. Three barriers; safe to call again at once. */
__device__ static int block_excl_scan(int v, int *total)
{
    __shared__ int wsum[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += y;
    }
    __syncthreads(); /* wsum may still be read by the previous call */
    if (lane == 31)
        wsum[wid] = inc;
    __syncthreads();
    if (wid == 0) {
        int w = lane < nw ? wsum[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o)
                w += y;
        }
        if (lane < nw)
            wsum[lane] = w;
    }
    __syncthreads();
    *total = wsum[nw - 1];
    return (wid ? wsum[wid - 1] : 0) + inc - v;
}

/* One block walks the (sequence, position) grid in order, so rows come out sequence-major
 * and by position, as committable_rows in dllm/sampler.c lists them. */
__global__ static void __launch_bounds__(ROWS_THREADS)
rows_kernel(int32_t *rows, int32_t *rows_u, int64_t *row_seq, int32_t *row_pos,
            int32_t *seq_start, int32_t *n_out, const int32_t *canvas, int B, int T, int P,
            int hi, int act_lo, int mask_id, uint64_t seq_offset)
{
    // rows, rows_u, row_seq, row_pos (up to B*(hi-P)); seq_start (B+1); canvas (B, T);
    // P here is the first position listed (the kernel's lo)
    const int W = hi - P;
    const long total = (long)B * W;
    int base = 0;
    for (long c0 = 0; c0 < total; c0 += blockDim.x) {
        const long f = c0 + threadIdx.x;
        int b = 0, u = 0, flag = 0;
        if (f < total) {
            b = (int)(f / W);
            u = (int)(f % W);
            flag = canvas[(size_t)b * T + P + u] == mask_id;
            if (flag && act_lo >= 0) { /* the threshold's: b's block still masked */
                int any = 0;
                for (int t = act_lo; t < hi && !any; t++)
                    any = canvas[(size_t)b * T + t] == mask_id;
                flag = any;
            }
        }
        int sum;
        const int i = base + block_excl_scan(flag, &sum);
        if (f < total) {
            if (u == 0)
                seq_start[b] = i;
            if (flag) {
                rows[i] = b * T + P + u;
                if (rows_u)
                    rows_u[i] = (B + b) * T + P + u;
                row_seq[i] = (int64_t)(seq_offset + (uint64_t)b);
                row_pos[i] = P + u;
            }
        }
        base += sum;
    }
    if (threadIdx.x == 0) {
        seq_start[B] = base;
        *n_out = base;
    }
}

extern "C" void dllm_cuda_sampler_rows(int32_t *rows, int32_t *rows_u, int64_t *row_seq,
                                       int32_t *row_pos, int32_t *seq_start, int32_t *n,
                                       const int32_t *canvas, int B, int T, int lo, int hi,
                                       int act_lo, int mask_id, uint64_t seq_offset,
                                       dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(B > 0 && lo >= 0 && hi > lo && hi <= T && act_lo < hi,
                      "bad shape B=%d T=%d lo=%d hi=%d act_lo=%d", B, T, lo, hi, act_lo);
    DLLM_CUDA_REQUIRE((long)(2 * B) * T <= 0x7FFFFFFFL, "canvas of %d x %d: flat rows overflow",
                      B, T);
    DLLM_LAUNCH(rows_kernel, 1, ROWS_THREADS, 0, as_stream(s))(rows, rows_u, row_seq, row_pos,
        seq_start, n, canvas, B, T, lo, hi, act_lo, mask_id, seq_offset);
    cudaLaunchCheck();
}

__global__ static void block_counts_kernel(int32_t *nm, const int32_t *canvas, int B, int T,
                                           int lo, int hi, int mask_id)
{
    // nm (B); canvas (B, T): one thread per sequence, a block_length-long scan
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < B; b += gridDim.x * blockDim.x) {
        int c = 0;
        for (int t = lo; t < hi; t++)
            c += canvas[(size_t)b * T + t] == mask_id;
        nm[b] = c;
    }
}

extern "C" void dllm_cuda_sampler_block_counts(int32_t *nm, const int32_t *canvas, int B, int T,
                                               int lo, int hi, int mask_id, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(B > 0 && lo >= 0 && hi > lo && hi <= T, "bad block [%d, %d) of T=%d", lo,
                      hi, T);
    DLLM_LAUNCH(block_counts_kernel, grid_for((size_t)B, 128), 128, 0, as_stream(s))(nm, canvas,
        B, T, lo, hi, mask_id);
    cudaLaunchCheck();
}

__global__ static void logits_fix_kernel(float *lc, const float *lu, size_t n, int V, float w,
                                         int eos)
{
    // lc, lu (n/V, V)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (lu) {
            float un = lu[i];
            lc[i] = __fadd_rn(un, __fmul_rn(w, __fsub_rn(lc[i], un)));
        }
        if (eos >= 0 && (int)(i % (size_t)V) == eos)
            lc[i] = -INFINITY;
    }
}

extern "C" void dllm_cuda_sampler_logits_fix(float *cond, const float *uncond, int n, int V,
                                             float w, int eos_id, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(n >= 0 && V > 0, "bad shape n=%d V=%d", n, V);
    size_t total = (size_t)n * (size_t)V;
    if (total == 0 || (!uncond && eos_id < 0))
        return;
    DLLM_LAUNCH(logits_fix_kernel, grid_for(total, 256), 256, 0, as_stream(s))(cond, uncond,
        total, V, w, eos_id);
    cudaLaunchCheck();
}

/* The confidence dllm/sampler.c ranks by: the float prob widened to double, or the
 * random-remasking draw; -inf for x0 in {EOS, EoT} under the switch. */
__device__ __forceinline__ double confidence(int j, const int32_t *x0, const float *prob,
                                             const double *rand_conf, int eos, int eot)
{
    int x = x0[j];
    if ((eos >= 0 && x == eos) || (eot >= 0 && x == eot))
        return -INFINITY;
    return rand_conf ? rand_conf[j] : (double)prob[j];
}

/* One block per sequence. Candidate i is committed when fewer than k candidates rank
 * before it (higher confidence, or equal confidence at a lower position: rows are in
 * position order): the first k of the CPU's sort, without sorting. Under a threshold the
 * CPU's sorted prefix (the first, then each one >= threshold) is the first-ranked
 * candidate and every candidate >= threshold. */
__global__ static void commit_kernel(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                                     const int32_t *x0, const float *prob,
                                     const double *rand_conf, const int32_t *row_pos,
                                     const int32_t *seq_start, const int32_t *nm, int spb,
                                     int s, int32_t *seq_step, double thr, int B, int T, int P,
                                     int G, int mask_id, int eos, int eot, int cfg)
{
    // canvas ((cfg ? 2 : 1) * B, T); commit_step, commit_prob (B, G); per row: x0, prob,
    // rand_conf, row_pos; seq_start (B+1); nm, seq_step (B)
    const int b = blockIdx.x;
    const int i0 = seq_start[b], i1 = seq_start[b + 1];
    const int k = thr > 0 ? 1 : nm[b] / spb + (s < nm[b] % spb);
    const int gstep = seq_step[b];
    for (int i = i0 + (int)threadIdx.x; i < i1; i += blockDim.x) {
        const double ci = confidence(i, x0, prob, rand_conf, eos, eot);
        int rank = 0;
        for (int j = i0; j < i1 && rank < k; j++) {
            const double cj = confidence(j, x0, prob, rand_conf, eos, eot);
            rank += cj > ci || (cj == ci && j < i);
        }
        const bool chosen = rank < k || (thr > 0 && ci >= thr);
        if (!chosen || x0[i] == mask_id)
            continue; /* not chosen, or a mask id written back: still masked */
        const int pos = row_pos[i];
        canvas[(size_t)b * T + pos] = x0[i];
        if (cfg)
            canvas[(size_t)(B + b) * T + pos] = x0[i];
        commit_step[(size_t)b * G + (pos - P)] = (int16_t)gstep;
        commit_prob[(size_t)b * G + (pos - P)] = prob[i];
    }
    __syncthreads(); /* every thread has read seq_step[b] */
    if (threadIdx.x == 0)
        seq_step[b] = gstep + (thr > 0 ? i1 > i0 : 1);
}

extern "C" void dllm_cuda_sampler_commit(int32_t *canvas, int16_t *commit_step,
                                         float *commit_prob, const int32_t *x0,
                                         const float *prob, const double *rand_conf,
                                         const int32_t *row_pos, const int32_t *seq_start,
                                         const int32_t *nm, int spb, int step_in_block,
                                         int32_t *seq_step, double threshold, int B, int T,
                                         int P, int G, int mask_id, int eos_id, int eot_id,
                                         bool cfg, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(B > 0 && spb > 0 && step_in_block >= 0 &&
                          (threshold > 0 || step_in_block < spb) && threshold <= 1 && P >= 0 &&
                          G > 0 && T == P + G && seq_step,
                      "bad arguments B=%d spb=%d s=%d threshold=%g P=%d G=%d T=%d", B, spb,
                      step_in_block, threshold, P, G, T);
    DLLM_LAUNCH(commit_kernel, B, COMMIT_THREADS, 0, as_stream(s))(canvas, commit_step,
        commit_prob, x0, prob, rand_conf, row_pos, seq_start, nm, spb, step_in_block, seq_step,
        threshold, B, T, P, G, mask_id, eos_id, eot_id, cfg ? 1 : 0);
    cudaLaunchCheck();
}
