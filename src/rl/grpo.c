/* grpo.c: GRPO advantages and clipped-surrogate loss with its exact gradient
 * (docs/METHOD.md §4); the definitions are in grpo.h. */
#include "src/rl/grpo.h"
#include "kernels/rng.h"


#include <math.h>
#include <stdlib.h>
#include <string.h>

static const cfg_name adv_v[] = {{"std", GRPO_ADV_STD}, {"none", GRPO_ADV_NONE}};
static const cfg_name ratio_v[] = {{"sequence", GRPO_RATIO_SEQUENCE}, {"token", GRPO_RATIO_TOKEN}};
static const cfg_name agg_v[] = {{"seq_mean", GRPO_AGG_SEQ_MEAN}, {"token_mean", GRPO_AGG_TOKEN_MEAN}};
const cfg_names grpo_adv_scale_names = CFG_NAMES("grpo.advantage_scale", adv_v);
const cfg_names grpo_ratio_names = CFG_NAMES("grpo.ratio", ratio_v);
const cfg_names grpo_agg_names = CFG_NAMES("grpo.loss_agg", agg_v);

const char *grpo_adv_scale_name(grpo_adv_scale s) { return cfg_names_name(&grpo_adv_scale_names, s); }
const char *grpo_ratio_name(grpo_ratio r) { return cfg_names_name(&grpo_ratio_names, r); }
const char *grpo_agg_name(grpo_agg a) { return cfg_names_name(&grpo_agg_names, a); }

int grpo_parse_adv_scale(const char *s, grpo_adv_scale *out, dllm_err *err)
{
    int k;
    int rc = cfg_names_parse(&grpo_adv_scale_names, s, &k, err);
    if (!rc)
        *out = (grpo_adv_scale)k;
    return rc;
}
int grpo_parse_ratio(const char *s, grpo_ratio *out, dllm_err *err)
{
    int k;
    int rc = cfg_names_parse(&grpo_ratio_names, s, &k, err);
    if (!rc)
        *out = (grpo_ratio)k;
    return rc;
}
int grpo_parse_agg(const char *s, grpo_agg *out, dllm_err *err)
{
    int k;
    int rc = cfg_names_parse(&grpo_agg_names, s, &k, err);
    if (!rc)
        *out = (grpo_agg)k;
    return rc;
}

int grpo_advantages(const double *rewards, int n_groups, int G, grpo_adv_scale scale,
                    double eps_adv, double *adv, int *n_zero_var, dllm_err *err)
{
    if (n_groups < 0 || G < 1)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "grpo: %d groups of size %d", n_groups, G);
    int zero_var = 0;
    for (int g = 0; g < n_groups; g++) {
        const double *r = rewards + (size_t)g * G;
        double *A = adv + (size_t)g * G;
        bool equal = true;
        double sum = 0.0;
        for (int j = 0; j < G; j++) {
            if (!isfinite(r[j]))
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "grpo: reward of group %d, completion %d is not finite (%g)",
                                    g, j, r[j]);
            equal = equal && r[j] == r[0];
            sum += r[j];
        }
        if (equal) {
            /* includes G = 1, where the sample std is undefined */
            zero_var++;
            for (int j = 0; j < G; j++)
                A[j] = 0.0;
            continue;
        }
        const double mean = sum / G;
        double ss = 0.0;
        for (int j = 0; j < G; j++)
            ss += (r[j] - mean) * (r[j] - mean);
        const double denom = scale == GRPO_ADV_STD ? sqrt(ss / (G - 1)) + eps_adv : 1.0;
        for (int j = 0; j < G; j++)
            A[j] = scale == GRPO_ADV_STD ? (r[j] - mean) / denom : r[j] - mean;
    }
    if (n_zero_var)
        *n_zero_var = zero_var;
    return DLLM_OK;
}

/* One clipped-surrogate term: S and dS/dr. */
static double surrogate(double r, double A, double eps, double *dS_dr, int *clipped)
{
    const double lo = 1.0 - eps, hi = 1.0 + eps;
    *clipped = (r > hi && A > 0.0) || (r < lo && A < 0.0);
    if (*clipped) {
        *dS_dr = 0.0;
        return (r > hi ? hi : lo) * A;
    }
    *dS_dr = A;
    return r * A;
}

