/* denoise.c: the denoising samplers' per-row math and the CPU backend's denoising-step
 * entries (contracts in kernels/sample.h and kernels/backend.h); the CUDA kernels
 * (kernels/cuda/sampler.cu, sampler_step.cu) are checked against this code. */
#include "kernels/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* x0 for one row: argmax (T = 0) or Gumbel-max in float64 with keyed noise,
 * over every token but `exclude`. */
int32_t dllm_sampler_draw_x0_excl(const float *logit, int V, double temp, dllm_rng *noise, int pos,
                                  int exclude)
{
    int32_t best = exclude == 0 && V > 1 ? 1 : 0;
    if (temp == 0) {
        for (int v = best + 1; v < V; v++)
            if (v != exclude && logit[v] > logit[best])
                best = v;
        return best;
    }
    /* A token whose score cannot beat the best so far is skipped before its exp, log
     * and pow (most of a step's sampling time): with w = -log u >= 1 - u,
     * log s = l - T log w <= l + T u / (1 - u) (as log(1/y) <= 1/y - 1). The margin
     * dwarfs the rounding of either side, so the winner, and every score compared, is
     * the one the full loop computes. */
    const bool prune = temp > 0;
    double best_s = -1, log_best = -INFINITY;
    for (int v = 0; v < V; v++) {
        if (v == exclude)
            continue;
        noise->ctr = (uint64_t)pos * (uint64_t)V + (uint64_t)v;
        double u = dllm_rng_uniform(noise);
        if (prune && (double)logit[v] + temp * u / (1.0 - u) < log_best - 1e-9)
            continue;
        double s = exp((double)logit[v]) / pow(-log(u), temp);
        if (s > best_s) {
            best_s = s;
            best = v;
            log_best = best_s > 0 && isfinite(best_s) ? log(best_s) : -INFINITY;
        }
    }
    return best;
}

int32_t dllm_sampler_draw_x0(const float *logit, int V, double temp, dllm_rng *noise, int pos)
{
    return dllm_sampler_draw_x0_excl(logit, V, temp, noise, pos, -1);
}

/* softmax(logit)[x] in double */
double dllm_sampler_prob(const float *logit, int V, int32_t x)
{
    double mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (logit[v] > mx)
            mx = logit[v];
    if (mx == -INFINITY)
        return 0;
    double z = 0;
    for (int v = 0; v < V; v++)
        z += exp((double)logit[v] - mx);
    return exp((double)logit[x] - mx) / z;
}

/* ---- the CPU backend's denoising-step entries --------------------------------------- */

void op_denoise_block_counts(int32_t *nm, const int32_t *canvas, int B, int T, int lo, int hi,
                             int mask_id)
{
    for (int b = 0; b < B; b++) {
        int k = 0;
        for (int t = lo; t < hi; t++)
            k += canvas[(size_t)b * T + t] == mask_id;
        nm[b] = k;
    }
}

/* Whether sequence b of the canvas holds mask_id in [lo, hi). */
static bool masked_in(const int32_t *canvas, int b, int T, int lo, int hi, int mask_id)
{
    for (int t = lo; t < hi; t++)
        if (canvas[(size_t)b * T + t] == mask_id)
            return true;
    return false;
}

void op_denoise_rows(int32_t *rows, int32_t *rows_u, int64_t *row_seq, int32_t *row_pos,
                     int32_t *seq_start, int32_t *n, const int32_t *canvas, int B, int T, int lo,
                     int hi, int act_lo, int mask_id, uint64_t seq_offset)
{
    int k = 0;
    for (int b = 0; b < B; b++) {
        seq_start[b] = k;
        if (act_lo >= 0 && !masked_in(canvas, b, T, act_lo, hi, mask_id))
            continue;
        for (int t = lo; t < hi; t++)
            if (canvas[(size_t)b * T + t] == mask_id) {
                rows[k] = b * T + t;
                if (rows_u)
                    rows_u[k] = (B + b) * T + t;
                row_seq[k] = (int64_t)(seq_offset + (uint64_t)b);
                row_pos[k++] = t;
            }
    }
    seq_start[B] = *n = k;
}

