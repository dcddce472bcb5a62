/* grpo.h: GRPO advantages and the clipped-surrogate loss with its exact
 * gradient (docs/METHOD.md §4). Pure math on arrays, all in double; the model code
 * back-propagates the gradients returned here.
 *
 * Advantages, per group of G rewards:
 *   std:  A_j = (r_j - mean) / (std + eps_adv), std the unbiased sample standard
 *         deviation (divisor G - 1, as torch.std and TRL's GRPOTrainer), eps_adv 1e-6;
 *   none: A_j = r_j - mean (d1).
 * A group whose rewards are all equal (or G = 1) has zero variance: its
 * advantages are exactly 0 (not r - mean, which rounding can make ~1e-17), and
 * it is counted (frac_zero_var_groups = count / groups).
 *
 * Loss, per batch of N completions, c_i the correction coefficient (stop-gradient):
 *   sequence ratio: r_i = exp((l_theta_i - l_old_i) / L_i),
 *                   S_i = min(r_i A_i, clip(r_i, 1-eps, 1+eps) A_i);
 *   token ratio:    r_it = exp(logp_theta_it - logp_old_it), S_it likewise, per
 *                   scored token (logp NaN = not scored; theta and old must agree).
 *   loss = -agg(c S) + beta agg(KL),  KL_it = exp(ref - theta) - (ref - theta) - 1
 *   (k3 on the scored tokens of logp_theta, not multiplied by c).
 *   agg seq_mean:   (1/N) sum_i (mean over the tokens of sequence i); a sequence
 *                   with c_i = 0 or with no scored token counts in N with value 0;
 *   agg token_mean: (sum over all tokens) / (number of tokens).
 *   The tokens of the surrogate are the scored tokens (token ratio) or, for the
 *   sequence ratio, L_i identical copies of c_i S_i (so seq_mean gives
 *   mean_i c_i S_i and token_mean sum_i L_i c_i S_i / sum_i L_i). The tokens of
 *   the KL are the scored tokens of logp_theta.
 *   With coef_tok (token ratio only) token t of sequence i uses c_it instead of c_i.
 *   A term whose coefficient is 0 or whose advantage is 0 is exactly 0 with
 *   gradient 0, whatever the other factors are (a sample zeroed by the correction,
 *   or with no signal, cannot poison the batch: no inf * 0 = NaN). A term whose
 *   value c S or gradient is not finite otherwise (an infinite coefficient, or a
 *   ratio of +inf on a negative advantage, where the clip does not bound S) is
 *   dropped: value and gradient 0, counted in n_nonfinite. So the loss is finite
 *   whenever the KL is; the caller logs n_nonfinite (frac_nonfinite).
 * Gradients (assigned, not accumulated):
 *   grad_l[i]      = dloss/dl_theta_i (sequence ratio): -w_i c_i A_i r_i / L_i, or 0
 *                    where the clip is active;
 *   grad_logp[i,t] = dloss/dlogp_theta_it: token ratio -w_it c_it A_i r_it (0 where
 *                    clipped), plus beta w'_it (1 - exp(ref - theta)) for the KL;
 *                    with the sequence ratio it holds the KL part only; 0 at unscored
 *                    tokens. (w, w' the aggregation weights above.)
 *   The clip is active ("clipped") when r > 1+eps and A > 0, or r < 1-eps and A < 0:
 *   there min() picks the constant clipped branch, so the gradient is 0.
 * clip_frac = clipped ratio terms / ratio terms (sequences, or scored tokens).
 *
 * Data parallelism: the aggregation is over the GLOBAL batch. Each rank calls
 * grpo_local_denoms(), the caller all-reduces the two numbers with SUM and passes
 * them as in.denoms; each rank's loss is then its share of the global loss (the
 * global loss is the SUM over ranks, and so are the gradients: all-reduce the
 * parameter gradients with SUM, not the mean). denoms = NULL uses the local batch. */
#ifndef DLLM_GRPO_H
#define DLLM_GRPO_H

#include "kernels/base.h"

#include <stdint.h>
#include "src/config/cfg_names.h"

typedef enum { GRPO_ADV_STD, GRPO_ADV_NONE } grpo_adv_scale;
typedef enum { GRPO_RATIO_SEQUENCE, GRPO_RATIO_TOKEN } grpo_ratio;
typedef enum { GRPO_AGG_SEQ_MEAN, GRPO_AGG_TOKEN_MEAN } grpo_agg;

