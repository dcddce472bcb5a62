#include "dllm/lik_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    dllm_lik_plan *p;
    int cap_canvas, cap_rows;
} builder;

static int32_t *new_canvas(builder *b, int i, const int32_t *prompt, const int32_t *gen)
{
    dllm_lik_plan *p = b->p;
    if (p->n_canvas == b->cap_canvas) {
        b->cap_canvas = b->cap_canvas ? 2 * b->cap_canvas : 64;
        p->canvas = dllm_realloc(p->canvas, sizeof *p->canvas * (size_t)b->cap_canvas * p->T);
        p->canvas_seq = dllm_realloc(p->canvas_seq, sizeof *p->canvas_seq * (size_t)b->cap_canvas);
    }
    int32_t *c = p->canvas + (size_t)p->n_canvas * p->T;
    memcpy(c, prompt, sizeof *c * (size_t)p->P);
    memcpy(c + p->P, gen, sizeof *c * (size_t)p->G);
    p->canvas_seq[p->n_canvas++] = i;
    return c;
}

/* shift: the row scoring token t sits at position P + t + shift (AR: -1) */
static void add_row_at(builder *b, int i, int t, int shift, int32_t target, double a);

static void add_row(builder *b, int i, int t, int32_t target, double a)
{
    add_row_at(b, i, t, 0, target, a);
}

static void add_row_at(builder *b, int i, int t, int shift, int32_t target, double a)
{
    dllm_lik_plan *p = b->p;
    if (p->n_rows == b->cap_rows) {
        b->cap_rows = b->cap_rows ? 2 * b->cap_rows : 256;
        size_t n = (size_t)b->cap_rows;
        p->row = dllm_realloc(p->row, sizeof *p->row * n);
        p->seq = dllm_realloc(p->seq, sizeof *p->seq * n);
        p->tok = dllm_realloc(p->tok, sizeof *p->tok * n);
        p->target = dllm_realloc(p->target, sizeof *p->target * n);
        p->a = dllm_realloc(p->a, sizeof *p->a * n);
    }
    int r = p->n_rows++;
    p->row[r] = (p->n_canvas - 1) * p->T + p->P + t + shift;
    p->seq[r] = i;
    p->tok[r] = t;
    p->target[r] = target;
    p->a[r] = a;
    p->tok_count[(size_t)i * p->G + t]++;
}

void dllm_lik_plan_free(dllm_lik_plan *p)
{
    free(p->canvas);
    free(p->keymask);
    free(p->row);
    free(p->seq);
    free(p->tok);
    free(p->target);
    free(p->a);
    free(p->canvas_seq);
    free(p->L);
    free(p->tok_count);
    memset(p, 0, sizeof *p);
}

