#include "dllm/sampler.h"

#include "kernels/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dllm_sampler_check(const dllm_sampler_cfg *c, dllm_err *err)
{
    if (c->gen_length <= 0 || c->block_length <= 0 || c->steps <= 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "gen_length, block_length and steps must be positive");
    if (c->gen_length % c->block_length)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "block_length %d must divide gen_length %d",
                            c->block_length, c->gen_length);
    int nb = c->gen_length / c->block_length;
    if (c->steps % nb)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "steps %d must be divisible by the number of blocks %d", c->steps, nb);
    if (c->steps / nb > c->block_length)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%d steps per block exceed block_length %d (some steps would commit nothing)",
                            c->steps / nb, c->block_length);
    if (c->steps > 32767)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "steps %d: at most 32767", c->steps);
    if (!(c->temperature >= 0) || !isfinite(c->temperature))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "temperature must be >= 0");
    if (c->cfg_scale < 0 || !isfinite(c->cfg_scale))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "cfg_scale must be >= 0");
    if (c->mask_token != DLLM_MASK_TOKEN_ALLOW && c->mask_token != DLLM_MASK_TOKEN_FORBID)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "mask_token must be allow or forbid");
    if (c->cache != DLLM_CACHE_NONE && c->cache != DLLM_CACHE_PREFIX && c->cache != DLLM_CACHE_DUAL)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "cache must be none, prefix or dual");
    if (c->threshold != 0 && !(c->threshold > 0 && c->threshold <= 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "threshold %g: expected a number in (0, 1]",
                            c->threshold);
    /* a block takes up to block_length steps under the threshold: the int16 step records */
    if (c->threshold != 0 && c->gen_length > 32767)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "gen_length %d: at most 32767 with a threshold",
                            c->gen_length);
    if (c->cache != DLLM_CACHE_NONE && c->cfg_scale > 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "cache %s: classifier-free guidance (cfg_scale %g) is not cached",
                            dllm_cache_name(c->cache), c->cfg_scale);
    return 0;
}

int dllm_cache_parse(const char *s, dllm_cache *out)
{
    if (!strcmp(s, "none"))
        *out = DLLM_CACHE_NONE;
    else if (!strcmp(s, "prefix"))
        *out = DLLM_CACHE_PREFIX;
    else if (!strcmp(s, "dual"))
        *out = DLLM_CACHE_DUAL;
    else
        return -1;
    return 0;
}

const char *dllm_cache_name(dllm_cache c)
{
    return c == DLLM_CACHE_PREFIX ? "prefix" : c == DLLM_CACHE_DUAL ? "dual" : "none";
}

int dllm_mask_token_parse(const char *s, dllm_mask_token *out)
{
    if (!strcmp(s, "allow"))
        *out = DLLM_MASK_TOKEN_ALLOW;
    else if (!strcmp(s, "forbid"))
        *out = DLLM_MASK_TOKEN_FORBID;
    else
        return -1;
    return 0;
}

const char *dllm_mask_token_name(dllm_mask_token m)
{
    return m == DLLM_MASK_TOKEN_FORBID ? "forbid" : "allow";
}

int dllm_completion_length(const int32_t *gen, int G, int eos_id)
{
    for (int i = 0; i < G; i++)
        if (gen[i] == eos_id)
            return i + 1;
    return G;
}

void dllm_rollout_free(dllm_rollout *r)
{
    void *arrays[] = {r->tokens, r->commit_step, r->commit_prob, r->n_masked_left};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        free(arrays[i]);
    memset(r, 0, sizeof *r);
}

