/* rl_step.c: one RL step and the evaluation protocol. See rl.h. */
#include "src/rl/rl.h"

#include "dllm/transformer.h"
#include "kernels/ops.h"
#include "src/comm/comm.h"
#include "src/comm/comm_device.h"
#include "src/data/prompt.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

void rl_batch_free(rl_batch *b)
{
    free(b->prompt_index);
    free(b->prompts);
    free(b->prompt_mask);
    free(b->prompt_len);
    dllm_rollout_free(&b->ro);
    free(b->gen);
    free(b->L);
    free(b->L32);
    free(b->reward);
    free(b->correct);
    free(b->adv);
    free(b->l_mu);
    free(b->l_mu_exact);
    free(b->l_pi);
    free(b->log_w);
    free(b->log_w_se);
    free(b->coef);
    free(b->coef_tok);
    free(b->tok_mu);
    free(b->tok_pi);
    free(b->d);
    free(b->l_old);
    free(b->tok_old);
    free(b->tok_ref);
    free(b->mismatch);
    free(b->informative);
    free(b->tok_ent);
    free(b->pass_at_k);
    memset(b, 0, sizeof *b);
}

char *rl_completion_text(rl_run *run, const int32_t *gen, int L, dllm_err *err)
{
    char *text = NULL;
    return completion_decode(run->tok, gen, L, run->mc->eos_token_id, &text, NULL, err) ? NULL : text;
}

/* Left-pads prompts of several items into (rows, P) with a key mask; each
 * prompt repeated `rep` times (the group). */
/* At level token the loss weighs each token by its own coefficient; the logged
 * per-completion coef is then their mean over the completion's scored tokens (NaN
 * when none is scored), so the column is always defined. */
static void token_coef_means(double *coef, const double *coef_tok, const double *d,
                             const int *len, int N, int T)
{
    for (int i = 0; i < N; i++) {
        double s = 0;
        int n = 0;
        for (int t = 0; t < len[i] && t < T; t++)
            if (isfinite(d[(size_t)i * T + t])) {
                s += coef_tok[(size_t)i * T + t];
                n++;
            }
        coef[i] = n ? s / n : NAN;
    }
}

int rl_pad_prompts(const rl_prompt *const *ps, int n, int rep, int eos, int32_t **out,
                   uint8_t **mask, int32_t **lens)
{
    int P = 0;
    for (int i = 0; i < n; i++)
        P = ps[i]->n > P ? ps[i]->n : P;
    int32_t *x = dllm_malloc(sizeof *x * (size_t)n * rep * P);
    uint8_t *m = dllm_malloc((size_t)n * rep * P);
    int32_t *l = dllm_malloc(sizeof *l * (size_t)n * rep);
    for (int i = 0; i < n; i++)
        for (int g = 0; g < rep; g++) {
            size_t row = (size_t)i * rep + g;
            int pad = P - ps[i]->n;
            for (int t = 0; t < P; t++) {
                x[row * P + t] = t < pad ? eos : ps[i]->ids[t - pad];
                m[row * P + t] = t >= pad;
            }
            l[row] = ps[i]->n;
        }
    *out = x;
    *mask = m;
    *lens = l;
    return P;
}

/* ---- the loss gradient, chunk by chunk (see dllm_lik_plan_backward) ---------- */

typedef struct {
    rl_run *run;
    rl_batch *b;
    grpo_denoms global;  /* the global batch's aggregation denominators */
    double loss, kl, clip, ratio_terms;
    double nonfinite;    /* loss terms dropped as non-finite (grpo.h) */
} loss_ctx;

static int loss_grad(void *vctx, int s0, int s1, const double *seq_logp, const double *tok_logp,
                     double *dseq, double *dtok, dllm_err *err)
{
    loss_ctx *c = vctx;
    rl_batch *b = c->b;
    const int G = b->Gen;
    grpo_loss_in in = {
        .N = s1 - s0, .T = G, .adv = b->adv + s0, .coef = b->coef + s0,
        .coef_tok = b->coef_tok ? b->coef_tok + (size_t)s0 * G : NULL, .len = b->L + s0,
        .l_theta = seq_logp + s0, .l_old = b->l_old + s0,
        .logp_theta = tok_logp + (size_t)s0 * G, .logp_old = b->tok_old + (size_t)s0 * G,
        .logp_ref = b->tok_ref ? b->tok_ref + (size_t)s0 * G : NULL};
    const grpo_loss_cfg *lc = &c->run->cfg.grpo.loss;
    grpo_loss_out out;
    if (grpo_loss(lc, &in, &out, dseq + s0, dtok + (size_t)s0 * G, err))
        return err->code;
    /* the chunk's loss is normalised by its own denominator: rescale to the
     * global batch's. (Passing the global denominators to grpo_loss would round
     * differently; this keeps the numerics of the loss bit for bit.) */
    grpo_denoms chunk;
    grpo_local_denoms(lc, &in, &chunk);
    double scale = chunk.surr / c->global.surr;
    for (int i = s0; i < s1; i++) {
        dseq[i] *= scale;
        for (int t = 0; t < G; t++)
            dtok[(size_t)i * G + t] *= scale;
    }
    c->loss += out.loss * scale;
    if (isfinite(out.policy_kl))
        c->kl += out.policy_kl * scale;
    c->clip += out.clip_frac * (double)out.n_ratio_terms;
    c->ratio_terms += (double)out.n_ratio_terms;
    c->nonfinite += (double)out.n_nonfinite;
    return 0;
}

static double lr_at(const rl_run *run, long opt_step)
{
    return dllm_cfg_lr(&run->cfg, opt_step, (long)run->cfg.grpo.steps * run->cfg.grpo.inner_steps);
}

/* The cached or parallel sampler's own log-likelihood of each completion (trajectory
 * estimator): its recorded probabilities of the committed tokens, at temperature 1 in
 * the context it committed them, over the tokens the estimator scores (the first L). */
static void sampler_l_mu(rl_batch *b, int N, int Gen)
{
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int t = 0; t < b->L[i]; t++) {
            size_t k = (size_t)i * Gen + t;
            b->tok_mu[k] = log((double)b->ro.commit_prob[k]);
            s += b->tok_mu[k];
        }
        b->l_mu[i] = s;
    }
}