/* The builder proper: sequence i draws its masks from streams[i]. */
static int build(dllm_lik_plan *p, const dllm_lik_cfg *c, const int32_t *prompts,
                 const uint8_t *prompt_mask, const int32_t *gen, const int *L,
                 const int16_t *commit_step, int n_seq, int P, int G, const dllm_rng *streams,
                 dllm_err *err)
{
    memset(p, 0, sizeof *p);
    if (c->kind == EST_ELBO && c->mc <= 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "elbo needs at least one Monte Carlo sample");
    if (c->kind == EST_TRAJECTORY && !commit_step)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "trajectory needs the commit steps");
    if (!(c->temperature > 0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "scoring temperature must be > 0");
    p->n_seq = n_seq;
    p->P = P;
    p->G = G;
    p->T = P + G;
    p->V = c->vocab;
    p->temperature = c->temperature;
    p->kind = c->kind;
    p->mc = c->mc;
    p->L = dllm_malloc(sizeof *p->L * (size_t)n_seq);
    p->tok_count = dllm_calloc((size_t)n_seq * G, sizeof *p->tok_count);
    builder b = {.p = p};
    int *counts = dllm_malloc(sizeof *counts * (size_t)(c->mc > 0 ? c->mc : 1));
    int *perm = dllm_malloc(sizeof *perm * (size_t)G);
    int *scored = dllm_malloc(sizeof *scored * (size_t)G);
    uint8_t *drawn = dllm_malloc((size_t)G);
    int rc = 0;
    for (int i = 0; i < n_seq && !rc; i++) {
        const int32_t *pr = prompts + (size_t)i * P, *g = gen + (size_t)i * G;
        const uint8_t *pm = prompt_mask ? prompt_mask + (size_t)i * P : NULL;
        const int Li = L[i];
        if (Li < 1 || Li > G) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "completion %d: length %d outside 1..%d", i, Li, G);
            break;
        }
        p->L[i] = Li;
        dllm_rng rng = streams[i];
        /* the scored tokens: a position still masked (the mask id) is no choice
         * of the policy; it stays masked in every canvas and is not scored */
        int Ls = 0;
        for (int t = 0; t < Li; t++)
            if (c->kind == EST_AR_EXACT || g[t] != c->mask_id)
                scored[Ls++] = t;
        if (c->kind == EST_AR_EXACT) {
            if (P < 1) {
                rc = dllm_err_set(err, DLLM_EXIT_INPUT, "exact AR scoring needs a prompt");
                break;
            }
            new_canvas(&b, i, pr, g);
            for (int t = 0; t < Li; t++)
                add_row_at(&b, i, t, -1, g[t], 1.0);
        } else if (c->kind == EST_ONE_STEP) {
            int32_t *cv = new_canvas(&b, i, pr, g);
            for (int t = 0; t < P; t++)
                if ((!pm || pm[t]) && c->p_mask_prompt > 0 && dllm_rng_uniform(&rng) < c->p_mask_prompt)
                    cv[t] = c->mask_id;
            for (int t = 0; t < G; t++)
                cv[P + t] = c->mask_id;
            for (int j = 0; j < Ls; j++)
                add_row(&b, i, scored[j], g[scored[j]], 1.0);
        } else if (c->kind == EST_ELBO) {
            const int K = c->mc;
            if (Ls == 0) {
                /* nothing to score: K canvases without rows keep the plan's shape */
                for (int k = 0; k < K; k++)
                    new_canvas(&b, i, pr, g);
                continue;
            }
            dllm_elbo_mask_counts(&rng, Ls, K, counts);
            for (int k = 0; k < K; k++) {
                int32_t *cv = new_canvas(&b, i, pr, g);
                /* the padding tail past the first EOS is masked in every sample and
                 * never scored: the context one_step sees (docs/METHOD.md §3) */
                for (int t = Li; t < G; t++)
                    cv[P + t] = c->mask_id;
                for (int j = 0; j < Ls; j++)
                    perm[j] = scored[j];
                for (int j = 0; j < counts[k]; j++) {
                    int s = j + (int)dllm_rng_below(&rng, (uint64_t)(Ls - j)), tmp = perm[j];
                    perm[j] = perm[s];
                    perm[s] = tmp;
                }
                memset(drawn, 0, (size_t)Li);
                for (int j = 0; j < counts[k]; j++) {
                    cv[P + perm[j]] = c->mask_id;
                    drawn[perm[j]] = 1;
                }
                /* rows in position order within the canvas */
                double a = (double)Ls / ((double)counts[k] * K);
                for (int t = 0; t < Li; t++)
                    if (drawn[t])
                        add_row(&b, i, t, g[t], a);
            }
        } else {
            const int16_t *cs = commit_step + (size_t)i * G;
            const int shrink = c->shrink > 0 ? c->shrink : 1;
            int smax = -1;
            for (int j = 0; j < Ls && !rc; j++) {
                if (cs[scored[j]] < 0)
                    rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                                      "completion %d: token %d (id %d) has no commit step", i,
                                      scored[j], g[scored[j]]);
                smax = cs[scored[j]] > smax ? cs[scored[j]] : smax;
            }
            if (rc)
                break;
            if (Ls == 0) {
                /* nothing to score: one canvas without rows keeps the plan's shape */
                int32_t *cv = new_canvas(&b, i, pr, g);
                for (int t = 0; t < G; t++)
                    cv[P + t] = c->mask_id;
                continue;
            }
            for (int grp = 0; grp <= smax / shrink; grp++) {
                int any = 0;
                for (int j = 0; j < Ls; j++)
                    any |= cs[scored[j]] / shrink == grp;
                if (!any)
                    continue;
                int32_t *cv = new_canvas(&b, i, pr, g);
                for (int t = 0; t < G; t++)
                    if (!(cs[t] >= 0 && cs[t] < grp * shrink))
                        cv[P + t] = c->mask_id;
                for (int j = 0; j < Ls; j++)
                    if (cs[scored[j]] / shrink == grp)
                        add_row(&b, i, scored[j], g[scored[j]], 1.0);
            }
        }
    }
    free(counts);
    free(perm);
    free(scored);
    free(drawn);
    if (rc) {
        dllm_lik_plan_free(p);
        return rc;
    }
    if (prompt_mask) {
        p->keymask = dllm_malloc((size_t)p->n_canvas * p->T);
        for (int k = 0; k < p->n_canvas; k++) {
            uint8_t *km = p->keymask + (size_t)k * p->T;
            memcpy(km, prompt_mask + (size_t)p->canvas_seq[k] * P, (size_t)P);
            memset(km + P, 1, (size_t)G);
        }
    }
    return 0;
}

