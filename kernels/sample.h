/* sample.h: the samplers' per-row math on the host -- what the CPU backend's sampler
 * entries (kernels/backend.h) run for each row, and what the CUDA kernels are checked
 * against.
 *
 * Autoregressive choice (dllm/ar_sampler.h has the whole contract): from the last
 * logits z (V of them), temperature 0: argmax z, ties to the lowest id (sampling log-prob
 * 0); otherwise p = softmax(z / temperature) (double), restricted to the nucleus -- the
 * smallest set of most probable tokens whose mass reaches top_p (top_p = 1 keeps all)
 * -- renormalised, and sampled by inverse CDF over the kept ids in increasing id order
 * with the uniform u. */
#ifndef DLLM_SAMPLE_H
#define DLLM_SAMPLE_H

#include "kernels/base.h"
#include "kernels/rng.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The sampling distribution of one row of logits [V]: probs[V] (double,
 * summing to 1 over the nucleus, 0 outside it). temperature > 0. work holds
 * V doubles and V ints' worth of scratch (dllm_ar_work_bytes(V)); NULL allocates. */
size_t dllm_ar_work_bytes(int V);
void dllm_ar_dist(const float *logits, int V, double temperature, double top_p, double *probs,
                  void *work);
/* One choice from logits [V] with uniform u in (0, 1) as described above;
 * *logp and *logp_t1 (may be NULL) receive the two log-probs. */
int32_t dllm_ar_choose(const float *logits, int V, double temperature, double top_p, double u,
                       double *logp, double *logp_t1, void *work);

/* One row's draw, as the LLaDA sampler makes it (dllm/sampler.h): x0 by argmax (temp 0,
 * ties to the lowest id) or Gumbel-max with the keyed noise of canvas position pos (the
 * stream's counter is set to pos*V + v for token v). */
int32_t dllm_sampler_draw_x0(const float *logit, int V, double temp, dllm_rng *noise, int pos);
/* The same draw over every token but `exclude` (-1: none; mask_token = forbid
 * passes the mask id). Noise draws stay keyed by token id, so the other
 * tokens' scores are those of the full draw. */
int32_t dllm_sampler_draw_x0_excl(const float *logit, int V, double temp, dllm_rng *noise, int pos,
                                  int exclude);
/* softmax(logit)[x] in double: the committed token's probability. */
double dllm_sampler_prob(const float *logit, int V, int32_t x);

/* The CPU backend's denoising-step entries (kernels/backend.h has the contracts). */
void op_denoise_block_counts(int32_t *nm, const int32_t *canvas, int B, int T, int lo, int hi,
                             int mask_id);
void op_denoise_rows(int32_t *rows, int32_t *rows_u, int64_t *row_seq, int32_t *row_pos,
                     int32_t *seq_start, int32_t *n, const int32_t *canvas, int B, int T, int lo,
                     int hi, int act_lo, int mask_id, uint64_t seq_offset);
void op_denoise_logits_fix(float *cond, const float *uncond, int n, int V, float w, int eos_id);
void op_denoise_draw(int32_t *x0, float *prob, double *rand_conf, const float *logits,
                     const int64_t *row_seq, const int32_t *row_pos, int n, int V,
                     double temperature, uint64_t seed, const int32_t *seq_step,
                     uint64_t seq_offset, int exclude);
void op_denoise_commit(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                       const int32_t *x0, const float *prob, const double *rand_conf,
                       const int32_t *row_pos, const int32_t *seq_start, const int32_t *nm,
                       int spb, int step_in_block, int32_t *seq_step, double threshold, int B,
                       int T, int P, int G, int mask_id, int eos_id, int eot_id, bool cfg);

/* ---- Dream's step (dllm/dream_sampler.h: the published sample_tokens per row) ---------- */
enum {
    DLLM_DREAM_STEP_ORIGIN = 0,
    DLLM_DREAM_STEP_MASKGIT_PLUS = 1,
    DLLM_DREAM_STEP_TOPK_MARGIN = 2,
    DLLM_DREAM_STEP_ENTROPY = 3
};
/* One step's settings: alg (the dllm_dream_alg values above), the token distribution's
 * temperature, top_p (1: off), top_k (0: off) and exclude (the mask id under forbid, else
 * -1), alg_temp, the noise (seed, step: the streams (seed, DLLM_RNG_SAMPLER, step, 4b +
 * {0, 1, 2}) of global sequence b), ratio = 1 - s/t in float32 and whether the step is the
 * last. */
typedef struct {
    int alg;
    double temperature, top_p, alg_temp;
    int top_k, exclude;
    uint64_t seed, step;
    float ratio;
    bool last;
} dllm_dream_step;
/* Scratch dllm_dream_probs needs for V ids. */
size_t dllm_dream_work_bytes(int V);
/* p (V) = softmax of the row's logits after exclude, temperature, top_p and top_k. */
void dllm_dream_probs(const float *logit, int V, const dllm_dream_step *a, double *p,
                      void *work);
/* x0 from p: argmax (temperature 0, ties to the lowest id) or the inverse-CDF draw with u;
 * *conf = a->alg's confidence of it. */
int32_t dllm_dream_pick(const double *p, int V, const dllm_dream_step *a, double u, double *conf);
/* The CPU backend's Dream step entries (kernels/backend.h has the contracts). */
void op_dream_draw(int32_t *x0, double *key, float *prob, uint8_t *take, const float *logits,
                   const int64_t *row_seq, const int32_t *row_pos, int n, int V,
                   const dllm_dream_step *a);
void op_dream_commit(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                     const int32_t *x0, const double *key, const float *prob,
                     const uint8_t *take, const int32_t *row_pos, const int32_t *seq_start,
                     int B, int T, int P, int G, int mask_id, const dllm_dream_step *a);

#endif
