#include "dllm/sampler.h"

#include "kernels/backend.h"
#include "kernels/record/record.h"
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
    if (c->cache_refresh < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "cache_refresh %d: expected 0 (off) or a "
                            "number of steps >= 1", c->cache_refresh);
    if (c->cache_refresh > 0 && c->cache == DLLM_CACHE_NONE)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "cache_refresh %d: refreshes a cache; "
                            "cache is none", c->cache_refresh);
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

/* ---- the one loop, over the backend's denoising entries (kernels/backend.h) ------------
 * block start  the block's masked count per sequence (the schedule's input)
 * each step    committable rows -> (their count down: the step's one synchronisation,
 *              which sizes the head() calls and ends a threshold's block) -> the forward
 *              once over the canvas (fill or cached step under a cache) -> per chunk of
 *              rows: head() (cond and uncond rows in one call under CFG), CFG and the EOS
 *              logit, x0, prob and the random confidence -> per sequence the commit, its
 *              records and its step count
 * the end      canvas and records down; n_masked_left counted on the host.
 * The unconditional copy of the canvas (prompt masked) is kept in step with the
 * conditional one by the commit, so no step copies the canvas. */

/* The buffers of one call in the backend's memory, freed together. */
typedef struct {
    int32_t *canvas;    /* (BB, T) */
    uint8_t *keymask;   /* (BB, T) */
    int32_t *rows;      /* (B*G) flat cond rows of the step */
    int32_t *rows_u;    /* (B*G) the uncond copy's rows (CFG only) */
    int32_t *hrows;     /* (2 * chunk) a chunk's cond then uncond rows (CFG only) */
    int64_t *row_seq;   /* (B*G) global sequence index */
    int32_t *row_pos;   /* (B*G) canvas position */
    int32_t *seq_start; /* (B+1) */
    int32_t *n;         /* (1) committable rows of the step */
    int32_t *nm;        /* (B) masked count of the current block at its start */
    int32_t *sstep;     /* (B) each sequence's step count (the noise key, the record) */
    int32_t *x0;        /* (B*G) */
    float *prob;        /* (B*G) */
    double *rand_conf;  /* (B*G) random remasking only */
    float *lg;          /* (cap_rows, V) a chunk's logits, cond rows then uncond ones */
    int16_t *cstep;     /* (B, G) */
    float *cprob;       /* (B, G) */
} loop_bufs;

static void bufs_free(dllm_backend *be, loop_bufs *d)
{
    void *all[] = {d->canvas, d->keymask, d->rows, d->rows_u, d->hrows, d->row_seq, d->row_pos,
                   d->seq_start, d->n, d->nm, d->sstep, d->x0, d->prob, d->rand_conf, d->lg,
                   d->cstep, d->cprob};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i])
            be->ops->free(be, all[i]);
    memset(d, 0, sizeof *d);
}

static void *balloc(dllm_backend *be, size_t bytes)
{
    return be->ops->alloc(be, bytes ? bytes : 1);
}

/* The start (dllm_rollout_start's canvas and records; the uncond copy with the prompt
 * masked too, the key mask twice under CFG), uploaded once. */
static void upload_start(dllm_backend *be, loop_bufs *d, const int32_t *prompts,
                         const uint8_t *prompt_mask, int B, int P, int T, int G, bool cfg,
                         int mask_id)
{
    const int BB = cfg ? 2 * B : B;
    int32_t *x = dllm_malloc(sizeof *x * (size_t)BB * T);
    uint8_t *km = dllm_malloc((size_t)BB * T);
    for (int bb = 0; bb < BB; bb++) {
        const int b = bb % B;
        for (int t = 0; t < T; t++) {
            x[(size_t)bb * T + t] = t < P && bb < B ? prompts[(size_t)b * P + t] : mask_id;
            km[(size_t)bb * T + t] = t < P && prompt_mask ? prompt_mask[(size_t)b * P + t] : 1;
        }
    }
    be->ops->upload(be, d->canvas, x, sizeof *x * (size_t)BB * T);
    be->ops->upload(be, d->keymask, km, (size_t)BB * T);
    int16_t *cs = dllm_malloc(sizeof *cs * (size_t)B * G);
    float *cp = dllm_malloc(sizeof *cp * (size_t)B * G);
    for (size_t i = 0; i < (size_t)B * G; i++) {
        cs[i] = -1;
        cp[i] = NAN;
    }
    be->ops->upload(be, d->cstep, cs, sizeof *cs * (size_t)B * G);
    be->ops->upload(be, d->cprob, cp, sizeof *cp * (size_t)B * G);
    free(x);
    free(km);
    free(cs);
    free(cp);
}

