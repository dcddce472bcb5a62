/* lik_plan.h: likelihood estimates for a whole batch of completions, with
 * their gradients -- the engine behind l_mu, l_pi, l_old and l_theta of the RL
 * step (docs/METHOD.md §3-§5).
 *
 * A plan lists every canvas the estimator needs (prompt left-padded to a common
 * length P, then the G generated positions) and every scored row: (canvas,
 * position, sequence i, token t, target, weight a). Then
 *     seq_logp[i] = sum over i's rows of a_r * logp_r
 *     tok_logp[i,t] = mean of logp_r over i's rows scoring token t (NaN if none)
 * with a_r = 1 (one_step, trajectory) or L/(n_k K) (elbo). Building the plan
 * draws every mask; evaluating it is deterministic, so the same plan evaluated
 * under two policies (trainer vs rollout precision, current vs old parameters)
 * gives coupled estimates on identical masks.
 *
 * Completion i has length L_i (up to and including its first EOS); positions
 * past L_i are never scored: one_step and elbo mask them in every canvas (as d1
 * does; elbo draws its random masks over the first L_i only), trajectory shows
 * them as the sampler did at each step. Positions holding the mask id (left
 * masked by the sampler) are never scored and stay masked (estimators.h);
 * every sequence keeps at least one canvas (K for elbo), rows or not, so each
 * reaches the gradient callback. */
#ifndef DLLM_LIK_PLAN_H
#define DLLM_LIK_PLAN_H

#include "dllm/estimators.h"

typedef struct {
    int n_seq, P, G, T;       /* T = P + G */
    int n_canvas;
    int32_t *canvas;          /* (n_canvas, T) */
    uint8_t *keymask;         /* (n_canvas, T), NULL when no prompt is padded */
    int n_rows;
    int32_t *row;             /* (n_rows) flat index canvas*T + position */
    int32_t *seq, *tok;       /* (n_rows) completion i and its token t */
    int32_t *target;          /* (n_rows) the token scored */
    double *a;                /* (n_rows) weight in seq_logp */
    int32_t *canvas_seq;      /* (n_canvas) the sequence each canvas belongs to */
    int *L;                   /* (n_seq) completion lengths */
    int32_t *tok_count;       /* (n_seq, G) rows scoring each token */
    int V;                    /* logits per row */
    double temperature;
    dllm_estimator kind;
    int mc;
} dllm_lik_plan;

/* One batch: prompts (n_seq, P) left-padded with prompt_mask (1 = real; NULL:
 * no padding), gen (n_seq, G) generated tokens, L (n_seq) lengths, commit_step
 * (n_seq, G) for trajectory. Masks for sequence i come from stream
 * dllm_rng_make(seed, DLLM_RNG_MASKS, key, seq_offset + i): keyed by the global
 * sequence index, so a batch split across ranks draws what one rank would. */
int dllm_lik_plan_build(dllm_lik_plan *p, const dllm_lik_cfg *c, const int32_t *prompts,
                        const uint8_t *prompt_mask, const int32_t *gen, const int *L,
                        const int16_t *commit_step, int n_seq, int P, int G, uint64_t seed,
                        uint64_t key, uint64_t seq_offset, dllm_err *err);
/* One sequence with no padding and no positions past its end (G = L), masks
 * from the caller's stream rng: what dllm_seq_logprob scores. */
int dllm_lik_plan_build_one(dllm_lik_plan *p, const dllm_lik_cfg *c, const int32_t *prompt, int P,
                            const int32_t *completion, int L, const int16_t *commit_step,
                            dllm_rng rng, dllm_err *err);
void dllm_lik_plan_free(dllm_lik_plan *p);

/* Forward only: seq_logp (n_seq) in double; tok_logp (n_seq, G) may be NULL;
 * mc_se (n_seq) may be NULL (elbo: standard error over samples; else 0);
 * sample (n_canvas) may be NULL: each canvas's Monte Carlo sample of its
 * sequence's estimate (elbo: K sum_r a_r logp_r; the estimate is their mean),
 * so that the standard error of a coupled difference can be computed.
 * Canvases are evaluated in chunks of at most max_canvas per forward call. */