static int check_in(const grpo_loss_cfg *cfg, const grpo_loss_in *in, dllm_err *err)
{
    if (!(isfinite(cfg->clip_eps) && cfg->clip_eps >= 0.0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "grpo.clip_eps: must be >= 0 (got %g)",
                            cfg->clip_eps);
    if (!(isfinite(cfg->beta) && cfg->beta >= 0.0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "grpo.beta: must be >= 0 (got %g)", cfg->beta);
    if (in->N < 0)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "grpo: negative batch size %d", in->N);
    if (in->N == 0)
        return DLLM_OK;
    if (!in->adv || !in->coef)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "grpo: advantages or coefficients missing");
    const bool tok = cfg->ratio == GRPO_RATIO_TOKEN;
    if (cfg->beta > 0.0 && !in->logp_ref)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "grpo: grpo.beta > 0 needs reference log-probs");
    if ((tok || in->logp_ref) && (!in->logp_theta || in->T < 1))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "grpo: per-token log-probs missing");
    if (tok && !in->logp_old)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "grpo: token ratio needs old log-probs");
    if (!tok && in->coef_tok)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "grpo: per-token coefficients need grpo.ratio token");
    if (!tok) {
        if (!in->l_theta || !in->l_old || !in->len)
            return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                "grpo: sequence ratio needs l_theta, l_old and lengths");
        for (int i = 0; i < in->N; i++)
            if (in->len[i] < 1)
                return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                    "grpo: completion %d has length %d", i, in->len[i]);
    }
    for (size_t k = 0; in->logp_theta && k < (size_t)in->N * in->T; k++) {
        const bool scored = !isnan(in->logp_theta[k]);
        if (tok && scored != !isnan(in->logp_old[k]))
            return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                "grpo: completion %zu token %zu scored under one policy only",
                                k / in->T, k % in->T);
        if (in->logp_ref && scored && isnan(in->logp_ref[k]))
            return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                "grpo: completion %zu token %zu has no reference log-prob",
                                k / in->T, k % in->T);
    }
    return DLLM_OK;
}

void grpo_local_denoms(const grpo_loss_cfg *cfg, const grpo_loss_in *in, grpo_denoms *d)
{
    double len_total = 0.0, tok_total = 0.0;
    for (int i = 0; i < in->N; i++) {
        if (cfg->ratio == GRPO_RATIO_SEQUENCE && in->len)
            len_total += in->len[i];
        for (int t = 0; in->logp_theta && t < in->T; t++)
            tok_total += !isnan(in->logp_theta[(size_t)i * in->T + t]);
    }
    if (cfg->agg == GRPO_AGG_SEQ_MEAN) {
        d->surr = d->kl = in->N;
        return;
    }
    d->surr = cfg->ratio == GRPO_RATIO_SEQUENCE ? len_total : tok_total;
    d->kl = tok_total;
}