/* One step's heads and draws over the n rows, after the forward: per chunk, head() (the
 * uncond rows beside the cond ones under CFG), the logits fix and the draw. */
static int step_draw(const dllm_device_logits *m, loop_bufs *d, size_t *cap_rows, int n,
                     bool cfg, const dllm_sampler_cfg *c, uint64_t seed)
{
    dllm_backend *be = m->be;
    const int V = c->vocab, per = cfg ? 2 : 1;
    const int chunk = m->max_rows / per > 0 ? m->max_rows / per : 1;
    const float w = (float)(c->cfg_scale + 1.0); /* the weight rounded once */
    const int eos = c->logits_eos_inf ? c->eos_id : -1;
    const int excl = c->mask_token == DLLM_MASK_TOKEN_FORBID ? c->mask_id : -1;
    const size_t need = (size_t)per * (size_t)(n < chunk ? n : chunk);
    if (need > *cap_rows) {
        if (d->lg)
            be->ops->free(be, d->lg);
        d->lg = balloc(be, sizeof(float) * need * (size_t)V);
        *cap_rows = need;
    }
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int mc = n - i0 < chunk ? n - i0 : chunk;
        float *lu = d->lg + (size_t)mc * V;
        if (!cfg) {
            if (m->head(m->ctx, d->rows + i0, mc, d->lg))
                return -1;
        } else if (2 * mc <= m->max_rows) { /* one call: one forward on the host */
            be->ops->copy(be, d->hrows, d->rows + i0, sizeof(int32_t) * (size_t)mc);
            be->ops->copy(be, d->hrows + mc, d->rows_u + i0, sizeof(int32_t) * (size_t)mc);
            if (m->head(m->ctx, d->hrows, 2 * mc, d->lg))
                return -1;
        } else if (m->head(m->ctx, d->rows + i0, mc, d->lg) ||
                   m->head(m->ctx, d->rows_u + i0, mc, lu)) {
            return -1;
        }
        be->ops->denoise_logits_fix(be, d->lg, cfg ? lu : NULL, mc, V, w, eos);
        be->ops->denoise_draw(be, d->x0 + i0, d->prob + i0,
                              d->rand_conf ? d->rand_conf + i0 : NULL, d->lg, d->row_seq + i0,
                              d->row_pos + i0, mc, V, c->temperature, seed, d->sstep,
                              c->seq_offset, excl);
    }
    return 0;
}

/* The positions of a block still masked at its step s under the plain schedule (the
 * block's tokens spread evenly over its spb steps, the remainder to the first ones). */
static int sched_left(int block_length, int spb, int s)
{
    const int base = block_length / spb, rem = block_length % spb;
    int left = block_length;
    for (int k = 0; k < s && k < spb; k++)
        left -= base + (k < rem);
    return left;
}