int dllm_lik_plan_build(dllm_lik_plan *p, const dllm_lik_cfg *c, const int32_t *prompts,
                        const uint8_t *prompt_mask, const int32_t *gen, const int *L,
                        const int16_t *commit_step, int n_seq, int P, int G, uint64_t seed,
                        uint64_t key, uint64_t seq_offset, dllm_err *err)
{
    dllm_rng *streams = dllm_malloc(sizeof *streams * (size_t)(n_seq > 0 ? n_seq : 1));
    for (int i = 0; i < n_seq; i++)
        streams[i] = dllm_rng_make(seed, DLLM_RNG_MASKS, key, seq_offset + (uint64_t)i);
    int rc = build(p, c, prompts, prompt_mask, gen, L, commit_step, n_seq, P, G, streams, err);
    free(streams);
    return rc;
}

int dllm_lik_plan_build_one(dllm_lik_plan *p, const dllm_lik_cfg *c, const int32_t *prompt, int P,
                            const int32_t *completion, int L, const int16_t *commit_step,
                            dllm_rng rng, dllm_err *err)
{
    if (L <= 0) {
        memset(p, 0, sizeof *p);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "empty completion");
    }
    return build(p, c, prompt, NULL, completion, &L, commit_step, 1, P, L, &rng, err);
}

/* log softmax(z / temp)[y], and optionally softmax(z / temp) into prob */
static double row_logp(const float *z, int V, int32_t y, double temp, float *prob)
{
    double mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (z[v] / temp > mx)
            mx = z[v] / temp;
    double s = 0;
    for (int v = 0; v < V; v++)
        s += exp(z[v] / temp - mx);
    double lse = mx + log(s);
    double lp = z[y] / temp - lse; /* before prob may overwrite z */
    if (prob)
        for (int v = 0; v < V; v++)
            prob[v] = (float)exp(z[v] / temp - lse);
    return lp;
}

/* Runs canvases [c0, c1) and fills logp for their rows [r0, r1). */
static int run_chunk(const dllm_lik_plan *p, dllm_logits_fn fn, void *model, int c0, int c1, int r0,
                     int r1, float *logits, int32_t *rows)
{
    for (int r = r0; r < r1; r++)
        rows[r - r0] = p->row[r] - c0 * p->T;
    return fn(model, p->canvas + (size_t)c0 * p->T, p->keymask ? p->keymask + (size_t)c0 * p->T : NULL,
              c1 - c0, p->T, rows, r1 - r0, logits);
}

/* Each canvas's Monte Carlo sample of its sequence's estimate: the estimate
 * is the mean of its canvases' samples (elbo: K sum_r a_r logp_r); for the
 * other estimators a sequence's canvases add up instead, so the single
 * "sample" is the whole estimate, put on its first canvas. */