/* The split of the log-weight (docs/METHOD.md §5) over the global batch: out[0], out[1]
 * the ESS / N of w_prec = exp(l_pi - l_mu_exact) and w_cache = exp(l_mu_exact - l_mu)
 * (raw weights, every completion), out[2], out[3] the mean over completions of the mean
 * |d| over scored tokens of each part (tokens whose d is finite). */
static void split_diag(const rl_batch *b, const double *tok_mu_exact, int N, int Gen,
                       double out[4])
{
    double mx[2] = {-INFINITY, -INFINITY};
    for (int i = 0; i < N; i++) {
        double lw[2] = {b->l_pi[i] - b->l_mu_exact[i], b->l_mu_exact[i] - b->l_mu[i]};
        for (int j = 0; j < 2; j++)
            if (isfinite(lw[j]) && lw[j] > mx[j])
                mx[j] = lw[j];
    }
    comm_max_d(mx, 2);
    /* sum w, sum w^2 of each part (shifted by its max), then |d| sums and the count */
    double s[7] = {0};
    for (int i = 0; i < N; i++) {
        double lw[2] = {b->l_pi[i] - b->l_mu_exact[i], b->l_mu_exact[i] - b->l_mu[i]};
        for (int j = 0; j < 2; j++)
            if (isfinite(lw[j]) && isfinite(mx[j])) {
                double w = exp(lw[j] - mx[j]);
                s[2 * j] += w;
                s[2 * j + 1] += w * w;
            }
        double a[2] = {0, 0};
        int n = 0;
        for (int t = 0; t < Gen; t++) {
            size_t k = (size_t)i * Gen + t;
            double dp = b->tok_pi[k] - tok_mu_exact[k], dc = tok_mu_exact[k] - b->tok_mu[k];
            if (t >= b->L[i] || !isfinite(b->d[k]) || !isfinite(dp) || !isfinite(dc))
                continue;
            a[0] += fabs(dp);
            a[1] += fabs(dc);
            n++;
        }
        if (n > 0) {
            s[4] += a[0] / n;
            s[5] += a[1] / n;
            s[6] += 1;
        }
    }
    comm_sum_d(s, 7);
    double Ng = (double)N;
    comm_sum_d(&Ng, 1);
    for (int j = 0; j < 2; j++)
        out[j] = s[2 * j + 1] > 0 ? s[2 * j] * s[2 * j] / s[2 * j + 1] / Ng : NAN;
    out[2] = s[6] > 0 ? s[4] / s[6] : NAN;
    out[3] = s[6] > 0 ? s[5] / s[6] : NAN;
}

/* Scores the batch under plan p: seq (N) and tok (N, Gen) estimates, and each
 * canvas's Monte Carlo sample (n_canvas) for standard errors; any may be NULL.
 * prec: the trainer (TRAIN_NOGRAD) or the rollout copy (ROLLOUT). params: a
 * trainable vector put in place for the call (the reference policy, or the
 * parameters that made the batch), NULL for the current one. */
static int score_ent(rl_run *run, const dllm_lik_plan *p, dllm_prec prec, const float *params,
                     double *seq, double *tok, double *sample, double *tok_ent, dllm_err *err);
static int score(rl_run *run, const dllm_lik_plan *p, dllm_prec prec, const float *params,
                 double *seq, double *tok, double *sample, dllm_err *err)
{
    return score_ent(run, p, prec, params, seq, tok, sample, NULL, err);
}

/* score, and tok_ent (N, Gen; may be NULL): the entropy at each scored token */
static int score_ent(rl_run *run, const dllm_lik_plan *p, dllm_prec prec, const float *params,
                     double *seq, double *tok, double *sample, double *tok_ent, dllm_err *err)
{
    /* scored under other weights: swapped in where the trainable vector lives (a device's
     * copy, or the host's), and back after */
    dllm_optim o = dllm_policy_optim(run->pol);
    size_t n = run->n_param;
    float *save = NULL;
    if (params) {
        save = dllm_malloc(sizeof *save * n);
        dllm_optim_state_read(o, DLLM_STATE_PARAMS, 0, n, save);
        dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, params);
        dllm_policy_trainer_changed(run->pol);
    }
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(run->pol, prec, &ctx);
    dllm_logp_fn lfn = dllm_policy_logp(run->pol, prec, &ctx); /* on a device: fused head */
    int rc = tok_ent ? dllm_lik_plan_eval_entropy(p, fn, lfn, ctx, run->max_canvas, seq, tok,
                                                  NULL, sample, tok_ent, err)
                     : dllm_lik_plan_eval_logp(p, fn, lfn, ctx, run->max_canvas, seq, tok, NULL,
                                               sample, err);
    if (params) {
        dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, save);
        free(save);
        dllm_policy_trainer_changed(run->pol);
    }
    return rc;
}

/* An update that would make the weights non-finite (a NaN or infinite loss or
 * gradient norm), or that made them so (theta: the host's trainable vector after
 * AdamW, n entries; NULL: not checked), stops the run: a checkpoint is only ever
 * written of weights that passed. */
static int check_update(int64_t step, double loss, double grad_norm, const float *theta,
                        size_t n, dllm_err *err)
{
    if (!isfinite(loss) || !isfinite(grad_norm))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "step %lld: the %s is not finite (loss %g, gradient norm %g): the run "
                            "diverged; the weights were not updated (lower optim.lr, or set "
                            "optim.grad_clip)",
                            (long long)step, isfinite(loss) ? "gradient norm" : "loss", loss,
                            grad_norm);
    for (size_t k = 0; theta && k < n; k++)
        if (!isfinite(theta[k]))
            return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                "step %lld: the update made a weight non-finite (%g at element %zu "
                                "of the trainable vector): the run diverged (lower optim.lr)",
                                (long long)step, (double)theta[k], k);
    return 0;
}

/* The loss gradient of the batch under plan into the model's gradients (zeroed by the
 * caller). */