int dllm_sample_model(const dllm_device_logits *m, const int32_t *prompts,
                      const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                      uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    memset(out, 0, sizeof *out);
    if (dllm_sampler_check(c, err))
        return err->code;
    if (!m || !m->be)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "sampler: the model has no backend");
    const bool cached = c->cache != DLLM_CACHE_NONE, thr = c->threshold > 0;
    if (cached && (!m->fill || !m->step))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "cache %s: this model keeps no block cache",
                            dllm_cache_name(c->cache));
    if (c->vocab != m->V)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "sampler: vocab %d is not the model's %d logits per row", c->vocab,
                            m->V);
    if (m->max_rows < 1 || !m->layers || !m->head)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "sampler: the model's view is incomplete (max_rows %d)", m->max_rows);
    if (B < 0 || P < 0)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "sampler: B=%d P=%d", B, P);
    const int G = c->gen_length, T = P + G;
    const int nblocks = G / c->block_length, spb = c->steps / nblocks;
    const bool cfg = c->cfg_scale > 0;
    const int BB = cfg ? 2 * B : B;
    if ((long)BB * T > 0x7FFFFFFFL)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "sampler: canvas %d x %d too large", BB, T);
    out->B = B;
    out->P = P;
    out->G = G;
    out->tokens = dllm_malloc(sizeof *out->tokens * (size_t)(B > 0 ? B : 1) * (size_t)T);
    out->commit_step = dllm_malloc(sizeof *out->commit_step * (size_t)(B > 0 ? B : 1) * G);
    out->commit_prob = dllm_malloc(sizeof *out->commit_prob * (size_t)(B > 0 ? B : 1) * G);
    out->n_masked_left = dllm_calloc((size_t)(B > 0 ? B : 1), sizeof *out->n_masked_left);
    if (B == 0)
        return 0;

    dllm_backend *be = m->be;
    const size_t nr = (size_t)B * G;
    const int chunk = cfg ? (m->max_rows / 2 > 0 ? m->max_rows / 2 : 1) : m->max_rows;
    loop_bufs d = {0};
    d.canvas = balloc(be, sizeof(int32_t) * (size_t)BB * T);
    d.keymask = balloc(be, (size_t)BB * T);
    d.rows = balloc(be, sizeof(int32_t) * nr);
    d.rows_u = cfg ? balloc(be, sizeof(int32_t) * nr) : NULL;
    d.hrows = cfg ? balloc(be, sizeof(int32_t) * 2 * (size_t)(chunk < (int)nr ? chunk : (int)nr))
                  : NULL;
    d.row_seq = balloc(be, sizeof(int64_t) * nr);
    d.row_pos = balloc(be, sizeof(int32_t) * nr);
    d.seq_start = balloc(be, sizeof(int32_t) * (size_t)(B + 1));
    d.n = balloc(be, sizeof(int32_t));
    d.nm = balloc(be, sizeof(int32_t) * (size_t)B);
    d.sstep = balloc(be, sizeof(int32_t) * (size_t)B); /* zero-filled: step 0 */
    d.x0 = balloc(be, sizeof(int32_t) * nr);
    d.prob = balloc(be, sizeof(float) * nr);
    d.rand_conf = c->remasking == REMASK_RANDOM ? balloc(be, sizeof(double) * nr) : NULL;
    d.cstep = balloc(be, sizeof(int16_t) * nr);
    d.cprob = balloc(be, sizeof(float) * nr);
    upload_start(be, &d, prompts, prompt_mask, B, P, T, G, cfg, c->mask_id);
    /* logits rows held: a block's worth to start with, more only when committed mask ids
     * left earlier positions masked */
    size_t cap_rows = 0;

    const bool eos_eot = c->confidence_eos_eot_inf;
    int rc = 0;
    for (int blk = 0; blk < nblocks && !rc; blk++) {
        const int lo = P + blk * c->block_length, hi = lo + c->block_length;
        be->ops->denoise_block_counts(be, d.nm, d.canvas, B, T, lo, hi, c->mask_id);
        /* the plain schedule: spb steps; the threshold's: until the block is unmasked (its
         * rows are those of the sequences whose block still holds a mask) */
        const int nsteps = thr ? c->block_length : spb;
        for (int s = 0; s < nsteps && !rc; s++) {
            /* a cached step sees the block alone; the fill (the block's first step, and every
             * cache_refresh-th), as a plain step, every masked position up to the block's end */
            const bool step_cached =
                cached && s > 0 && !(c->cache_refresh > 0 && s % c->cache_refresh == 0);
            be->ops->denoise_rows(be, d.rows, d.rows_u, d.row_seq, d.row_pos, d.seq_start, d.n,
                                  d.canvas, B, T, step_cached ? lo : P, hi, thr ? lo : -1,
                                  c->mask_id, c->seq_offset);
            int32_t n = 0;
            be->ops->download(be, &n, d.n, sizeof n); /* the step's one synchronisation */
            if (dllm_record_is(be)) /* it counts nothing (plan's recording): the schedule's */
                n = B * sched_left(c->block_length, spb, s);
            if (n == 0 && thr)
                break; /* every sequence's block is done */
            if (n > 0) {
                int frc = step_cached ? m->step(m->ctx, d.canvas, BB, T, lo,
                                                c->cache == DLLM_CACHE_DUAL ? hi : T)
                          : cached ? m->fill(m->ctx, d.canvas, d.keymask, BB, T)
                                   : m->layers(m->ctx, d.canvas, d.keymask, BB, T);
                out->nfe++;
                if (frc || step_draw(m, &d, &cap_rows, n, cfg, c, seed)) {
                    rc = dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                      "forward pass failed in block %d, step %d", blk, s);
                    break;
                }
            }
            /* with no rows only the step counts advance */
            be->ops->denoise_commit(be, d.canvas, d.cstep, d.cprob, d.x0, d.prob, d.rand_conf,
                                    d.row_pos, d.seq_start, d.nm, spb, s, d.sstep,
                                    thr ? c->threshold : 0, B, T, P, G, c->mask_id,
                                    eos_eot ? c->eos_id : -1, eos_eot ? c->eot_id : -1, cfg);
        }
    }
    if (!rc) {
        be->ops->download(be, out->tokens, d.canvas, sizeof *out->tokens * (size_t)B * T);
        be->ops->download(be, out->commit_step, d.cstep, sizeof *out->commit_step * nr);
        be->ops->download(be, out->commit_prob, d.cprob, sizeof *out->commit_prob * nr);
        for (int b = 0; b < B; b++)
            for (int t = P; t < T; t++)
                out->n_masked_left[b] += out->tokens[(size_t)b * T + t] == c->mask_id;
    }
    bufs_free(be, &d);
    if (rc)
        dllm_rollout_free(out);
    return rc;
}

