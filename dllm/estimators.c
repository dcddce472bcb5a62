#include "dllm/estimators.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dllm_estimator_parse(const char *s, dllm_estimator *out)
{
    if (!strcmp(s, "one_step"))
        *out = EST_ONE_STEP;
    else if (!strcmp(s, "elbo"))
        *out = EST_ELBO;
    else if (!strcmp(s, "trajectory"))
        *out = EST_TRAJECTORY;
    else if (!strcmp(s, "exact"))
        *out = EST_AR_EXACT;
    else
        return -1;
    return 0;
}

const char *dllm_estimator_name(dllm_estimator e)
{
    switch (e) {
    case EST_ONE_STEP: return "one_step";
    case EST_ELBO: return "elbo";
    case EST_TRAJECTORY: return "trajectory";
    case EST_AR_EXACT: return "exact";
    }
    return "?";
}

void dllm_lik_result_free(dllm_lik_result *r)
{
    free(r->token_logp);
    r->token_logp = NULL;
}

void dllm_elbo_mask_counts(dllm_rng *rng, int L, int K, int *n)
{
    int k0 = 1 + (int)dllm_rng_below(rng, (uint64_t)L);
    for (int j = 0; j < K; j++) {
        /* torch.round(linspace(k0, k0 + (K-1) L/K, K)): half to even */
        double x = nearbyint((double)k0 + (double)j * ((double)L / (double)K));
        n[j] = (int)(((long)x - 1) % L) + 1;
    }
}

/* log softmax(logits / temp)[y] in double */
static double token_logp(const float *logit, int V, int32_t y, double temp)
{
    double mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (logit[v] / temp > mx)
            mx = logit[v] / temp;
    double z = 0;
    for (int v = 0; v < V; v++)
        z += exp(logit[v] / temp - mx);
    return logit[y] / temp - mx - log(z);
}

/* One batch of canvases [B, T]: logits at the completion positions flagged in
 * scored [B, L] (tracked explicitly: a token may legitimately equal the mask
 * id), their log-probs stored in lp[b*L + i] (NaN where not scored). */
static int score_masked(dllm_logits_fn fn, void *model, const int32_t *canvas,
                        const uint8_t *scored, int B, int P, int L, const int32_t *completion,
                        const dllm_lik_cfg *c, double *lp, dllm_err *err)
{
    const int T = P + L, V = c->vocab;
    int n = 0;
    int32_t *rows = dllm_malloc(sizeof *rows * (size_t)B * (size_t)L);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            lp[(size_t)b * L + i] = NAN;
            if (scored[(size_t)b * L + i])
                rows[n++] = b * T + P + i;
        }
    float *logits = dllm_malloc(sizeof *logits * (size_t)(n ? n : 1) * (size_t)V);
    int rc = n ? fn(model, canvas, NULL, B, T, rows, n, logits) : 0;
    if (rc)
        rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed");
    for (int r = 0; r < n && !rc; r++) {
        int b = rows[r] / T, i = rows[r] % T - P;
        lp[(size_t)b * L + i] = token_logp(logits + (size_t)r * V, V, completion[i], c->temperature);
    }
    free(rows);
    free(logits);
    return rc;
}