static int loss_backward(rl_run *run, const dllm_lik_plan *plan, loss_ctx *lc, dllm_err *err)
{
    void *ctx;
    /* training on a device: the dlogits are built there from its logits (at the
     * plan's temperature 1; another temperature takes the host path) */
    dllm_logp_fn lfn = dllm_policy_train_logp(run->pol, &ctx);
    dllm_logits_fn fn = dllm_policy_logits(run->pol, DLLM_PREC_TRAIN, &ctx);
    if (lfn && plan->temperature == 1.0)
        return dllm_lik_plan_backward_logp(plan, lfn, dllm_policy_backward_logp, ctx,
                                           run->max_canvas, loss_grad, lc, NULL, NULL, err);
    return dllm_lik_plan_backward(plan, fn, dllm_policy_backward, ctx, run->max_canvas,
                                  loss_grad, lc, NULL, NULL, err);
}

/* log.grad_cosine: the gradient of the same loss with every coefficient 1 (no
 * correction), summed over ranks, into *ref (malloc'd, np floats, host memory) from grads
 * (np floats in gbe's memory: the host's, or a device's where the model trains there).
 * One extra backward; the model's gradients are left zeroed for the real update. */
static int uncorrected_grad(rl_run *run, const dllm_lik_plan *plan, const loss_ctx *lc,
                            float *grads, dllm_backend *gbe, size_t np, float **ref,
                            dllm_err *err)
{
    rl_batch *b = lc->b;
    const size_t N = (size_t)b->N, NG = N * (size_t)b->Gen;
    double *coef = b->coef, *coef_tok = b->coef_tok;
    double *ones = dllm_malloc(sizeof(double) * (N ? N : 1));
    double *ones_tok = coef_tok ? dllm_malloc(sizeof(double) * NG) : NULL;
    for (size_t i = 0; i < N; i++)
        ones[i] = 1.0;
    for (size_t k = 0; ones_tok && k < NG; k++)
        ones_tok[k] = isnan(b->d[k]) ? 0.0 : 1.0; /* unscored tokens carry none */
    b->coef = ones;
    b->coef_tok = ones_tok;
    loss_ctx c = {.run = run, .b = b, .global = lc->global};
    dllm_optim_zero_grad(dllm_policy_optim(run->pol));
    int rc = loss_backward(run, plan, &c, err);
    b->coef = coef;
    b->coef_tok = coef_tok;
    free(ones);
    free(ones_tok);
    if (rc || (rc = comm_sum_backend_f(gbe, grads, np, err)))
        return rc;
    *ref = dllm_malloc(sizeof(float) * (np ? np : 1));
    gbe->ops->download(gbe, *ref, grads, sizeof(float) * np);
    return 0;
}

/* The diagnostics of §5 over the global batch: extrema (MAX), moments and sums (SUM)
 * all-reduced, then finalised identically on every rank. */
static int diagnose(const corr_cfg *cc, const corr_batch *cb, double alpha_prev, corr_diag *out,
                    dllm_err *err)
{
    corr_extrema ext;
    corr_moments mom;
    corr_stats st;
    int rc = corr_local_extrema(cc, cb, &ext, err);
    if (rc)
        return rc;
    comm_max_d(ext.v, CORR_EXT_N); /* max over ranks of each extremum (stored as maxima) */
    if ((rc = corr_local_moments(cc, cb, &ext, &mom, err)))
        return rc;
    comm_sum_d(mom.v, CORR_MOM_N);
    if ((rc = corr_local_sums(cc, cb, &ext, &mom, &st, err)))
        return rc;
    comm_sum_d(st.v, CORR_STATS_N);
    corr_finalize(&st, &ext, &mom, cc, alpha_prev, out);
    return 0;
}

/* pass@k for k = 1..G summed over this rank's groups (the caller divides by the global
 * group count): 1 - C(G - c, k) / C(G, k), c the group's correct completions, the
 * unbiased estimator from G samples; the ratio as a product, so no binomial overflows */
static void pass_at_k_sums(const double *correct, int n_groups, int G, double *sum)
{
    for (int g = 0; g < n_groups; g++) {
        int c = 0;
        for (int j = 0; j < G; j++)
            c += correct[(size_t)g * G + j] > 0.5;
        for (int k = 1; k <= G; k++) {
            double miss = 1.0; /* C(G - c, k) / C(G, k) */
            for (int i = 0; i < k; i++)
                miss *= G - c - i > 0 ? (double)(G - c - i) / (double)(G - i) : 0.0;
            sum[k - 1] += 1.0 - miss;
        }
    }
}

/* q-quantile of the sorted x (n >= 1), linear interpolation between order statistics
 * (numpy's default) */