static void canvas_samples(const dllm_lik_plan *p, const double *logp, double *v)
{
    memset(v, 0, sizeof *v * (size_t)p->n_canvas);
    if (p->kind == EST_ELBO) {
        for (int r = 0; r < p->n_rows; r++)
            v[p->row[r] / p->T] += p->mc * p->a[r] * logp[r];
        return;
    }
    int *first = dllm_malloc(sizeof *first * (size_t)p->n_seq);
    for (int i = 0; i < p->n_seq; i++)
        first[i] = -1;
    for (int k = 0; k < p->n_canvas; k++)
        if (first[p->canvas_seq[k]] < 0)
            first[p->canvas_seq[k]] = k;
    for (int r = 0; r < p->n_rows; r++)
        v[first[p->seq[r]]] += p->a[r] * logp[r];
    free(first);
}

/* Standard error of the mean over each sequence's canvases of x (elbo only). */
static void samples_se(const dllm_lik_plan *p, const double *x, double *se)
{
    memset(se, 0, sizeof *se * (size_t)p->n_seq);
    if (p->kind != EST_ELBO)
        return;
    for (int k0 = 0; k0 < p->n_canvas;) {
        int i = p->canvas_seq[k0], k1 = k0;
        while (k1 < p->n_canvas && p->canvas_seq[k1] == i)
            k1++;
        double mean = 0, m2 = 0;
        for (int k = k0; k < k1; k++) {
            double d = x[k] - mean;
            mean += d / (k - k0 + 1);
            m2 += d * (x[k] - mean);
        }
        int K = k1 - k0;
        se[i] = K > 1 ? sqrt(m2 / (K - 1) / K) : 0;
        k0 = k1;
    }
}

void dllm_lik_plan_diff_se(const dllm_lik_plan *p, const double *sample_a, const double *sample_b,
                           double *se)
{
    double *d = dllm_malloc(sizeof *d * (size_t)(p->n_canvas ? p->n_canvas : 1));
    for (int k = 0; k < p->n_canvas; k++)
        d[k] = sample_a[k] - sample_b[k];
    samples_se(p, d, se);
    free(d);
}

static void finish(const dllm_lik_plan *p, const double *logp, double *seq_logp, double *tok_logp,
                   double *mc_se, double *sample)
{
    if (seq_logp)
        memset(seq_logp, 0, sizeof *seq_logp * (size_t)p->n_seq);
    if (tok_logp)
        for (size_t k = 0; k < (size_t)p->n_seq * p->G; k++)
            tok_logp[k] = p->tok_count[k] ? 0 : NAN;
    for (int r = 0; r < p->n_rows; r++) {
        if (seq_logp)
            seq_logp[p->seq[r]] += p->a[r] * logp[r];
        if (tok_logp) {
            size_t k = (size_t)p->seq[r] * p->G + p->tok[r];
            tok_logp[k] += logp[r] / p->tok_count[k];
        }
    }
    if (!mc_se && !sample)
        return;
    double *v = sample ? sample : dllm_malloc(sizeof *v * (size_t)(p->n_canvas ? p->n_canvas : 1));
    canvas_samples(p, logp, v);
    if (mc_se)
        samples_se(p, v, mc_se);
    if (!sample)
        free(v);
}

int dllm_lik_plan_eval(const dllm_lik_plan *p, dllm_logits_fn fn, void *model, int max_canvas,
                       double *seq_logp, double *tok_logp, double *mc_se, double *sample,
                       dllm_err *err)
{
    return dllm_lik_plan_eval_logp(p, fn, NULL, model, max_canvas, seq_logp, tok_logp, mc_se,
                                   sample, err);
}

/* Entropy of softmax(z / temp), in double (the same max-shifted sums as row_logp). */
static double row_entropy(const float *z, int V, double temp)
{
    double mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (z[v] / temp > mx)
            mx = z[v] / temp;
    double s = 0, sx = 0;
    for (int v = 0; v < V; v++) {
        const double x = z[v] / temp - mx, e = exp(x);
        s += e;
        sx += e * x;
    }
    /* H = log s - sum e x / s, x the shifted logits */
    return log(s) - sx / s;
}

/* tok_ent (n_seq, G): the mean over each token's rows of the row entropies. */
static void finish_entropy(const dllm_lik_plan *p, const double *ent, double *tok_ent)
{
    for (size_t k = 0; k < (size_t)p->n_seq * p->G; k++)
        tok_ent[k] = p->tok_count[k] ? 0 : NAN;
    for (int r = 0; r < p->n_rows; r++) {
        size_t k = (size_t)p->seq[r] * p->G + p->tok[r];
        tok_ent[k] += ent[r] / p->tok_count[k];
    }
}

