/* dream_sampler.h: Dream's denoising sampler (the published diffusion_generate
 * of Dream-v0, generation_utils.py), a family other than LLaDA's
 * (dllm/sampler.h): no blocks, one timestep schedule over the whole canvas.
 *
 * Canvas = prompt (left-padded, key-masked) followed by G = gen_length mask
 * tokens. Timesteps t_i = linspace(1, eps, steps + 1) in float32 (torch's
 * linspace: the first half counted up from 1, the second down from eps). At
 * step i (s = t_{i+1}) one forward pass gives logits at every still-masked
 * generated position (logits shifted inside the model, dllm/arch.h); the token
 * distribution is softmax(logit / temperature) (temperature 0: no division)
 * after top_p (nucleus, keeping the first token over the threshold) and top_k
 * (ties with the k-th kept) filtering; x0 is its argmax (temperature 0, ties to
 * the lowest id) or a draw from it. Then, by alg:
 *   origin        each masked position is committed with probability 1 - s/t
 *                 (1 at the last step), with x0 drawn for it;
 *   maskgit_plus  confidence = p(x0),
 *   topk_margin   confidence = p(top1) - p(top2),
 *   entropy       confidence = sum_v p_v log(p_v + 1e-10) (negative entropy);
 *                 k = int(n_masked * (1 - s/t)) (all n_masked at the last
 *                 step, float32 as published), and the k most confident masked
 *                 positions are committed (ties to the lowest index), or, with
 *                 alg_temp > 0, k positions drawn without replacement from
 *                 softmax(confidence / alg_temp).
 *
 * Differences from the published code, all deliberate: n_masked is the row's
 * own masked count. The published code commits int(batch-mean masked count *
 * (1 - s/t)) in every row: the same number whenever the rows have equal counts
 * (always, unless a row commits the mask id), otherwise a row above the mean
 * keeps masks after the last step and a row below it has its top-k reach
 * unmasked positions, writing the mask id over committed or prompt tokens (both
 * seen running it); the own count also keeps a rollout independent of its
 * batch. Prompt positions are never rewritten (the published code also
 * denoises mask ids inside the prompt); mask_token = forbid (dllm/sampler.h)
 * removes the mask id from the token distribution. A committed mask id (allow)
 * leaves the position masked, as in the published code. There is no EOS
 * handling, as published: generated EOS tokens stay on the canvas.
 *
 * Greedy runs are compared with the published diffusion_generate itself in
 * tests/unit/test_dream_published.c (goldens of tests/ref/make_dream_goldens_published.py).
 *
 * The record is LLaDA's (dllm_rollout): commit_step = the step that committed
 * each generated token, commit_prob = its softmax probability at temperature 1
 * over the full logits (the quantity the estimators score), so the trajectory
 * estimator replays the sampler's canvases.
 *
 * Randomness is keyed by the global sequence index b = seq_offset + row: the
 * token draw of canvas position t at step s is draw t of stream (seed, SAMPLER,
 * s, 4b); origin's transfer draw of t is draw t of (seed, SAMPLER, s, 4b+1);
 * alg_temp's Gumbel keys of t are draw t of (seed, SAMPLER, s, 4b+2). So the
 * result does not depend on the batch composition. Random draws cannot match
 * torch's generator; greedy runs match the published sampler token for token. */
#ifndef DLLM_DREAM_SAMPLER_H
#define DLLM_DREAM_SAMPLER_H

#include "dllm/sampler.h"

typedef enum {
    DLLM_DREAM_ORIGIN = 0,
    DLLM_DREAM_MASKGIT_PLUS = 1,
    DLLM_DREAM_TOPK_MARGIN = 2,
    DLLM_DREAM_ENTROPY = 3
} dllm_dream_alg;

typedef struct {
    dllm_dream_alg alg;
    double eps;      /* final timestep, (0, 1); published default 1e-3 */
    double alg_temp; /* 0: top-k by confidence; > 0: positions drawn */
    double top_p;    /* 1: off */
    int top_k;       /* 0: off */
} dllm_dream_cfg;

/* The published defaults: origin, eps 1e-3, alg_temp 0 (None), top_p 1 and
 * top_k 0 (None). */
dllm_dream_cfg dllm_dream_cfg_default(void);
/* "origin" | "maskgit_plus" | "topk_margin" | "entropy" (0); -1 for anything else. */
int dllm_dream_alg_parse(const char *s, dllm_dream_alg *out);
const char *dllm_dream_alg_name(dllm_dream_alg a);
/* Range checks of c (gen_length, steps, temperature, vocab) and d; input
 * errors name the flag. */
int dllm_dream_check(const dllm_sampler_cfg *c, const dllm_dream_cfg *d, dllm_err *err);

/* Uses c's gen_length, steps, temperature, mask_id, vocab, mask_token and
 * seq_offset (block_length, remasking, cfg_scale and the EOS switches are
 * LLaDA's and ignored). prompts [B,P] left-padded; prompt_mask [B,P] (NULL:
 * all real). Allocates out's arrays (free with dllm_rollout_free). */
int dllm_dream_sample(dllm_logits_fn fn, void *model, const int32_t *prompts,
                      const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                      const dllm_dream_cfg *d, uint64_t seed, dllm_rollout *out, dllm_err *err);

/* The same loop over the model m on its backend m->be (dllm/device_logits.h; the table's
 * denoise_rows, dream_draw and dream_commit): on a device only the per-step count of
 * masked rows comes to the host, and the canvas and records at the end. cfg.vocab must
 * equal m->V. dllm_dream_sample runs it on the CPU backend over a host model. */
int dllm_dream_sample_model(const dllm_device_logits *m, const int32_t *prompts,
                            const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                            const dllm_dream_cfg *d, uint64_t seed, dllm_rollout *out,
                            dllm_err *err);

/* One row's token distribution as the published sample_tokens builds it:
 * p (V) = softmax of the logits after c's mask_token, temperature and d's
 * top_p, top_k; returns its argmax (ties to the lowest id) and sets *conf to
 * d->alg's confidence of it. Exposed so tests check the filtering itself. */
int32_t dllm_dream_token_dist(const float *logit, const dllm_sampler_cfg *c,
                              const dllm_dream_cfg *d, double *p, double *conf);

#endif