static double quantile_sorted(const double *x, size_t n, double q)
{
    const double h = q * (double)(n - 1);
    const size_t lo = (size_t)floor(h), hi = lo + 1 < n ? lo + 1 : lo;
    return x[lo] + (h - (double)lo) * (x[hi] - x[lo]);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 5/50/95 % quantiles of the finite log w of the global batch, on rank 0 (NaN elsewhere
 * and when none is finite) */
static void log_w_quantiles(const double *log_w, int N, double q[3])
{
    q[0] = q[1] = q[2] = NAN;
    void *all = NULL;
    size_t bytes = comm_gather_bytes(log_w, sizeof(double) * (size_t)N, &all);
    if (!all)
        return;
    double *x = all;
    size_t n = 0;
    for (size_t i = 0; i < bytes / sizeof(double); i++)
        if (isfinite(x[i]))
            x[n++] = x[i];
    if (n > 0) {
        qsort(x, n, sizeof *x, cmp_double);
        q[0] = quantile_sorted(x, n, 0.05);
        q[1] = quantile_sorted(x, n, 0.50);
        q[2] = quantile_sorted(x, n, 0.95);
    }
    free(all);
}

/* The step's rollouts at the rollout precision: rollout.batch sequences at a time (0: all
 * N at once), each keyed by its global index (seq_offset), so every sequence draws the
 * same random stream however the batch is split. */
static int rollouts(rl_run *run, const int32_t *prompts, const uint8_t *prompt_mask, int N, int P,
                    uint64_t seq0, uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    const dllm_cfg *cfg = &run->cfg;
    dllm_sampler_cfg sc = run->sampler;
    const int rb = cfg->rollout.batch > 0 && cfg->rollout.batch < N ? cfg->rollout.batch : N;
    sc.seq_offset = seq0;
    if (rb == N)
        return rl_generate(run->pol, DLLM_PREC_ROLLOUT, prompts, prompt_mask, N, P, &sc,
                           cfg->rollout.top_p, seed, out, err);
    const int G = sc.gen_length, T = P + G;
    memset(out, 0, sizeof *out);
    out->B = N, out->P = P, out->G = G;
    out->tokens = dllm_malloc(sizeof *out->tokens * (size_t)N * T);
    out->commit_step = dllm_malloc(sizeof *out->commit_step * (size_t)N * G);
    out->commit_prob = dllm_malloc(sizeof *out->commit_prob * (size_t)N * G);
    int rc = 0;
    for (int c0 = 0; c0 < N && !rc; c0 += rb) {
        const int n = N - c0 < rb ? N - c0 : rb;
        sc.seq_offset = seq0 + (uint64_t)c0;
        dllm_rollout ro;
        rc = rl_generate(run->pol, DLLM_PREC_ROLLOUT, prompts + (size_t)c0 * P,
                         prompt_mask ? prompt_mask + (size_t)c0 * P : NULL, n, P, &sc,
                         cfg->rollout.top_p, seed, &ro, err);
        if (rc)
            break;
        memcpy(out->tokens + (size_t)c0 * T, ro.tokens, sizeof *ro.tokens * (size_t)n * T);
        memcpy(out->commit_step + (size_t)c0 * G, ro.commit_step,
               sizeof *ro.commit_step * (size_t)n * G);
        memcpy(out->commit_prob + (size_t)c0 * G, ro.commit_prob,
               sizeof *ro.commit_prob * (size_t)n * G);
        if (ro.n_masked_left) {
            if (!out->n_masked_left)
                out->n_masked_left = dllm_calloc((size_t)N, sizeof *out->n_masked_left);
            memcpy(out->n_masked_left + c0, ro.n_masked_left, sizeof *ro.n_masked_left * (size_t)n);
        }
        out->nfe += ro.nfe; /* forward passes run, summed over the chunks */
        dllm_rollout_free(&ro);
    }
    if (rc)
        dllm_rollout_free(out);
    return rc;
}

int rl_step(rl_run *run, int64_t step, rl_batch *b, double *metrics, dllm_err *err)
{
    const dllm_cfg *cfg = &run->cfg;
    const int G = cfg->rollout.group_size, Gen = cfg->rollout.gen_length;
    const int ppr = cfg->grpo.prompts_per_step / run->size; /* prompts per rank */
    const uint64_t seed = (uint64_t)cfg->seed;
    int rc = 0;
    memset(b, 0, sizeof *b);
    h5log_values_nan(metrics);
    b->n_prompts = ppr;
    b->G = G;
    b->N = ppr * G;
    b->Gen = Gen;
    const int N = b->N;
    const uint64_t seq0 = (uint64_t)run->rank * (uint64_t)N; /* global index of row 0 */

    /* 1. prompts: a seeded sample of the training items, this rank's slice */
    double t0 = dllm_now();
    size_t *idx = dllm_malloc(sizeof *idx * (size_t)cfg->grpo.prompts_per_step);
    dllm_task_sample_indices(run->train.n, (size_t)cfg->grpo.prompts_per_step, seed, (uint64_t)step,
                             idx);
    b->prompt_index = dllm_malloc(sizeof *b->prompt_index * (size_t)ppr);
    const rl_prompt **ps = dllm_malloc(sizeof *ps * (size_t)ppr);
    for (int i = 0; i < ppr; i++) {
        b->prompt_index[i] = (int64_t)idx[run->rank * ppr + i];
        ps[i] = &run->train_prompts[b->prompt_index[i]];
    }
    free(idx);
    b->P = rl_pad_prompts(ps, ppr, G, run->mc->eos_token_id, &b->prompts, &b->prompt_mask,
                       &b->prompt_len);
    free(ps);
    const int P = b->P;

    /* 2. rollouts at the rollout precision, G per prompt */
    rc = rollouts(run, b->prompts, b->prompt_mask, N, P, seq0,
                  seed ^ ((uint64_t)step * 0x9e3779b97f4a7c15ULL), &b->ro, err);
    if (rc)
        return rc;
    b->gen = dllm_malloc(sizeof *b->gen * (size_t)N * Gen);
    b->L = dllm_malloc(sizeof *b->L * (size_t)N);
    b->L32 = dllm_malloc(sizeof *b->L32 * (size_t)N);
    long gen_tokens = 0, masked_left = 0;
    for (int i = 0; i < N; i++) {
        memcpy(b->gen + (size_t)i * Gen, b->ro.tokens + (size_t)i * (P + Gen) + P,
               sizeof *b->gen * (size_t)Gen);
        b->L[i] = dllm_completion_length(b->gen + (size_t)i * Gen, Gen, run->mc->eos_token_id);
        b->L32[i] = b->L[i];
        gen_tokens += Gen;
        /* rollout.mask_token allow: the sampler may leave the mask token in place */
        for (int t = 0; t < Gen; t++)
            masked_left += b->gen[(size_t)i * Gen + t] == run->mc->mask_token_id;
    }
    double t_rollout = dllm_now() - t0;

    /* 3. rewards */
    b->reward = dllm_malloc(sizeof *b->reward * (size_t)N);
    b->correct = dllm_malloc(sizeof *b->correct * (size_t)N);
    for (int i = 0; i < N && !rc; i++) {
        char *text = rl_completion_text(run, b->gen + (size_t)i * Gen, b->L[i], err);
        if (!text)
            return err->code;
        const dllm_task_item *it = &run->train.items[b->prompt_index[i / G]];
        double r;
        int ok;
        rc = rl_task_score(run, it, text, strlen(text), &r, &ok, err);
        free(text);
        if (rc)
            break;
        b->correct[i] = ok;
        b->reward[i] = cfg->task.reward.kind == CFG_REWARD_CORRECT ? b->correct[i] : r;
    }
    if (rc)
        return rc;

    /* 4. advantages, per group (groups never span ranks) */
    b->adv = dllm_malloc(sizeof *b->adv * (size_t)N);
    int zero_var = 0;
    if ((rc = grpo_advantages(b->reward, ppr, G, cfg->grpo.advantage_scale, 1e-6, b->adv, &zero_var, err)))
        return rc;

    /* 5. l_mu and l_pi on shared masks (and l_old for the policy ratio) */
    t0 = dllm_now();
    size_t NG = (size_t)N * Gen;
    b->l_mu = dllm_malloc(sizeof(double) * N);
    b->l_pi = dllm_malloc(sizeof(double) * N);
    b->log_w = dllm_malloc(sizeof(double) * N);
    b->log_w_se = dllm_malloc(sizeof(double) * N);
    b->tok_mu = dllm_malloc(sizeof(double) * NG);
    b->tok_pi = dllm_malloc(sizeof(double) * NG);
    b->d = dllm_malloc(sizeof(double) * NG);
    b->l_old = dllm_malloc(sizeof(double) * N);
    b->tok_old = dllm_malloc(sizeof(double) * NG);
    dllm_lik_plan pw = {0}, pp = {0};
    const uint64_t key_w = ((uint64_t)step << 16) | RL_KEY_WEIGHT;
    rc = dllm_lik_plan_build(&pw, &run->lik_w, b->prompts, b->prompt_mask, b->gen, b->L,
                             b->ro.commit_step, N, P, Gen, seed, key_w, seq0, err);
    double *smp_pi = NULL, *smp_mu = NULL;
    if (!rc) {
        smp_pi = dllm_malloc(sizeof(double) * (size_t)(pw.n_canvas ? pw.n_canvas : 1));
        smp_mu = dllm_malloc(sizeof(double) * (size_t)(pw.n_canvas ? pw.n_canvas : 1));
        b->tok_ent = dllm_malloc(sizeof(double) * NG);
        rc = score_ent(run, &pw, DLLM_PREC_TRAIN_NOGRAD, NULL, b->l_pi, b->tok_pi, smp_pi,
                       b->tok_ent, err);
    }
    if (!rc && dllm_policy_rollout_is_trainer(run->pol)) {
        /* the reference arm: mu is pi, bit for bit, so w = 1 exactly */
        memcpy(b->l_mu, b->l_pi, sizeof(double) * N);
        memcpy(b->tok_mu, b->tok_pi, sizeof(double) * NG);
        memcpy(smp_mu, smp_pi, sizeof(double) * (size_t)pw.n_canvas);
    } else if (!rc) {
        rc = score(run, &pw, DLLM_PREC_ROLLOUT, NULL, b->l_mu, b->tok_mu, smp_mu, err);
    }
    /* l_mu so far is the rollout precision scored exactly; a cached or parallel sampler's
     * own probabilities replace it where the estimator models the sampler (rl_run.h) */
    double *tok_mu_exact = NULL;
    b->l_mu_exact = dllm_malloc(sizeof(double) * N);
    if (!rc) {
        memcpy(b->l_mu_exact, b->l_mu, sizeof(double) * N);
        if (run->sampler_probs) {
            tok_mu_exact = dllm_malloc(sizeof(double) * NG);
            memcpy(tok_mu_exact, b->tok_mu, sizeof(double) * NG);
            sampler_l_mu(b, N, Gen);
        }
    }
    if (!rc) {
        dllm_lik_plan_diff_se(&pw, smp_pi, smp_mu, b->log_w_se);
        for (int i = 0; i < N; i++)
            b->log_w[i] = b->l_pi[i] - b->l_mu[i];
        for (size_t k = 0; k < NG; k++)
            b->d[k] = b->tok_pi[k] - b->tok_mu[k];
        split_diag(b, tok_mu_exact ? tok_mu_exact : b->tok_mu, N, Gen, b->split);
    }
    free(tok_mu_exact);
    free(smp_pi);
    free(smp_mu);
    if (!rc && run->shared_plan) {
        memcpy(b->l_old, b->l_pi, sizeof(double) * N);
        memcpy(b->tok_old, b->tok_pi, sizeof(double) * NG);
    } else if (!rc) {
        rc = dllm_lik_plan_build(&pp, &run->lik_pol, b->prompts, b->prompt_mask, b->gen, b->L,
                                 b->ro.commit_step, N, P, Gen, seed,
                                 ((uint64_t)step << 16) | RL_KEY_POLICY, seq0, err);
        if (!rc)
            rc = score(run, &pp, DLLM_PREC_TRAIN_NOGRAD, NULL, b->l_old, b->tok_old, NULL, err);
    }
    const dllm_lik_plan *policy_plan = run->shared_plan ? &pw : &pp;
    if (!rc && run->ref_params) {
        b->tok_ref = dllm_malloc(sizeof(double) * NG);
        rc = score(run, policy_plan, DLLM_PREC_TRAIN_NOGRAD, run->ref_params, NULL, b->tok_ref, NULL,
                   err);
    }
    double t_lik = dllm_now() - t0;

    /* 6. correction coefficients and diagnostics, over the global batch */
    t0 = dllm_now();
    b->coef = dllm_malloc(sizeof(double) * N);
    if (cfg->correction.c.level == CORR_LEVEL_TOKEN)
        b->coef_tok = dllm_malloc(sizeof(double) * NG);
    b->informative = dllm_malloc((size_t)(N ? N : 1));
    corr_informative(b->reward, ppr, G, b->informative);
    corr_batch cb = {.N = N, .T = Gen, .log_w = b->log_w, .len = b->L, .d = b->d, .adv = b->adv,
                     .log_w_se = b->log_w_se};
    corr_batch cb_inf = cb;
    cb_inf.member = b->informative;
    corr_counts cnt;
    /* the configured population drives alpha; both populations are logged */
    const bool inf = cfg->correction.c.ais.population == AIS_POP_INFORMATIVE;
    if (!rc)
        rc = diagnose(&cfg->correction.c, inf ? &cb_inf : &cb, run->alpha_prev, &b->diag, err);
    if (!rc)
        rc = diagnose(&cfg->correction.c, &cb_inf, run->alpha_prev, &b->diag_inf, err);
    if (!rc)
        rc = diagnose(&cfg->correction.c, &cb, run->alpha_prev, &b->diag_all, err);
    if (!rc)
        rc = corr_coefficients(&cfg->correction.c, b->diag.alpha, &cb, b->coef, b->coef_tok, &cnt, err);
    if (!rc && b->coef_tok)
        token_coef_means(b->coef, b->coef_tok, b->d, b->L, N, Gen);
    long dropped = 0;
    if (!rc && cfg->grpo.random_drop > 0)
        dropped = grpo_random_drop(cfg->grpo.random_drop, seed, step, seq0, b->coef, b->coef_tok, N, Gen);

    double t_corr = dllm_now() - t0;

    /* 7-8. inner GRPO updates, each an AdamW step */
    t0 = dllm_now();
    /* sequences, zero-var groups, mc se, and the loss's two denominators */
    double sums[5] = {(double)N, (double)zero_var, 0, 0, 0};
    for (int i = 0; i < N; i++)
        sums[2] += b->log_w_se[i];
    grpo_loss_in whole = {.N = N, .T = Gen, .len = b->L, .logp_theta = b->tok_old};
    grpo_denoms den;
    grpo_local_denoms(&cfg->grpo.loss, &whole, &den);
    sums[3] = den.surr;
    sums[4] = den.kl;
    comm_sum_d(sums, 5);
    loss_ctx lc = {.run = run, .b = b, .global = {.surr = sums[3], .kl = sums[4]}};
    double grad_norm = NAN, lr = NAN, grad_cos = NAN, grad_ratio = NAN;
    float *grad_ref = NULL; /* log.grad_cosine: the uncorrected gradient of the first update */
    size_t np = run->n_param;
    if (!rc && cfg->grpo.fresh_masks) { /* scored by a swap on the host (score) */
        if (!run->old_params)
            run->old_params = dllm_malloc(sizeof(float) * np);
        dllm_optim_state_read(dllm_policy_optim(run->pol), DLLM_STATE_PARAMS, 0, np,
                              run->old_params);
    }
    for (int k = 0; k < cfg->grpo.inner_steps && !rc; k++) {
        const dllm_lik_plan *plan = policy_plan;
        dllm_lik_plan fresh = {0};
        if (k > 0 && cfg->grpo.fresh_masks) {
            /* d1: new masks per inner update, old log-probs recomputed on them */
            rc = dllm_lik_plan_build(&fresh, &run->lik_pol, b->prompts, b->prompt_mask, b->gen,
                                     b->L, b->ro.commit_step, N, P, Gen, seed,
                                     ((uint64_t)step << 16) | (uint64_t)(RL_KEY_POLICY + k), seq0,
                                     err);
            if (!rc)
                rc = score(run, &fresh, DLLM_PREC_TRAIN_NOGRAD, run->old_params, b->l_old, b->tok_old,
                           NULL, err);
            if (!rc && b->tok_ref)
                rc = score(run, &fresh, DLLM_PREC_TRAIN_NOGRAD, run->ref_params, NULL, b->tok_ref,
                           NULL, err);
            plan = &fresh;
        }
        /* the gradients where the model trains (host or device memory) */
        dllm_backend *gbe;
        float *grads = dllm_optim_grad_buffer(dllm_policy_optim(run->pol), &np, &gbe);
        if (!rc && k == 0 && cfg->log.grad_cosine)
            rc = uncorrected_grad(run, plan, &lc, grads, gbe, np, &grad_ref, err);
        lc.loss = lc.kl = lc.clip = lc.ratio_terms = lc.nonfinite = 0;
        dllm_optim_zero_grad(dllm_policy_optim(run->pol));
        if (!rc)
            rc = loss_backward(run, plan, &lc, err);
        dllm_lik_plan_free(&fresh);
        /* several ranks: their gradients summed in the memory they are in */
        if (rc || (rc = comm_sum_backend_f(gbe, grads, np, err)))
            break;
        if (k == 0 && grad_ref) { /* the corrected gradient against the uncorrected one */
            float *g = dllm_malloc(sizeof(float) * (np ? np : 1)); /* a device's come down */
            gbe->ops->download(gbe, g, grads, sizeof(float) * np);
            double dot = 0, nc = 0, nu = 0;
            for (size_t j = 0; j < np; j++) {
                dot += (double)g[j] * grad_ref[j];
                nc += (double)g[j] * g[j];
                nu += (double)grad_ref[j] * grad_ref[j];
            }
            free(g);
            grad_cos = nc > 0 && nu > 0 ? dot / sqrt(nc * nu) : NAN;
            grad_ratio = nu > 0 ? sqrt(nc / nu) : NAN;
        }
        /* norm, clip and AdamW in one step where the model trains; a non-finite norm
         * leaves the weights as they were */
        double step_lr = lr_at(run, run->opt_step + 1);
        const dllm_adamw_args opt_args = {
            (int)run->opt_step + 1, (float)step_lr, (float)cfg->optim.betas[0],
            (float)cfg->optim.betas[1], (float)cfg->optim.eps, (float)cfg->optim.weight_decay,
            cfg->optim.grad_clip > 0 ? cfg->optim.grad_clip : 0.0};
        grad_norm = dllm_optim_step(dllm_policy_optim(run->pol), &opt_args);
        if ((rc = check_update(step, lc.loss, grad_norm, NULL, 0, err)))
            break;
        run->opt_step++;
        lr = step_lr;
        /* the updated weights checked where they are on the host (a device's stay there) */
        const float *theta = dllm_optim_trainable_host(dllm_policy_optim(run->pol), &np);
        if ((rc = check_update(step, lc.loss, grad_norm, theta, theta ? np : 0, err)))
            break;
    }
    free(grad_ref);
    dllm_lik_plan_free(&pw);
    dllm_lik_plan_free(&pp);
    double t_update = dllm_now() - t0;
    if (rc)
        return rc;

    /* 9. the rollout copy follows the trainer */
    double t_sync = 0;
    if ((rc = dllm_policy_sync_rollout(run->pol, &t_sync, err)))
        return rc;
    run->alpha_prev = b->diag.alpha;
    /* the reference policy (beta > 0) follows the trainer every grpo.ref_sync_every steps */
    if (cfg->grpo.ref_sync_every > 0 && run->ref_params && step % cfg->grpo.ref_sync_every == 0) {
        dllm_optim_state_read(dllm_policy_optim(run->pol), DLLM_STATE_PARAMS, 0, np,
                              run->ref_params);
        run->ref_synced_at = step;
    }

    /* mismatch by denoising step: mean |d| of the tokens committed at each step */
    const int S = cfg->rollout.steps;
    double *both = dllm_calloc(2 * (size_t)S, sizeof(double)); /* sums of |d|, then counts */
    int *commit = dllm_malloc(sizeof *commit * NG);
    for (size_t k = 0; k < NG; k++)
        commit[k] = b->ro.commit_step[k];
    corr_step_mismatch(&cb, commit, S, both, both + S);
    free(commit);
    comm_sum_d(both, 2 * (size_t)S);
    b->mismatch = dllm_malloc(sizeof(double) * (size_t)S);
    for (int s = 0; s < S; s++)
        b->mismatch[s] = both[S + s] > 0 ? both[s] / both[S + s] : NAN;
    free(both);

    /* 10. step metrics over the global batch */
    /* the loss and KL are each rank's share of the global batch's (normalised by the
     * global denominators): their sum is the batch's */
    double m[11] = {0, 0, 0, lc.clip, lc.ratio_terms, 0, (double)masked_left, lc.nonfinite,
                    lc.loss, lc.kl, (double)dropped};
    for (int i = 0; i < N; i++) {
        m[0] += b->reward[i];
        m[1] += b->reward[i] * b->reward[i];
        m[2] += b->correct[i];
    }
    m[5] = (double)gen_tokens;
    comm_sum_d(m, 11);
    double Ng = sums[0];
    metrics[H5LOG_M(reward_mean)] = m[0] / Ng;
    metrics[H5LOG_M(reward_std)] = sqrt(fmax(0, m[1] / Ng - (m[0] / Ng) * (m[0] / Ng)));
    metrics[H5LOG_M(accuracy)] = m[2] / Ng;
    metrics[H5LOG_M(loss)] = m[8];
    metrics[H5LOG_M(policy_kl)] = run->ref_params ? m[9] : NAN;
    metrics[H5LOG_M(clip_frac)] = m[4] > 0 ? m[3] / m[4] : NAN;
    metrics[H5LOG_M(grad_norm)] = grad_norm;
    metrics[H5LOG_M(lr)] = lr;
    metrics[H5LOG_M(alpha_raw)] = b->diag.alpha_raw;
    metrics[H5LOG_M(alpha)] = b->diag.alpha;
    metrics[H5LOG_M(rho_ess)] = b->diag.rho_ess;
    metrics[H5LOG_M(s_rel)] = b->diag.s_rel;
    metrics[H5LOG_M(delta)] = b->diag.delta;
    metrics[H5LOG_M(s_div)] = b->diag.s_div;
    metrics[H5LOG_M(nu)] = b->diag.nu;
    metrics[H5LOG_M(s_var)] = b->diag.s_var;
    metrics[H5LOG_M(k3)] = b->diag.k3;
    metrics[H5LOG_M(log_w_mc_se)] = sums[2] / Ng;
    metrics[H5LOG_M(frac_truncated)] = b->diag.frac_truncated;
    metrics[H5LOG_M(frac_zeroed)] = b->diag.frac_zeroed;
    metrics[H5LOG_M(frac_dropped)] = m[10] / Ng;
    /* non-finite weights, plus the loss terms dropped as non-finite (grpo.h) */
    metrics[H5LOG_M(frac_nonfinite)] = b->diag.frac_nonfinite + (m[4] > 0 ? m[7] / m[4] : 0.0);
    metrics[H5LOG_M(frac_var_mc)] = b->diag.frac_var_mc;
    metrics[H5LOG_M(rho_ess_prec)] = b->split[0];
    metrics[H5LOG_M(rho_ess_cache)] = b->split[1];
    metrics[H5LOG_M(delta_prec)] = b->split[2];
    metrics[H5LOG_M(delta_cache)] = b->split[3];
    metrics[H5LOG_M(frac_zero_var_groups)] = sums[1] / (Ng / G);
    /* AR decoding has no mask token: NaN, not computed */
    metrics[H5LOG_M(frac_masked_left)] =
        dllm_policy_is_diffusion(run->pol) && m[5] > 0 ? m[6] / m[5] : NAN;
    metrics[H5LOG_M(t_rollout)] = t_rollout;
    metrics[H5LOG_M(t_likelihood)] = t_lik;
    metrics[H5LOG_M(t_correction)] = t_corr;
    metrics[H5LOG_M(t_update)] = t_update;
    metrics[H5LOG_M(t_sync)] = t_sync;
    double total = t_rollout + t_lik + t_corr + t_update + t_sync;
    metrics[H5LOG_M(tokens_per_s)] = total > 0 ? m[5] / total : NAN;

    /* what the batch says beyond the mismatch: entropy, length, pass@k, the weights'
     * spread over each population (METHOD.md §5), over the global batch */
    double e[4] = {0, 0, 0, 0}; /* entropy sum, scored tokens, lengths, informative */
    for (int i = 0; i < N; i++) {
        e[2] += b->L[i];
        e[3] += b->informative[i];
        for (int t = 0; t < Gen; t++) {
            const double h = b->tok_ent[(size_t)i * Gen + t];
            if (isfinite(h)) {
                e[0] += h;
                e[1] += 1;
            }
        }
    }
    comm_sum_d(e, 4);
    b->pass_at_k = dllm_calloc((size_t)G, sizeof(double));
    pass_at_k_sums(b->correct, ppr, G, b->pass_at_k);
    comm_sum_d(b->pass_at_k, (size_t)G);
    for (int k = 0; k < G; k++)
        b->pass_at_k[k] /= Ng / G;
    double q[3];
    log_w_quantiles(b->log_w, N, q);
    metrics[H5LOG_M(nu_total)] = b->diag.nu_total;
    metrics[H5LOG_M(nu_excess)] = b->diag.nu_excess;
    metrics[H5LOG_M(diag_empty)] = b->diag.empty;
    metrics[H5LOG_M(frac_informative)] = e[3] / Ng;
    metrics[H5LOG_M(rho_ess_informative)] = b->diag_inf.rho_ess;
    metrics[H5LOG_M(delta_informative)] = b->diag_inf.delta;
    metrics[H5LOG_M(abs_log_w_informative)] = b->diag_inf.abs_log_w;
    metrics[H5LOG_M(rho_ess_all)] = b->diag_all.rho_ess;
    metrics[H5LOG_M(delta_all)] = b->diag_all.delta;
    metrics[H5LOG_M(abs_log_w_all)] = b->diag_all.abs_log_w;
    metrics[H5LOG_M(log_w_q05)] = q[0];
    metrics[H5LOG_M(log_w_q50)] = q[1];
    metrics[H5LOG_M(log_w_q95)] = q[2];
    metrics[H5LOG_M(entropy)] = e[1] > 0 ? e[0] / e[1] : NAN;
    metrics[H5LOG_M(completion_len)] = e[2] / Ng;
    metrics[H5LOG_M(grad_cosine)] = grad_cos;
    metrics[H5LOG_M(grad_norm_ratio)] = grad_ratio;
    (void)cnt;
    return 0;
}

uint64_t rl_eval_items_hash(const rl_run *run)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < run->eval.n; i++) {
        const char *q = run->eval.items[i].question;
        for (size_t k = 0; q && k <= strlen(q); k++) /* the NUL separates items */
            h = (h ^ (uint8_t)q[k]) * 0x100000001b3ULL;
    }
    return h;
}