static int eval_plan(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_logp_fn lfn, void *model,
                     int max_canvas, double *seq_logp, double *tok_logp, double *mc_se,
                     double *sample, double *tok_ent, dllm_err *err);

int dllm_lik_plan_eval_logp(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_logp_fn lfn,
                            void *model, int max_canvas, double *seq_logp, double *tok_logp,
                            double *mc_se, double *sample, dllm_err *err)
{
    return eval_plan(p, fn, lfn, model, max_canvas, seq_logp, tok_logp, mc_se, sample, NULL, err);
}

int dllm_lik_plan_eval_entropy(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_logp_fn lfn,
                               void *model, int max_canvas, double *seq_logp, double *tok_logp,
                               double *mc_se, double *sample, double *tok_ent, dllm_err *err)
{
    return eval_plan(p, fn, lfn, model, max_canvas, seq_logp, tok_logp, mc_se, sample, tok_ent,
                     err);
}

static int eval_plan(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_logp_fn lfn, void *model,
                     int max_canvas, double *seq_logp, double *tok_logp, double *mc_se,
                     double *sample, double *tok_ent, dllm_err *err)
{
    if (p->temperature != 1.0)
        lfn = NULL; /* the fused path is the log-softmax at temperature 1 */
    if (max_canvas < 1)
        max_canvas = 1;
    double *logp = dllm_malloc(sizeof *logp * (size_t)(p->n_rows ? p->n_rows : 1));
    double *ent = tok_ent ? dllm_malloc(sizeof *ent * (size_t)(p->n_rows ? p->n_rows : 1)) : NULL;
    int rc = 0, c0 = 0, r0 = 0;
    while (c0 < p->n_canvas && !rc) {
        int c1 = c0 + max_canvas < p->n_canvas ? c0 + max_canvas : p->n_canvas, r1 = r0;
        while (r1 < p->n_rows && p->row[r1] / p->T < c1)
            r1++;
        if (r1 > r0 && lfn) {
            int32_t *rows = dllm_malloc(sizeof *rows * (size_t)(r1 - r0));
            float *lp = dllm_malloc(sizeof *lp * (size_t)(r1 - r0));
            for (int r = r0; r < r1; r++)
                rows[r - r0] = p->row[r] - c0 * p->T;
            if (lfn(model, p->canvas + (size_t)c0 * p->T,
                    p->keymask ? p->keymask + (size_t)c0 * p->T : NULL, c1 - c0, p->T, rows,
                    p->target + r0, r1 - r0, lp))
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed");
            for (int r = r0; r < r1 && !rc; r++)
                logp[r] = lp[r - r0];
            free(rows);
            free(lp);
            if (ent && !rc) {
                /* the fused head gives no distribution: one more forward for the entropy,
                 * so the log-probs stay the fused path's */
                float *logits = dllm_malloc(sizeof *logits * (size_t)(r1 - r0) * p->V);
                int32_t *rw = dllm_malloc(sizeof *rw * (size_t)(r1 - r0));
                if (run_chunk(p, fn, model, c0, c1, r0, r1, logits, rw))
                    rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed");
                for (int r = r0; r < r1 && !rc; r++)
                    ent[r] = row_entropy(logits + (size_t)(r - r0) * p->V, p->V, p->temperature);
                free(logits);
                free(rw);
            }
        } else if (r1 > r0) {
            float *logits = dllm_malloc(sizeof *logits * (size_t)(r1 - r0) * p->V);
            int32_t *rows = dllm_malloc(sizeof *rows * (size_t)(r1 - r0));
            if (run_chunk(p, fn, model, c0, c1, r0, r1, logits, rows))
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed");
            for (int r = r0; r < r1 && !rc; r++) {
                if (ent)
                    ent[r] = row_entropy(logits + (size_t)(r - r0) * p->V, p->V, p->temperature);
                logp[r] = row_logp(logits + (size_t)(r - r0) * p->V, p->V, p->target[r],
                                   p->temperature, NULL);
            }
            free(logits);
            free(rows);
        }
        c0 = c1;
        r0 = r1;
    }
    if (!rc)
        finish(p, logp, seq_logp, tok_logp, mc_se, sample);
    if (!rc && ent)
        finish_entropy(p, ent, tok_ent);
    free(logp);
    free(ent);
    return rc;
}