/* ---- a host model (dllm_logits_fn, dllm_sampler_cache) as the loop's view ------------
 * On the CPU backend the loop's buffers are host memory, so the view defers the forward
 * to head(): layers(), fill() and step() note the canvas, and head() makes the logits of
 * its rows in one call of the host model, as many rows as the step has (max_rows covers
 * them all), so a step is one forward of the model, as ever. */
enum { HOST_PLAIN, HOST_FILL, HOST_STEP };
typedef dllm_host_view host_view;

static int hv_layers(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T)
{
    host_view *h = ctx;
    h->tokens = tokens;
    h->keymask = keymask;
    h->B = B, h->T = T, h->mode = HOST_PLAIN;
    return 0;
}

static int hv_fill(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T)
{
    host_view *h = ctx;
    hv_layers(ctx, tokens, keymask, B, T);
    h->mode = HOST_FILL;
    return 0;
}

static int hv_step(void *ctx, const int32_t *tokens, int B, int T, int lo, int hi)
{
    host_view *h = ctx;
    h->tokens = tokens;
    h->B = B, h->T = T, h->lo = lo, h->hi = hi;
    h->mode = HOST_STEP;
    return 0;
}

static int hv_head(void *ctx, const int32_t *rows, int n, float *logits)
{
    host_view *h = ctx;
    switch (h->mode) {
    case HOST_FILL:
        return h->cache->fill(h->cache->model, h->tokens, h->keymask, h->B, h->T, rows, n,
                              logits);
    case HOST_STEP:
        return h->cache->step(h->cache->model, h->tokens, h->keymask, h->B, h->T, h->lo, h->hi,
                              rows, n, logits);
    default:
        return h->fn(h->model, h->tokens, h->keymask, h->B, h->T, rows, n, logits);
    }
}

dllm_device_logits dllm_host_view_make(dllm_host_view *h, dllm_logits_fn fn, void *model,
                                      const dllm_sampler_cache *cache, int V, long max_rows)
{
    const bool have_cache = cache && cache->fill && cache->step;
    *h = (dllm_host_view){.fn = fn, .model = model, .cache = cache};
    return (dllm_device_logits){h, dllm_backend_cpu(), V,
                                max_rows < 1 ? 1 : max_rows < 0x7FFFFFFF ? (int)max_rows : 0x7FFFFFFF,
                                hv_layers, hv_head, have_cache ? hv_fill : NULL,
                                have_cache ? hv_step : NULL};
}

static int sample_host(dllm_logits_fn fn, void *model, const dllm_sampler_cache *cache,
                       const int32_t *prompts, const uint8_t *prompt_mask, int B, int P,
                       const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out,
                       dllm_err *err)
{
    dllm_host_view h;
    dllm_device_logits v = dllm_host_view_make(&h, fn, model, cache, c->vocab,
                                               2L * (B > 0 ? B : 1) * c->gen_length);
    return dllm_sample_model(&v, prompts, prompt_mask, B, P, c, seed, out, err);
}

int dllm_sample(dllm_logits_fn fn, void *model, const int32_t *prompts, const uint8_t *prompt_mask,
                int B, int P, const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out,
                dllm_err *err)
{
    return sample_host(fn, model, NULL, prompts, prompt_mask, B, P, c, seed, out, err);
}

int dllm_sample_cached(dllm_logits_fn fn, void *model, const dllm_sampler_cache *cache,
                       const int32_t *prompts, const uint8_t *prompt_mask, int B, int P,
                       const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out,
                       dllm_err *err)
{
    return sample_host(fn, model, cache, prompts, prompt_mask, B, P, c, seed, out, err);
}