/* Evaluation of hundreds of items takes minutes on the CPU: a line (stderr, so
 * --jsonl's stdout stays JSON) before each batch, with items
 * done (rank 0's share) and the time left at the rate so far. */
static void eval_progress(const rl_run *run, int done, int total, double elapsed)
{
    if (run->rank != 0 || run->quiet)
        return;
    if (done == 0) {
        if (total > 64) /* more than one batch: say what is coming */
            fprintf(stderr, "eval: %d items...\n", total);
        return;
    }
    double left = elapsed / done * (total - done);
    fprintf(stderr, "eval: %d/%d items (%.0f%%), %.1f s, ETA %.0f s\n", done, total,
            100.0 * done / total, elapsed, left);
    fflush(stderr);
}

int rl_evaluate(rl_run *run, double *accuracy, double *accuracy_se, double *reward_mean,
                uint8_t *correct, dllm_err *err)
{
    const int n_total = (int)run->eval.n;
    /* ranks take interleaved slices; batches of at most 64 prompts */
    double sums[3] = {0, 0, 0};
    double *item_ok = correct ? dllm_calloc(n_total ? (size_t)n_total : 1, sizeof *item_ok) : NULL;
    const int chunk = 64;
    const dllm_prec prec =
        run->cfg.eval.precision == CFG_EVAL_ROLLOUT ? DLLM_PREC_ROLLOUT : DLLM_PREC_TRAIN_NOGRAD;
    int *mine = dllm_malloc(sizeof *mine * (size_t)(n_total ? n_total : 1)), nm = 0;
    for (int i = run->rank; i < n_total; i += run->size)
        mine[nm++] = i;
    int rc = 0;
    const double t0 = dllm_now();
    for (int c0 = 0; c0 < nm && !rc; c0 += chunk) {
        eval_progress(run, c0, nm, dllm_now() - t0);
        int n = nm - c0 < chunk ? nm - c0 : chunk;
        const rl_prompt **ps = dllm_malloc(sizeof *ps * (size_t)n);
        for (int i = 0; i < n; i++)
            ps[i] = &run->eval_prompts[mine[c0 + i]];
        int32_t *prompts, *lens;
        uint8_t *pm;
        int P = rl_pad_prompts(ps, n, 1, run->mc->eos_token_id, &prompts, &pm, &lens);
        free(ps);
        dllm_sampler_cfg sc = run->eval_sampler;
        sc.seq_offset = (uint64_t)mine[c0];
        dllm_rollout ro;
        rc = rl_generate(run->pol, prec, prompts, pm, n, P, &sc, 1.0, (uint64_t)run->cfg.seed, &ro, err);
        const bool generated = rc == 0;
        for (int i = 0; i < n && !rc; i++) {
            const int32_t *g = ro.tokens + (size_t)i * (P + sc.gen_length) + P;
            int L = dllm_completion_length(g, sc.gen_length, run->mc->eos_token_id);
            char *text = rl_completion_text(run, g, L, err);
            if (!text) {
                rc = err->code;
                break;
            }
            const dllm_task_item *it = &run->eval.items[mine[c0 + i]];
            double r;
            int ok;
            rc = rl_task_score(run, it, text, strlen(text), &r, &ok, err);
            free(text);
            if (rc)
                break;
            sums[0] += ok;
            if (item_ok)
                item_ok[mine[c0 + i]] = ok;
            sums[1] += r;
            sums[2] += 1;
        }
        if (generated)
            dllm_rollout_free(&ro);
        free(prompts);
        free(pm);
        free(lens);
    }
    free(mine);
    comm_sum_d(sums, 3);
    if (item_ok) {
        comm_sum_d(item_ok, (size_t)n_total); /* each item is one rank's */
        for (int i = 0; i < n_total; i++)
            correct[i] = item_ok[i] > 0.5;
        free(item_ok);
    }
    double n = sums[2] > 0 ? sums[2] : 1, p = sums[0] / n;
    *accuracy = p;
    *accuracy_se = sqrt(p * (1 - p) / n);
    *reward_mean = sums[1] / n;
    return rc;
}