/* The backward's next chunk from canvas c0 and row r0: at most max_canvas canvases,
 * extended to the end of the last sequence touched (a sequence's estimate needs all of
 * its canvases); its canvases end at *c1, its sequences are [*s0, *s1), its rows end
 * at *r1. */
static void backward_chunk(const dllm_lik_plan *p, int c0, int r0, int max_canvas, int *c1,
                           int *s0, int *s1, int *r1)
{
    int c = c0 + max_canvas < p->n_canvas ? c0 + max_canvas : p->n_canvas;
    while (c < p->n_canvas && p->canvas_seq[c] == p->canvas_seq[c - 1])
        c++;
    int r = r0;
    while (r < p->n_rows && p->row[r] / p->T < c)
        r++;
    *c1 = c, *s0 = p->canvas_seq[c0], *s1 = p->canvas_seq[c - 1] + 1, *r1 = r;
}

/* dLoss/dlogp of row r from the loss's gradients with respect to the estimates (a
 * non-finite one contributes nothing). */
static double row_grad(const dllm_lik_plan *p, int r, const double *dseq, const double *dtok)
{
    size_t k = (size_t)p->seq[r] * p->G + p->tok[r];
    double g = 0;
    if (isfinite(dseq[p->seq[r]]))
        g += dseq[p->seq[r]] * p->a[r];
    if (isfinite(dtok[k]))
        g += dtok[k] / p->tok_count[k];
    return g;
}

int dllm_lik_plan_backward(const dllm_lik_plan *p, dllm_logits_fn fn, dllm_backward_fn bwd,
                           void *model, int max_canvas, dllm_lik_grad_fn grad, void *grad_ctx,
                           double *seq_logp, double *tok_logp, dllm_err *err)
{
    if (max_canvas < 1)
        max_canvas = 1;
    const int V = p->V, G = p->G;
    const double temp = p->temperature;
    double *logp = dllm_malloc(sizeof *logp * (size_t)(p->n_rows ? p->n_rows : 1));
    double *sq = dllm_calloc((size_t)(p->n_seq ? p->n_seq : 1), sizeof *sq);
    double *tk = dllm_malloc(sizeof *tk * (size_t)(p->n_seq ? p->n_seq : 1) * G);
    double *dseq = dllm_calloc((size_t)(p->n_seq ? p->n_seq : 1), sizeof *dseq);
    double *dtok = dllm_malloc(sizeof *dtok * (size_t)(p->n_seq ? p->n_seq : 1) * G);
    for (size_t k = 0; k < (size_t)p->n_seq * G; k++) {
        tk[k] = p->tok_count[k] ? 0 : NAN;
        dtok[k] = 0;
    }
    int rc = 0, c0 = 0, r0 = 0;
    while (c0 < p->n_canvas && !rc) {
        int c1, s0, s1, r1;
        backward_chunk(p, c0, r0, max_canvas, &c1, &s0, &s1, &r1);
        size_t nr = (size_t)(r1 - r0);
        float *logits = dllm_malloc(sizeof *logits * (nr ? nr : 1) * V);
        int32_t *rows = dllm_malloc(sizeof *rows * (nr ? nr : 1));
        if (nr && run_chunk(p, fn, model, c0, c1, r0, r1, logits, rows))
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed");
        /* estimates of this chunk's sequences; logits become softmax(z/T) */
        for (int r = r0; r < r1 && !rc; r++) {
            float *z = logits + (size_t)(r - r0) * V;
            logp[r] = row_logp(z, V, p->target[r], temp, z);
            size_t k = (size_t)p->seq[r] * G + p->tok[r];
            sq[p->seq[r]] += p->a[r] * logp[r];
            tk[k] += logp[r] / p->tok_count[k];
        }
        if (!rc)
            rc = grad(grad_ctx, s0, s1, sq, tk, dseq, dtok, err);
        /* dlogits = g (onehot - softmax(z/T)) / T, g = dLoss/dlogp of the row */
        bool any = false;
        for (int r = r0; r < r1 && !rc; r++) {
            float *z = logits + (size_t)(r - r0) * V;
            double g = row_grad(p, r, dseq, dtok);
            for (int v = 0; v < V; v++)
                z[v] = (float)(-g * z[v] / temp);
            z[p->target[r]] += (float)(g / temp);
            any |= g != 0;
        }
        if (!rc && any)
            bwd(model, logits);
        free(logits);
        free(rows);
        c0 = c1;
        r0 = r1;
    }
    if (!rc && seq_logp)
        memcpy(seq_logp, sq, sizeof *sq * (size_t)p->n_seq);
    if (!rc && tok_logp)
        memcpy(tok_logp, tk, sizeof *tk * (size_t)p->n_seq * G);
    free(logp);
    free(sq);
    free(tk);
    free(dseq);
    free(dtok);
    return rc;
}