uint8_t *dllm_rollout_start(dllm_rollout *out, const int32_t *prompts, const uint8_t *prompt_mask,
                            int B, int P, int G, int mask_id)
{
    const int T = P + G;
    memset(out, 0, sizeof *out);
    out->B = B;
    out->P = P;
    out->G = G;
    int32_t *x = out->tokens = dllm_malloc(sizeof *x * (size_t)B * (size_t)T);
    out->commit_step = dllm_malloc(sizeof *out->commit_step * (size_t)B * G);
    out->commit_prob = dllm_malloc(sizeof *out->commit_prob * (size_t)B * G);
    out->n_masked_left = dllm_calloc((size_t)(B > 0 ? B : 1), sizeof *out->n_masked_left);
    uint8_t *keymask = dllm_malloc((size_t)B * (size_t)T + 1);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            x[(size_t)b * T + t] = t < P ? prompts[(size_t)b * P + t] : mask_id;
            keymask[(size_t)b * T + t] = t < P && prompt_mask ? prompt_mask[(size_t)b * P + t] : 1;
        }
    for (size_t i = 0; i < (size_t)B * G; i++) {
        out->commit_step[i] = -1;
        out->commit_prob[i] = NAN;
    }
    return keymask;
}

typedef struct {
    int row;        /* index into the step's logits */
    int pos;        /* canvas position */
    int32_t x0;
    double conf;
    float prob;
} candidate;

/* Sort: confidence descending, then position ascending (ties to the lowest index). */
static int cmp_candidate(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->conf > y->conf)
        return -1;
    if (x->conf < y->conf)
        return 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* The rows the model is asked for at one step: every position of [lo, hi) still
 * masked, lo = P (every generated position up to the current block's end; positions
 * of earlier blocks are masked only after a committed mask id) or, in a cached step,
 * the block's start; sequences with active[b] == 0 are left out (active NULL: none).
 * rows: flat b*T + t, in sequence then position order; row_seq: b. Returns their
 * count. */
static int committable_rows(const int32_t *x, int B, int T, int lo, int hi, int mask_id,
                            const uint8_t *active, int32_t *rows, int *row_seq)
{
    int n = 0;
    for (int b = 0; b < B; b++)
        for (int t = lo; t < hi && (!active || active[b]); t++)
            if (x[(size_t)b * T + t] == mask_id) {
                rows[n] = b * T + t;
                row_seq[n++] = b;
            }
    return n;
}

/* x0 and confidence of committable row i (logits at logits + i*V; sequence b =
 * row_seq[i]). Each row's noise is keyed by its sequence and position alone, so the
 * rows are independent and are drawn in parallel with the same results. */
static void draw_row(const dllm_sampler_cfg *c, uint64_t seed, int gstep, int T,
                     const int32_t *rows, const int *row_seq, int i, const float *logits,
                     candidate *cd)
{
    const int V = c->vocab;
    const int exclude = c->mask_token == DLLM_MASK_TOKEN_FORBID ? c->mask_id : -1;
    const int b = row_seq[i];
    const uint64_t gb = c->seq_offset + (uint64_t)b;
    const float *lg = logits + (size_t)i * V;
    int pos = rows[i] - b * T;
    dllm_rng noise = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)gstep, 2 * gb);
    cd->row = i;
    cd->pos = pos;
    cd->x0 = dllm_sampler_draw_x0_excl(lg, V, c->temperature, &noise, pos, exclude);
    cd->prob = (float)dllm_sampler_prob(lg, V, cd->x0);
    if (c->remasking == REMASK_LOW_CONFIDENCE) {
        cd->conf = cd->prob;
    } else {
        dllm_rng remask = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)gstep, 2 * gb + 1);
        remask.ctr = (uint64_t)pos;
        cd->conf = dllm_rng_uniform(&remask);
    }
    if (c->confidence_eos_eot_inf && (cd->x0 == c->eos_id || (c->eot_id >= 0 && cd->x0 == c->eot_id)))
        cd->conf = -INFINITY;
}

/* One sequence's commit: its drawn rows cand[0, nc) sorted by confidence, the k
 * most confident committed (k < 0: the threshold's rule, the first and every later one
 * whose confidence is >= c->threshold). A committed mask id leaves the position masked
 * and unrecorded (commit_step -1), as the reference writes the mask back. */