int dllm_lik_plan_eval(const dllm_lik_plan *p, dllm_logits_fn fn, void *model, int max_canvas,
                       double *seq_logp, double *tok_logp, double *mc_se, double *sample,
                       dllm_err *err);
/* The same with the log-probs from lfn where it applies (temperature 1; lfn non-NULL):
 * the model's head fused with the log-softmax, so no logits reach this code -- fp32
 * log-probs in place of the double log-softmax of fn's logits (they agree to fp32
 * rounding). lfn NULL or another temperature: exactly dllm_lik_plan_eval. */
int dllm_lik_plan_eval_logp(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_logp_fn lfn,
                            void *model, int max_canvas, double *seq_logp, double *tok_logp,
                            double *mc_se, double *sample, dllm_err *err);
/* The same, and tok_ent (n_seq, G): the entropy (nats) of the model's distribution
 * at each scored token, softmax at the plan's temperature, the mean over the token's
 * rows (NaN where none). The log-probs are dllm_lik_plan_eval_logp's, bit for bit; with
 * lfn the entropy takes one more forward through fn (the fused head gives none). */
int dllm_lik_plan_eval_entropy(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_logp_fn lfn,
                               void *model, int max_canvas, double *seq_logp, double *tok_logp,
                               double *mc_se, double *sample, double *tok_ent, dllm_err *err);
/* Standard error of the mean over each sequence's samples of a - b (two
 * evaluations of the same plan): the Monte Carlo error of a coupled log-ratio.
 * se (n_seq); 0 for estimators with one sample per sequence. */
void dllm_lik_plan_diff_se(const dllm_lik_plan *p, const double *sample_a, const double *sample_b,
                           double *se);

/* Backward of a loss through the estimates. Chunks hold whole sequences (all
 * of a sequence's canvases; at most max_canvas canvases unless one sequence
 * needs more). Per chunk: forward keeping activations; then grad(ctx, s0, s1,
 * seq_logp, tok_logp, dseq, dtok) is called with the estimates of sequences
 * [s0, s1) (arrays indexed by absolute sequence, rows of G for tokens) and
 * fills dseq[s0..s1) = dLoss/dseq_logp and dtok = dLoss/dtok_logp for them
 * (zero or NaN: no gradient); then the backward accumulates into the model's
 * gradients. seq_logp/tok_logp (may be NULL) receive the estimates. */
typedef void (*dllm_backward_fn)(void *model, const float *dlogits);
typedef int (*dllm_lik_grad_fn)(void *ctx, int s0, int s1, const double *seq_logp,
                                const double *tok_logp, double *dseq, double *dtok,
                                dllm_err *err);
int dllm_lik_plan_backward(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_backward_fn bwd,
                           void *model, int max_canvas, dllm_lik_grad_fn grad, void *grad_ctx,
                           double *seq_logp, double *tok_logp, dllm_err *err);
/* The same with the loss gradient built where the logits are (a model training on a
 * device; temperature 1, else an input error): fwd is a keeping forward that returns the
 * rows' log-probs of their targets (dllm_logp_fn's signature; fp32), bwd the backward of
 * dLoss/dlogp per row (n_rows floats, the last fwd's rows). Each row's gradient is the
 * host path's g in float; the log-probs are the model's fp32 ones instead of the double
 * log-softmax of fp32 logits (they agree to fp32 rounding). */
typedef void (*dllm_backward_logp_fn)(void *model, const float *g);
int dllm_lik_plan_backward_logp(const dllm_lik_plan *p, dllm_logp_fn fwd,
                                dllm_backward_logp_fn bwd, void *model, int max_canvas,
                                dllm_lik_grad_fn grad, void *grad_ctx, double *seq_logp,
                                double *tok_logp, dllm_err *err);

#endif