int dllm_seq_logprob(dllm_logits_fn fn, void *model, const int32_t *prompt, int P,
                     const int32_t *completion, int L, const int16_t *commit_step,
                     const dllm_lik_cfg *c, dllm_rng rng, dllm_lik_result *out, dllm_err *err)
{
    memset(out, 0, sizeof *out);
    if (L <= 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "empty completion");
    if (c->kind == EST_AR_EXACT)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "exact log-probs are for autoregressive models (use a likelihood plan)");
    if (!(c->temperature > 0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "scoring temperature must be > 0");
    const int T = P + L;
    out->L = L;
    out->token_logp = dllm_malloc(sizeof *out->token_logp * (size_t)L);
    int rc = 0;
    if (c->kind == EST_ONE_STEP) {
        int32_t *canvas = dllm_malloc(sizeof *canvas * (size_t)T);
        for (int t = 0; t < P; t++)
            canvas[t] = c->p_mask_prompt > 0 && dllm_rng_uniform(&rng) < c->p_mask_prompt
                            ? c->mask_id : prompt[t];
        uint8_t *all = dllm_malloc((size_t)L);
        for (int i = 0; i < L; i++) {
            canvas[P + i] = c->mask_id;
            all[i] = 1;
        }
        rc = score_masked(fn, model, canvas, all, 1, P, L, completion, c, out->token_logp, err);
        free(all);
        double s = 0;
        for (int i = 0; i < L; i++)
            s += out->token_logp[i];
        out->seq_logp = s;
        free(canvas);
    } else if (c->kind == EST_ELBO) {
        const int K = c->mc;
        if (K <= 0) {
            dllm_lik_result_free(out);
            return dllm_err_set(err, DLLM_EXIT_INPUT, "elbo needs mc >= 1 samples");
        }
        int *n = dllm_malloc(sizeof *n * (size_t)K);
        int *perm = dllm_malloc(sizeof *perm * (size_t)L);
        int32_t *canvas = dllm_malloc(sizeof *canvas * (size_t)K * T);
        double *lp = dllm_malloc(sizeof *lp * (size_t)K * L);
        uint8_t *scored = dllm_calloc((size_t)K * L, 1);
        dllm_elbo_mask_counts(&rng, L, K, n);
        for (int k = 0; k < K; k++) {
            int32_t *row = canvas + (size_t)k * T;
            memcpy(row, prompt, sizeof *row * (size_t)P);
            memcpy(row + P, completion, sizeof *row * (size_t)L);
            /* a uniformly random subset of size n[k]: partial Fisher-Yates */
            for (int i = 0; i < L; i++)
                perm[i] = i;
            for (int i = 0; i < n[k]; i++) {
                int j = i + (int)dllm_rng_below(&rng, (uint64_t)(L - i)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
                row[P + perm[i]] = c->mask_id;
                scored[(size_t)k * L + perm[i]] = 1;
            }
        }
        /* evaluate in chunks so memory stays bounded for large K */
        const int chunk = 64;
        for (int k0 = 0; k0 < K && !rc; k0 += chunk) {
            int nb = K - k0 < chunk ? K - k0 : chunk;
            rc = score_masked(fn, model, canvas + (size_t)k0 * T, scored + (size_t)k0 * L, nb, P, L,
                              completion, c, lp + (size_t)k0 * L, err);
        }
        double mean = 0, m2 = 0;
        for (int k = 0; k < K && !rc; k++) {
            double s = 0;
            for (int i = 0; i < L; i++)
                if (!isnan(lp[(size_t)k * L + i]))
                    s += lp[(size_t)k * L + i];
            double v = (double)L / n[k] * s, d = v - mean;
            mean += d / (k + 1);
            m2 += d * (v - mean);
        }
        out->seq_logp = mean;
        out->mc_se = K > 1 ? sqrt(m2 / (K - 1) / K) : 0;
        for (int i = 0; i < L; i++) {
            double s = 0;
            int cnt = 0;
            for (int k = 0; k < K; k++)
                if (!isnan(lp[(size_t)k * L + i])) {
                    s += lp[(size_t)k * L + i];
                    cnt++;
                }
            out->token_logp[i] = cnt ? s / cnt : NAN;
        }
        free(n);
        free(perm);
        free(scored);
        free(canvas);
        free(lp);
    } else {
        if (!commit_step) {
            dllm_lik_result_free(out);
            return dllm_err_set(err, DLLM_EXIT_INPUT, "trajectory needs the commit steps");
        }
        const int shrink = c->shrink > 0 ? c->shrink : 1;
        int smax = -1;
        for (int i = 0; i < L; i++) {
            if (commit_step[i] < 0) {
                dllm_lik_result_free(out);
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "trajectory: token %d has no commit step", i);
            }
            if (commit_step[i] > smax)
                smax = commit_step[i];
        }
        int ng = smax / shrink + 1;
        /* one canvas per group of steps, batched into one forward call */
        int32_t *canvas = dllm_malloc(sizeof *canvas * (size_t)ng * T);
        double *lp = dllm_malloc(sizeof *lp * (size_t)ng * L);
        uint8_t *scored = dllm_malloc((size_t)ng * L);
        for (int g = 0; g < ng; g++) {
            int32_t *row = canvas + (size_t)g * T;
            memcpy(row, prompt, sizeof *row * (size_t)P);
            for (int i = 0; i < L; i++) {
                bool visible = commit_step[i] < g * shrink;
                row[P + i] = visible ? completion[i] : c->mask_id;
                scored[(size_t)g * L + i] = commit_step[i] / shrink == g;
            }
        }
        const int chunk = 64;
        for (int g0 = 0; g0 < ng && !rc; g0 += chunk) {
            int nb = ng - g0 < chunk ? ng - g0 : chunk;
            rc = score_masked(fn, model, canvas + (size_t)g0 * T, scored + (size_t)g0 * L, nb, P, L,
                              completion, c, lp + (size_t)g0 * L, err);
        }
        double s = 0;
        for (int i = 0; i < L && !rc; i++) {
            int g = commit_step[i] / shrink;
            out->token_logp[i] = lp[(size_t)g * L + i];
            s += out->token_logp[i];
        }
        out->seq_logp = s;
        free(canvas);
        free(lp);
        free(scored);
    }
    if (rc)
        dllm_lik_result_free(out);
    return rc;
}