static void commit_sequence(const dllm_sampler_cfg *c, int gstep, int b, int T, int P, int k,
                            candidate *cand, int nc, int32_t *x, dllm_rollout *out)
{
    const int G = c->gen_length;
    qsort(cand, (size_t)nc, sizeof *cand, cmp_candidate);
    if (k < 0)
        for (k = nc > 0; k < nc && cand[k].conf >= c->threshold; k++)
            ;
    for (int j = 0; j < k && j < nc; j++) {
        if (cand[j].x0 == c->mask_id)
            continue; /* written back: still masked, competes again */
        x[(size_t)b * T + cand[j].pos] = cand[j].x0;
        size_t g = (size_t)b * G + (size_t)(cand[j].pos - P);
        out->commit_step[g] = (int16_t)gstep;
        out->commit_prob[g] = cand[j].prob;
    }
}

/* Whether sequence b still has a masked position in [lo, hi). */
static bool block_masked(const int32_t *x, int b, int T, int lo, int hi, int mask_id)
{
    for (int t = lo; t < hi; t++)
        if (x[(size_t)b * T + t] == mask_id)
            return true;
    return false;
}

static int sample(dllm_logits_fn fn, void *model, const dllm_sampler_cache *cache,
                  const int32_t *prompts, const uint8_t *prompt_mask, int B, int P,
                  const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    if (dllm_sampler_check(c, err))
        return err->code;
    const bool cached = c->cache != DLLM_CACHE_NONE, thr = c->threshold > 0;
    if (cached && (!cache || !cache->fill || !cache->step))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "cache %s: this model keeps no block cache",
                            dllm_cache_name(c->cache));
    const int G = c->gen_length, T = P + G, V = c->vocab;
    const int nblocks = G / c->block_length, spb = c->steps / nblocks;
    uint8_t *keymask = dllm_rollout_start(out, prompts, prompt_mask, B, P, G, c->mask_id);
    int32_t *x = out->tokens;
    const bool cfg = c->cfg_scale > 0;
    /* with CFG the batch doubles: sequences B..2B-1 are unconditional (prompt masked) */
    const int BB = cfg ? 2 * B : B;
    int32_t *canvas = cfg ? dllm_malloc(sizeof *canvas * (size_t)BB * T) : x;
    uint8_t *km2 = cfg ? dllm_malloc((size_t)BB * T) : keymask;
    if (cfg) {
        memcpy(km2, keymask, (size_t)B * T);
        memcpy(km2 + (size_t)B * T, keymask, (size_t)B * T);
    }
    int32_t *rows = dllm_malloc(sizeof *rows * (size_t)BB * G);
    int *row_seq = dllm_malloc(sizeof *row_seq * (size_t)B * G);
    /* logits for up to cap rows per pass (x2 with CFG); more than a block's
     * worth only when committed mask ids left earlier positions masked */
    size_t cap = (size_t)B * c->block_length;
    float *logits = dllm_malloc(sizeof *logits * (cap ? cap : 1) * (cfg ? 2 : 1) * (size_t)V);
    candidate *cand = dllm_malloc(sizeof *cand * (size_t)B * G);
    int *ntransfer = dllm_malloc(sizeof *ntransfer * (size_t)B * spb);
    /* per sequence: its step count (the global step of the plain sampler, where every
     * sequence steps together) and whether it takes part in the current step */
    int *sstep = dllm_calloc((size_t)(B > 0 ? B : 1), sizeof *sstep);
    uint8_t *active = dllm_malloc((size_t)(B > 0 ? B : 1));
    int rc = 0;

    for (int blk = 0; blk < nblocks && !rc; blk++) {
        const int lo = P + blk * c->block_length, hi = lo + c->block_length;
        /* commit counts per sequence: the block's masked count split evenly,
         * remainder first (masked positions left over from earlier blocks
         * compete for these commits but do not add to them) */
        for (int b = 0; b < B; b++) {
            int nm = 0;
            for (int t = lo; t < hi; t++)
                nm += x[(size_t)b * T + t] == c->mask_id;
            for (int s = 0; s < spb; s++)
                ntransfer[b * spb + s] = nm / spb + (s < nm % spb);
        }
        /* the plain schedule: spb steps; the threshold's: until the block is unmasked */
        const int nsteps = thr ? c->block_length : spb;
        for (int s = 0; s < nsteps && !rc; s++) {
            int nact = B;
            if (thr) {
                nact = 0;
                for (int b = 0; b < B; b++)
                    nact += active[b] = block_masked(x, b, T, lo, hi, c->mask_id);
                if (nact == 0)
                    break;
            }
            /* a cached step sees the block alone; the fill, as a plain step, every
             * masked position up to the block's end */
            const bool step_cached = cached && s > 0;
            int n = committable_rows(x, B, T, step_cached ? lo : P, hi, c->mask_id,
                                     thr ? active : NULL, rows, row_seq);
            if (n == 0 && !(cached && s == 0)) { /* (a block's fill always runs) */
                for (int b = 0; b < B; b++)
                    sstep[b] += !thr || active[b];
                continue;
            }
            if ((size_t)n > cap) {
                cap = (size_t)n;
                logits = dllm_realloc(logits, sizeof *logits * cap * (cfg ? 2 : 1) * (size_t)V);
            }
            if (cfg) {
                memcpy(canvas, x, sizeof *x * (size_t)B * T);
                memcpy(canvas + (size_t)B * T, x, sizeof *x * (size_t)B * T);
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < P; t++)
                        canvas[(size_t)(B + b) * T + t] = c->mask_id;
                for (int i = 0; i < n; i++)
                    rows[n + i] = rows[i] + B * T;
            }
            int frc;
            if (step_cached)
                frc = cache->step(cache->model, canvas, km2, BB, T, lo,
                                  c->cache == DLLM_CACHE_DUAL ? hi : T, rows, n, logits);
            else if (cached)
                frc = cache->fill(cache->model, canvas, km2, BB, T, rows, n, logits);
            else
                frc = fn(model, canvas, km2, BB, T, rows, cfg ? 2 * n : n, logits);
            out->nfe++;
            if (frc) {
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed at step %d",
                                  sstep[row_seq[0]]);
                break;
            }
            if (cfg) {
                const float w = (float)(c->cfg_scale + 1.0);
                for (size_t i = 0; i < (size_t)n * V; i++) {
                    float un = logits[(size_t)n * V + i];
                    logits[i] = un + w * (logits[i] - un);
                }
            }
            if (c->logits_eos_inf)
                for (int i = 0; i < n; i++)
                    logits[(size_t)i * V + c->eos_id] = -INFINITY;
            /* the float64 draws dominate the sampler: worth threads above a few rows */
