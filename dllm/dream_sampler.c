/* dream_sampler.c: Dream's timestep-schedule sampler (dream_sampler.h). */
#include "dllm/dream_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const alg_names[] = {"origin", "maskgit_plus", "topk_margin", "entropy"};

dllm_dream_cfg dllm_dream_cfg_default(void)
{
    return (dllm_dream_cfg){.alg = DLLM_DREAM_ORIGIN, .eps = 1e-3, .alg_temp = 0, .top_p = 1,
                            .top_k = 0};
}

int dllm_dream_alg_parse(const char *s, dllm_dream_alg *out)
{
    for (int i = 0; s && i < 4; i++)
        if (!strcmp(s, alg_names[i])) {
            *out = (dllm_dream_alg)i;
            return 0;
        }
    return -1;
}

const char *dllm_dream_alg_name(dllm_dream_alg a)
{
    return (unsigned)a < 4 ? alg_names[a] : "?";
}

int dllm_dream_check(const dllm_sampler_cfg *c, const dllm_dream_cfg *d, dllm_err *err)
{
    if (c->gen_length <= 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--gen-length %d: must be positive", c->gen_length);
    if (c->steps <= 0 || c->steps > 32767)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--steps %d: must be in [1, 32767]", c->steps);
    if (!(c->temperature >= 0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--temperature %g: must be >= 0", c->temperature);
    if (c->vocab <= 1 || c->mask_id < 0 || c->mask_id >= c->vocab)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "mask id %d outside the vocabulary [0, %d)",
                            c->mask_id, c->vocab);
    if ((unsigned)d->alg > DLLM_DREAM_ENTROPY)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--alg: expected origin, maskgit_plus, topk_margin or entropy");
    if (!(d->eps > 0 && d->eps < 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--eps %g: must be in (0, 1)", d->eps);
    if (!(d->alg_temp >= 0) || !isfinite(d->alg_temp))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--alg-temp %g: must be >= 0", d->alg_temp);
    if (!(d->top_p > 0 && d->top_p <= 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--top-p %g: must be in (0, 1]", d->top_p);
    if (d->top_k < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--top-k %d: must be >= 0 (0: off)", d->top_k);
    return 0;
}

/* torch.linspace(1, eps, n) in float32: the first half counted up from the
 * start, the second half down from the end (ATen's CPU kernel). */
static void timesteps(float *ts, int n, float eps)
{
    const float start = 1.0f, end = eps, step = (end - start) / (float)(n - 1);
    for (int i = 0; i < n; i++)
        ts[i] = i < n / 2 ? start + step * (float)i : end - step * (float)(n - 1 - i);
}

/* Sort index by value descending (ties: lower id first), for top_p. */
static const double *g_sort_val;
static int cmp_desc(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    double x = g_sort_val[i], y = g_sort_val[j];
    return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

static int cmp_double_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

/* The token distribution of one row, as the published sample_tokens builds
 * it: p (V) = softmax of the filtered, tempered logits. */
static void token_probs(const float *logit, int V, const dllm_sampler_cfg *c,
                        const dllm_dream_cfg *d, double *p, int *idx, double *tmp)
{
    for (int v = 0; v < V; v++)
        p[v] = logit[v];
    if (c->mask_token == DLLM_MASK_TOKEN_FORBID)
        p[c->mask_id] = -INFINITY;
    if (c->temperature > 0)
        for (int v = 0; v < V; v++)
            p[v] /= c->temperature;
    if (d->top_p < 1) {
        /* remove tokens whose sorted cumulative probability exceeds top_p,
         * shifted by one so that the first one over it is kept */
        for (int v = 0; v < V; v++)
            idx[v] = v;
        g_sort_val = p;
        qsort(idx, (size_t)V, sizeof *idx, cmp_desc);
        double mx = p[idx[0]], z = 0;
        for (int v = 0; v < V; v++)
            z += exp(p[v] - mx);
        double cum = 0;
        bool prev_over = false;
        for (int j = 0; j < V; j++) {
            int v = idx[j];
            cum += exp(p[v] - mx) / z;
            bool over = cum > d->top_p;
            if (j > 0 && prev_over)
                p[v] = -INFINITY;
            prev_over = over;
        }
    }
    if (d->top_k > 0 && d->top_k < V) {
        memcpy(tmp, p, sizeof *tmp * (size_t)V);
        qsort(tmp, (size_t)V, sizeof *tmp, cmp_double_desc);
        double kth = tmp[d->top_k - 1];
        for (int v = 0; v < V; v++)
            if (p[v] < kth)
                p[v] = -INFINITY;
    }
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++)
        mx = p[v] > mx ? p[v] : mx;
    for (int v = 0; v < V; v++)
        z += (p[v] = exp(p[v] - mx));
    for (int v = 0; v < V; v++)
        p[v] /= z;
}

/* x0 (argmax, ties to the lowest id, or a draw with uniform u) and its confidence. */
static int32_t draw_x0(const double *p, int V, const dllm_sampler_cfg *c,
                       const dllm_dream_cfg *d, double u, double *conf)
{
    int32_t x0 = 0;
    if (c->temperature > 0) {
        double cum = 0;
        x0 = -1;
        for (int v = 0; v < V; v++)
            if (p[v] > 0) {
                cum += p[v];
                x0 = v;
                if (u < cum)
                    break;
            }
    } else {
        for (int v = 1; v < V; v++)
            if (p[v] > p[x0])
                x0 = v;
    }
    *conf = p[x0];
    if (d->alg == DLLM_DREAM_TOPK_MARGIN) {
        double t1 = -1, t2 = -1;
        for (int v = 0; v < V; v++)
            if (p[v] > t1) {
                t2 = t1;
                t1 = p[v];
            } else if (p[v] > t2) {
                t2 = p[v];
            }
        *conf = t1 - t2;
    } else if (d->alg == DLLM_DREAM_ENTROPY) {
        double h = 0;
        for (int v = 0; v < V; v++)
            h += p[v] * log(p[v] + 1e-10);
        *conf = h;
    }
    return x0;
}

int32_t dllm_dream_token_dist(const float *logit, const dllm_sampler_cfg *c,
                              const dllm_dream_cfg *d, double *p, double *conf)
{
    const int V = c->vocab;
    int *idx = dllm_malloc(sizeof *idx * (size_t)V);
    double *tmp = dllm_malloc(sizeof *tmp * (size_t)V);
    token_probs(logit, V, c, d, p, idx, tmp);
    dllm_sampler_cfg greedy = *c;
    greedy.temperature = 0;
    int32_t x0 = draw_x0(p, V, &greedy, d, 0.5, conf);
    free(idx);
    free(tmp);
    return x0;
}

typedef struct {
    int pos;    /* canvas position */
    int row;    /* index into the step's logits */
    int32_t x0;
    double key; /* ranking key: confidence, or confidence / alg_temp + Gumbel */
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static void commit(const dllm_sampler_cfg *c, int32_t *xb, int16_t *cs, float *cp, int P,
                   int pos, int32_t x0, const float *logit, int step)
{
    xb[pos] = x0;
    if (x0 == c->mask_id)
        return; /* a committed mask id leaves the position masked */
    cs[pos - P] = (int16_t)step;
    cp[pos - P] = (float)dllm_sampler_prob(logit, c->vocab, x0);
}

int dllm_dream_sample(dllm_logits_fn fn, void *model, const int32_t *prompts,
                      const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                      const dllm_dream_cfg *d, uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    if (dllm_dream_check(c, d, err))
        return err->code;
    const int G = c->gen_length, T = P + G, V = c->vocab, S = c->steps;
    uint8_t *keymask = dllm_rollout_start(out, prompts, prompt_mask, B, P, G, c->mask_id);
    int32_t *x = out->tokens;
    float *ts = dllm_malloc(sizeof *ts * (size_t)(S + 1));
    timesteps(ts, S + 1, (float)d->eps);
    int32_t *rows = dllm_malloc(sizeof *rows * ((size_t)B * G + 1));
    float *logits = dllm_malloc(sizeof *logits * ((size_t)B * G + 1) * (size_t)V);
    double *p = dllm_malloc(sizeof *p * (size_t)V), *tmp = dllm_malloc(sizeof *tmp * (size_t)V);
    int *idx = dllm_malloc(sizeof *idx * (size_t)V);
    cand *cd = dllm_malloc(sizeof *cd * (size_t)G);
    int rc = 0;

    for (int i = 0; i < S && !rc; i++) {
        int n = 0;
        for (int b = 0; b < B; b++)
            for (int t = P; t < T; t++)
                if (x[(size_t)b * T + t] == c->mask_id)
                    rows[n++] = b * T + t;
        if (n == 0)
            break;
        if (fn(model, x, keymask, B, T, rows, n, logits)) {
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed at step %d", i);
            break;
        }
        const bool last = i == S - 1;
        const float ratio = 1.0f - ts[i + 1] / ts[i]; /* float32, as published */
        for (int r0 = 0; r0 < n;) {
            const int b = rows[r0] / T;
            int r1 = r0;
            while (r1 < n && rows[r1] / T == b)
                r1++;
            const uint64_t gb = c->seq_offset + (uint64_t)b;
            dllm_rng tok_rng = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)i, 4 * gb);
            dllm_rng tr_rng = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)i, 4 * gb + 1);
            dllm_rng gum_rng = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)i, 4 * gb + 2);
            int32_t *xb = x + (size_t)b * T;
            int16_t *cs = out->commit_step + (size_t)b * G;
            float *cp = out->commit_prob + (size_t)b * G;
            const int nm = r1 - r0;
            if (d->alg == DLLM_DREAM_ORIGIN) {
                for (int r = r0; r < r1; r++) {
                    const int pos = rows[r] % T;
                    tr_rng.ctr = (uint64_t)pos;
                    if (!last && !(dllm_rng_uniform(&tr_rng) < (double)ratio))
                        continue;
                    const float *lg = logits + (size_t)r * V;
                    token_probs(lg, V, c, d, p, idx, tmp);
                    tok_rng.ctr = (uint64_t)pos;
                    double conf;
                    int32_t x0 = draw_x0(p, V, c, d, dllm_rng_uniform(&tok_rng), &conf);
                    commit(c, xb, cs, cp, P, pos, x0, lg, i);
                }
            } else {
                for (int r = r0; r < r1; r++) {
                    const int pos = rows[r] % T;
                    token_probs(logits + (size_t)r * V, V, c, d, p, idx, tmp);
                    tok_rng.ctr = (uint64_t)pos;
                    double conf;
                    cand *e = &cd[r - r0];
                    e->x0 = draw_x0(p, V, c, d, dllm_rng_uniform(&tok_rng), &conf);
                    e->pos = pos;
                    e->row = r;
                    e->key = conf;
                    if (d->alg_temp > 0) { /* Gumbel-top-k: k draws without replacement */
                        gum_rng.ctr = (uint64_t)pos;
                        e->key = conf / d->alg_temp - log(-log(dllm_rng_uniform(&gum_rng)));
                    }
                }
                const int k = last ? nm : (int)((float)nm * ratio);
                qsort(cd, (size_t)nm, sizeof *cd, cmp_cand);
                for (int j = 0; j < k && j < nm; j++)
                    commit(c, xb, cs, cp, P, cd[j].pos, cd[j].x0, logits + (size_t)cd[j].row * V, i);
            }
            r0 = r1;
        }
    }
    for (int b = 0; b < B; b++)
        for (int t = P; t < T; t++)
            out->n_masked_left[b] += x[(size_t)b * T + t] == c->mask_id;
    free(keymask);
    free(ts);
    free(rows);
    free(logits);
    free(p);
    free(tmp);
    free(idx);
    free(cd);
    if (rc)
        dllm_rollout_free(out);
    return rc;
}