int grpo_loss(const grpo_loss_cfg *cfg, const grpo_loss_in *in, grpo_loss_out *out,
              double *grad_l, double *grad_logp, dllm_err *err)
{
    int rc = check_in(cfg, in, err);
    if (rc)
        return rc;
    const int N = in->N, T = in->T;
    const bool tok = cfg->ratio == GRPO_RATIO_TOKEN, seq_mean = cfg->agg == GRPO_AGG_SEQ_MEAN;
    memset(out, 0, sizeof *out);
    out->policy_kl = in->logp_ref ? 0.0 : NAN;
    if (grad_l)
        memset(grad_l, 0, sizeof *grad_l * (size_t)N);
    if (grad_logp)
        memset(grad_logp, 0, sizeof *grad_logp * (size_t)N * T);
    if (N == 0)
        return DLLM_OK;

    /* scored tokens per sequence (token ratio, KL) and the denominators */
    int *n_tok = dllm_calloc((size_t)N, sizeof *n_tok);
    for (int i = 0; i < N; i++)
        for (int t = 0; in->logp_theta && t < T; t++)
            n_tok[i] += !isnan(in->logp_theta[(size_t)i * T + t]);
    grpo_denoms den;
    if (in->denoms)
        den = *in->denoms;
    else
        grpo_local_denoms(cfg, in, &den);

    long n_clipped = 0;
    double ratio_sum = 0.0, surr = 0.0;
    for (int i = 0; i < N; i++) {
        const double A = in->adv[i];
        int clipped;
        double dS;
        if (!tok) {
            const double L = in->len[i];
            const double r = exp((in->l_theta[i] - in->l_old[i]) / L);
            const double S = surrogate(r, A, cfg->clip_eps, &dS, &clipped);
            n_clipped += clipped;
            ratio_sum += r;
            out->n_ratio_terms++;
            const double c = in->coef[i];
            if (c == 0.0 || A == 0.0)
                continue;
            /* each of the L_i tokens carries c S: seq_mean averages them back to c S */
            const double w = seq_mean ? 1.0 / den.surr : L / den.surr;
            /* clipped: gradient exactly 0, even at r = +inf */
            const double term = w * c * S, g = dS == 0.0 ? 0.0 : -w * c * dS * r / L;
            if (!isfinite(term) || !isfinite(g)) {
                out->n_nonfinite++;
                continue;
            }
            surr += term;
            if (grad_l)
                grad_l[i] = g;
            continue;
        }
        for (int t = 0; t < T; t++) {
            const size_t k = (size_t)i * T + t;
            if (isnan(in->logp_theta[k]))
                continue;
            const double r = exp(in->logp_theta[k] - in->logp_old[k]);
            const double S = surrogate(r, A, cfg->clip_eps, &dS, &clipped);
            n_clipped += clipped;
            ratio_sum += r;
            out->n_ratio_terms++;
            const double c = in->coef_tok ? in->coef_tok[k] : in->coef[i];
            if (c == 0.0 || A == 0.0)
                continue;
            const double w = seq_mean ? 1.0 / (den.surr * n_tok[i]) : 1.0 / den.surr;
            const double term = w * c * S, g = dS == 0.0 ? 0.0 : -w * c * dS * r;
            if (!isfinite(term) || !isfinite(g)) {
                out->n_nonfinite++;
                continue;
            }
            surr += term;
            if (grad_logp)
                grad_logp[k] = g;
        }
    }

    double kl = 0.0;
    if (in->logp_ref) {
        for (int i = 0; i < N; i++)
            for (int t = 0; t < T; t++) {
                const size_t k = (size_t)i * T + t;
                if (isnan(in->logp_theta[k]))
                    continue;
                const double x = in->logp_ref[k] - in->logp_theta[k], ex = exp(x);
                const double w = seq_mean ? 1.0 / (den.kl * n_tok[i]) : 1.0 / den.kl;
                kl += w * (ex - x - 1.0);
                if (grad_logp && cfg->beta > 0.0)
                    grad_logp[k] += cfg->beta * w * (1.0 - ex);
                out->n_kl_tokens++;
            }
        out->policy_kl = kl;
    }
    free(n_tok);

    out->surrogate = surr;
    out->loss = -surr + (cfg->beta > 0.0 ? cfg->beta * kl : 0.0);
    if (out->n_ratio_terms > 0) {
        out->clip_frac = (double)n_clipped / out->n_ratio_terms;
        out->ratio_mean = ratio_sum / out->n_ratio_terms;
    }
    return DLLM_OK;
}

long grpo_random_drop(double p, uint64_t seed, int64_t step, uint64_t seq0, double *coef,
                      double *coef_tok, int N, int T)
{
    long n = 0;
    if (!(p > 0))
        return 0;
    for (int i = 0; i < N; i++) {
        dllm_rng r = dllm_rng_make(seed, DLLM_RNG_DROP, (uint64_t)step, seq0 + (uint64_t)i);
        if (dllm_rng_uniform(&r) >= p)
            continue;
        coef[i] = 0.0;
        if (coef_tok)
            for (int t = 0; t < T; t++)
                coef_tok[(size_t)i * T + t] = 0.0;
        n++;
    }
    return n;
}