#pragma omp parallel for schedule(dynamic, 4) if ((size_t)n * V > 262144)
            for (int i = 0; i < n; i++)
                draw_row(c, seed, sstep[row_seq[i]], T, rows, row_seq, i, logits, &cand[i]);
            for (int i0 = 0; i0 < n;) {
                int b = row_seq[i0], i1 = i0;
                while (i1 < n && row_seq[i1] == b)
                    i1++;
                commit_sequence(c, sstep[b], b, T, P, thr ? -1 : ntransfer[b * spb + s],
                                cand + i0, i1 - i0, x, out);
                i0 = i1;
            }
            for (int b = 0; b < B; b++)
                sstep[b] += !thr || active[b];
        }
    }
    for (int b = 0; b < B; b++)
        for (int t = P; t < T; t++)
            out->n_masked_left[b] += x[(size_t)b * T + t] == c->mask_id;
    if (cfg) {
        free(canvas);
        free(km2);
    }
    free(keymask);
    free(rows);
    free(row_seq);
    free(logits);
    free(cand);
    free(ntransfer);
    free(sstep);
    free(active);
    if (rc)
        dllm_rollout_free(out);
    return rc;
}

int dllm_sample(dllm_logits_fn fn, void *model, const int32_t *prompts, const uint8_t *prompt_mask,
                int B, int P, const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out,
                dllm_err *err)
{
    return sample(fn, model, NULL, prompts, prompt_mask, B, P, c, seed, out, err);
}

int dllm_sample_cached(dllm_logits_fn fn, void *model, const dllm_sampler_cache *cache,
                       const int32_t *prompts, const uint8_t *prompt_mask, int B, int P,
                       const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out,
                       dllm_err *err)
{
    return sample(fn, model, cache, prompts, prompt_mask, B, P, c, seed, out, err);
}