/* The YAML names (the config parser reads them through these tables). */
extern const cfg_names grpo_adv_scale_names, grpo_ratio_names, grpo_agg_names;
const char *grpo_adv_scale_name(grpo_adv_scale s);
const char *grpo_ratio_name(grpo_ratio r);
const char *grpo_agg_name(grpo_agg a);
/* Parse the YAML names; errors name the key (grpo.advantage_scale, grpo.ratio,
 * grpo.loss_agg) and list the choices. */
int grpo_parse_adv_scale(const char *s, grpo_adv_scale *out, dllm_err *err);
int grpo_parse_ratio(const char *s, grpo_ratio *out, dllm_err *err);
int grpo_parse_agg(const char *s, grpo_agg *out, dllm_err *err);

/* rewards, adv: (n_groups, G), group-major. eps_adv: 1e-6 in docs/METHOD.md.
 * *n_zero_var (may be NULL): groups with zero reward variance.
 * Non-finite rewards are bad input (the message names group and member). */
int grpo_advantages(const double *rewards, int n_groups, int G, grpo_adv_scale scale,
                    double eps_adv, double *adv, int *n_zero_var, dllm_err *err);

typedef struct {
    grpo_ratio ratio;      /* grpo.ratio */
    grpo_agg agg;          /* grpo.loss_agg */
    double clip_eps;       /* grpo.clip_eps, >= 0 */
    double beta;           /* grpo.beta, >= 0 */
} grpo_loss_cfg;

/* Denominators of the aggregation: surrogate (seq_mean: sequences; token_mean:
 * sum of L_i for the sequence ratio, scored tokens for the token ratio) and KL
 * (seq_mean: sequences; token_mean: scored tokens). */
typedef struct { double surr, kl; } grpo_denoms;

typedef struct {
    int N;                    /* completions */
    int T;                    /* row stride of the per-token arrays */
    const double *adv;        /* (N) advantages A_i */
    const double *coef;       /* (N) correction coefficients c_i */
    const double *coef_tok;   /* (N, T) per-token coefficients or NULL (token ratio only) */
    const int *len;           /* (N) completion lengths L_i (sequence ratio) */
    const double *l_theta;    /* (N) sequence estimate at the current parameters (sequence ratio) */
    const double *l_old;      /* (N) the same at the parameters that made the batch */
    const double *logp_theta; /* (N, T) per-token log-probs, NaN = not scored (token ratio, KL) */
    const double *logp_old;   /* (N, T) (token ratio) */
    const double *logp_ref;   /* (N, T) reference policy (KL); NULL: no KL (needs beta = 0) */
    const grpo_denoms *denoms;/* global denominators, or NULL for the local batch */
} grpo_loss_in;

typedef struct {
    double loss;           /* -surrogate + beta kl */
    double surrogate;      /* agg(c S) */
    double policy_kl;      /* agg(KL); NaN when logp_ref is NULL */
    double clip_frac;      /* clipped ratio terms / ratio terms */
    double ratio_mean;     /* mean of the ratio terms */
    long n_ratio_terms;    /* sequences, or scored tokens */
    long n_kl_tokens;      /* scored tokens of logp_theta used by the KL */
    long n_nonfinite;      /* surrogate terms dropped as not finite */
} grpo_loss_out;

/* This rank's denominators (to be all-reduced with SUM). */
void grpo_local_denoms(const grpo_loss_cfg *cfg, const grpo_loss_in *in, grpo_denoms *d);

/* grad_l (N) and grad_logp (N, T) may be NULL when not wanted. */
int grpo_loss(const grpo_loss_cfg *cfg, const grpo_loss_in *in, grpo_loss_out *out,
              double *grad_l, double *grad_logp, dllm_err *err);

/* grpo.random_drop: completion i (global index seq0 + i) leaves the gradient with
 * probability p: coef[i] = 0, and its row of coef_tok (N, T; may be NULL). Each draw is
 * the first uniform of the stream (seed, DLLM_RNG_DROP, step, seq0 + i), so it depends
 * neither on the ranks nor on the rest of the batch. A zero coefficient is what mis
 * gives the completions it rejects (the term and its gradient exactly 0, the completion
 * still counted by the aggregation), so the same share dropped at random asks whether
 * a correction acts only by the completions it removes. p = 0 changes nothing.
 * Returns the number dropped. */
long grpo_random_drop(double p, uint64_t seed, int64_t step, uint64_t seq0, double *coef,
                      double *coef_tok, int N, int T);

#endif