void op_denoise_logits_fix(float *cond, const float *uncond, int n, int V, float w, int eos_id)
{
    if (uncond)
        for (size_t i = 0; i < (size_t)n * V; i++) {
            float un = uncond[i];
            cond[i] = un + w * (cond[i] - un);
        }
    if (eos_id >= 0)
        for (int i = 0; i < n; i++)
            cond[(size_t)i * V + eos_id] = -INFINITY;
}

/* Each row's noise is keyed by its sequence and position alone, so the rows are drawn
 * in parallel with the same results; the float64 draws are worth threads above a few
 * rows. */
void op_denoise_draw(int32_t *x0, float *prob, double *rand_conf, const float *logits,
                     const int64_t *row_seq, const int32_t *row_pos, int n, int V,
                     double temperature, uint64_t seed, const int32_t *seq_step,
                     uint64_t seq_offset, int exclude)
{
#pragma omp parallel for schedule(dynamic, 4) if ((size_t)n * V > 262144)
    for (int i = 0; i < n; i++) {
        const uint64_t gb = (uint64_t)row_seq[i];
        const uint64_t gstep = (uint64_t)seq_step[gb - seq_offset];
        const float *lg = logits + (size_t)i * V;
        dllm_rng noise = dllm_rng_make(seed, DLLM_RNG_SAMPLER, gstep, 2 * gb);
        x0[i] = dllm_sampler_draw_x0_excl(lg, V, temperature, &noise, row_pos[i], exclude);
        prob[i] = (float)dllm_sampler_prob(lg, V, x0[i]);
        if (rand_conf) {
            dllm_rng remask = dllm_rng_make(seed, DLLM_RNG_SAMPLER, gstep, 2 * gb + 1);
            remask.ctr = (uint64_t)row_pos[i];
            rand_conf[i] = dllm_rng_uniform(&remask);
        }
    }
}

typedef struct {
    int row, pos;
    double conf;
} ranked_row;

/* confidence descending, then position ascending (ties to the lowest index) */
static int by_conf_desc(const void *a, const void *b)
{
    const ranked_row *x = a, *y = b;
    if (x->conf > y->conf)
        return -1;
    if (x->conf < y->conf)
        return 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

void op_denoise_commit(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                       const int32_t *x0, const float *prob, const double *rand_conf,
                       const int32_t *row_pos, const int32_t *seq_start, const int32_t *nm,
                       int spb, int step_in_block, int32_t *seq_step, double threshold, int B,
                       int T, int P, int G, int mask_id, int eos_id, int eot_id, bool cfg)
{
    ranked_row *r = dllm_malloc(sizeof *r * (size_t)(seq_start[B] > 0 ? seq_start[B] : 1));
    for (int b = 0; b < B; b++) {
        const int i0 = seq_start[b], nc = seq_start[b + 1] - i0;
        for (int j = 0; j < nc; j++) {
            const int i = i0 + j;
            double conf = rand_conf ? rand_conf[i] : (double)prob[i];
            if ((eos_id >= 0 && x0[i] == eos_id) || (eot_id >= 0 && x0[i] == eot_id))
                conf = -INFINITY;
            r[j] = (ranked_row){i, row_pos[i], conf};
        }
        qsort(r, (size_t)nc, sizeof *r, by_conf_desc);
        const int gstep = seq_step[b];
        int k = nm[b] / spb + (step_in_block < nm[b] % spb);
        if (threshold > 0) /* the most confident, then every one >= threshold */
            for (k = nc > 0; k < nc && r[k].conf >= threshold; k++)
                ;
        seq_step[b] += threshold > 0 ? nc > 0 : 1;
        for (int j = 0; j < k && j < nc; j++) {
            const int i = r[j].row;
            if (x0[i] == mask_id)
                continue; /* written back: still masked, competes again */
            canvas[(size_t)b * T + row_pos[i]] = x0[i];
            if (cfg)
                canvas[(size_t)(B + b) * T + row_pos[i]] = x0[i];
            size_t g = (size_t)b * G + (size_t)(row_pos[i] - P);
            commit_step[g] = (int16_t)gstep;
            commit_prob[g] = prob[i];
        }
    }
    free(r);
}
