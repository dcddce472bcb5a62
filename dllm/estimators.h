/* estimators.h: sequence-level log-likelihood estimates for a masked-diffusion
 * model (docs/METHOD.md §3). Every log-probability that feeds a ratio is summed in
 * double.
 *
 *  one_step   completion fully masked (prompt tokens masked with probability
 *             p_mask_prompt, d1's trick for the policy ratio), one forward pass;
 *             seq = sum of per-token log-probs.
 *  elbo       K Monte Carlo samples; sample k masks n_k of the L completion
 *             tokens, a uniformly random subset, with the counts stratified as
 *             the LLaDA reference does (one random offset k0 in 1..L, n_j =
 *             round(k0 + j L/K), wrapped into 1..L); value (L/n_k) * sum over
 *             masked of log p(y_i | rest); the estimate is the mean over k and
 *             mc_se the standard error of that mean. A token's value is the mean
 *             of its log-prob over the samples that masked it (NaN if none).
 *  trajectory replays a recorded commit order: forward pass g sees the prompt
 *             and every token committed before step g*shrink, and scores the
 *             tokens committed in steps [g*shrink, (g+1)*shrink).
 *
 * What a rollout can leave in a completion, and what each estimator does:
 *  - tokens after the first EOS: outside the completion (length L, up to and
 *    including the EOS); never scored. one_step masks them, elbo and
 *    trajectory show them as the sampler left them.
 *  - a position still masked at the end (the mask id; the sampler's
 *    mask_token = allow, where a committed mask id is written back): not
 *    scored by any estimator (token value NaN, nothing in the sum), and masked
 *    in every canvas. Why: it is no token of the answer -- the policy declined
 *    to fill it -- and log p(mask) is the log-prob of an id the model is never
 *    trained to predict, which would swamp ratios and push gradients onto the
 *    mask logit. The estimate is then that of the completion's real tokens with
 *    the hole left open, as the sampler left it; elbo draws its masks and its
 *    L/n_k weights over the L' scored tokens only (L' = L when nothing is left
 *    masked, so those estimates are unchanged), and a completion with no
 *    scored token has estimate 0. Under mask_token = forbid no position is
 *    left masked and all of this is moot.
 *  - a committed-mask record (a commit step on a position holding the mask
 *    id, from any producer): the same, the step is ignored.
 * Only a real token without a commit step (a record no sampler makes) is an
 * input error, for trajectory.
 *
 * Masks come from the caller's rng stream only, so two policies evaluated with
 * the same stream see identical masks (coupled estimates). All estimators
 * score at `temperature` (logits / temperature). */
#ifndef DLLM_ESTIMATORS_H
#define DLLM_ESTIMATORS_H

#include "dllm/sampler.h"
#include "kernels/rng.h"

typedef enum {
    EST_ONE_STEP = 0,
    EST_ELBO = 1,
    EST_TRAJECTORY = 2,
    EST_AR_EXACT = 3 /* autoregressive models: the exact sum of token log-probs
                        (one clean causal canvas; position P+t-1 predicts token t) */
} dllm_estimator;

typedef struct {
    dllm_estimator kind;
    int mc;               /* elbo: samples K */
    double p_mask_prompt; /* one_step: prompt tokens masked with this probability */
    int shrink;           /* trajectory: consecutive steps per forward pass */
    double temperature;   /* scoring temperature (1 = the model as is) */
    int mask_id;
    int vocab;            /* logits per row */
} dllm_lik_cfg;

typedef struct {
    double seq_logp;
    double mc_se;         /* elbo: standard error of the mean over samples; else 0 */
    double *token_logp;   /* (L) per completion token, NaN where not scored */
    int L;
} dllm_lik_result;

/* Parses "one_step" | "elbo" | "trajectory" | "exact". */
int dllm_estimator_parse(const char *s, dllm_estimator *out);
const char *dllm_estimator_name(dllm_estimator e);

/* log softmax(logits / 1)[target] for the listed rows of the canvases tokens [B,T]
 * (keymask as dllm_logits_fn's), without the caller seeing logits: a model that fuses
 * its head with the log-softmax (dllm_tf_target_logp). 0 on success. */
typedef int (*dllm_logp_fn)(void *model, const int32_t *tokens, const uint8_t *keymask, int B,
                            int T, const int32_t *rows, const int32_t *targets, int n_rows,
                            float *logp);
/* prompt [P], completion [L]; commit_step [L] is required for trajectory.
 * rng: the mask stream (its counter is not advanced for the caller). */
int dllm_seq_logprob(dllm_logits_fn fn, void *model, const int32_t *prompt, int P,
                     const int32_t *completion, int L, const int16_t *commit_step,
                     const dllm_lik_cfg *c, dllm_rng rng, dllm_lik_result *out, dllm_err *err);
/* The same, with the plan's log-probs from lfn where it applies (dllm_lik_plan_eval_logp;
 * lfn NULL: exactly dllm_seq_logprob). */
int dllm_seq_logprob_logp(dllm_logits_fn fn, dllm_logp_fn lfn, void *model,
                          const int32_t *prompt, int P, const int32_t *completion, int L,
                          const int16_t *commit_step, const dllm_lik_cfg *c, dllm_rng rng,
                          dllm_lik_result *out, dllm_err *err);
void dllm_lik_result_free(dllm_lik_result *r);

/* The stratified mask counts of the elbo estimator: n[0..K) in 1..L. */
void dllm_elbo_mask_counts(dllm_rng *rng, int L, int K, int *n);

#endif