int dllm_lik_plan_backward_logp(const dllm_lik_plan *p, dllm_logp_fn fwd,
                                dllm_backward_logp_fn bwd, void *model, int max_canvas,
                                dllm_lik_grad_fn grad, void *grad_ctx, double *seq_logp,
                                double *tok_logp, dllm_err *err)
{
    if (p->temperature != 1.0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "the loss gradient on the device scores at "
                            "temperature 1, not %g", p->temperature);
    if (max_canvas < 1)
        max_canvas = 1;
    const int G = p->G;
    size_t ns = (size_t)(p->n_seq ? p->n_seq : 1), nr = (size_t)(p->n_rows ? p->n_rows : 1);
    double *sq = dllm_calloc(ns, sizeof *sq), *dseq = dllm_calloc(ns, sizeof *dseq);
    double *tk = dllm_malloc(sizeof *tk * ns * G), *dtok = dllm_malloc(sizeof *dtok * ns * G);
    float *lp = dllm_malloc(sizeof *lp * nr), *g = dllm_malloc(sizeof *g * nr);
    int32_t *rows = dllm_malloc(sizeof *rows * nr);
    for (size_t k = 0; k < (size_t)p->n_seq * G; k++) {
        tk[k] = p->tok_count[k] ? 0 : NAN;
        dtok[k] = 0;
    }
    int rc = 0, c0 = 0, r0 = 0;
    while (c0 < p->n_canvas && !rc) {
        int c1, s0, s1, r1;
        backward_chunk(p, c0, r0, max_canvas, &c1, &s0, &s1, &r1);
        int n = r1 - r0;
        for (int r = r0; r < r1; r++)
            rows[r - r0] = p->row[r] - c0 * p->T;
        if (n && fwd(model, p->canvas + (size_t)c0 * p->T,
                     p->keymask ? p->keymask + (size_t)c0 * p->T : NULL, c1 - c0, p->T, rows,
                     p->target + r0, n, lp))
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed");
        for (int r = r0; r < r1 && !rc; r++) {
            double l = lp[r - r0];
            size_t k = (size_t)p->seq[r] * G + p->tok[r];
            sq[p->seq[r]] += p->a[r] * l;
            tk[k] += l / p->tok_count[k];
        }
        if (!rc)
            rc = grad(grad_ctx, s0, s1, sq, tk, dseq, dtok, err);
        bool any = false;
        for (int r = r0; r < r1 && !rc; r++) {
            double gr = row_grad(p, r, dseq, dtok);
            g[r - r0] = (float)gr;
            any |= gr != 0;
        }
        if (!rc && any)
            bwd(model, g);
        c0 = c1;
        r0 = r1;
    }
    if (!rc && seq_logp)
        memcpy(seq_logp, sq, sizeof *sq * (size_t)p->n_seq);
    if (!rc && tok_logp)
        memcpy(tok_logp, tk, sizeof *tk * (size_t)p->n_seq * G);
    free(sq), free(dseq), free(tk), free(dtok), free(lp), free(g), free(rows);
    return rc;
}
