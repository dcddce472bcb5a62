/* sampler_device.c: dllm_sample's loop with the canvas in a backend's memory
 * (sampler_device.h). The step is dllm/sampler.c's, split over the backend's denoising
 * entries (kernels/backend.h; on the CUDA backend the kernels of kernels/cuda/sampler.cu
 * and sampler_step.cu, on the CPU backend kernels/cpu/denoise.c):
 *   block start  masked count per sequence of the block (the schedule's input)
 *   each step    committable rows -> (download their count) -> layers() once over the
 *                canvas (cond and uncond copies under CFG) -> per chunk of at most
 *                max_rows rows: head() (twice under CFG), CFG and the EOS logit, x0,
 *                prob and the random confidence into per-row arrays -> per sequence the
 *                top-k commit and its records
 *   the end      canvas and records downloaded; n_masked_left counted on the host.
 * The unconditional copy of the canvas (prompt masked) is kept in step with the
 * conditional one by the commit kernel, so no step copies the canvas. */
#include "dllm/sampler_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The device buffers of one call, freed together. */
typedef struct {
    int32_t *canvas;    /* (BB, T) */
    uint8_t *keymask;   /* (BB, T) */
    int32_t *rows;      /* (B*G) flat cond rows of the step */
    int32_t *rows_u;    /* (B*G) the uncond copy's rows (CFG only) */
    int64_t *row_seq;   /* (B*G) global sequence index */
    int32_t *row_pos;   /* (B*G) canvas position */
    int32_t *seq_start; /* (B+1) */
    int32_t *n;         /* (1) committable rows of the step */
    int32_t *nm;        /* (B) masked count of the current block at its start */
    int32_t *x0;        /* (B*G) */
    float *prob;        /* (B*G) */
    double *rand_conf;  /* (B*G) random remasking only */
    float *lc, *lu;     /* (max_rows, V) cond / uncond logits of a chunk */
    int16_t *cstep;     /* (B, G) */
    float *cprob;       /* (B, G) */
} dev_bufs;

static void *dalloc(dllm_backend *be, size_t bytes)
{
    return be->ops->alloc(be, bytes ? bytes : 1);
}

static void bufs_free(dllm_backend *be, dev_bufs *d)
{
    void *all[] = {d->canvas, d->keymask, d->rows, d->rows_u, d->row_seq, d->row_pos,
                   d->seq_start, d->n, d->nm, d->x0, d->prob, d->rand_conf, d->lc, d->lu,
                   d->cstep, d->cprob};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i])
            be->ops->free(be, all[i]);
    memset(d, 0, sizeof *d);
}

/* The host-side start: canvas (prompt then masks; the uncond copy with the prompt masked
 * too), key mask (the prompt's, twice under CFG) and records (-1, NaN), uploaded once. */
static void upload_start(dllm_backend *be, dev_bufs *d, const int32_t *prompts,
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

/* One step's forward and draw: layers() once, then head() over the n rows in chunks,
 * each chunk's logits turned into x0 / prob / rand_conf at once. */
static int step_draw(const dllm_device_logits *m, dev_bufs *d, int n, int B, int T, bool cfg,
                     const dllm_sampler_cfg *c, uint64_t seed, int gstep)
{
    if (m->layers(m->ctx, d->canvas, d->keymask, cfg ? 2 * B : B, T))
        return -1;
    dllm_backend *be = m->be;
    const int V = c->vocab;
    const float w = (float)(c->cfg_scale + 1.0); /* as the CPU: the weight rounded once */
    const int eos = c->logits_eos_inf ? c->eos_id : -1;
    const int excl = c->mask_token == DLLM_MASK_TOKEN_FORBID ? c->mask_id : -1;
    for (int i0 = 0; i0 < n; i0 += m->max_rows) {
        const int mc = n - i0 < m->max_rows ? n - i0 : m->max_rows;
        if (m->head(m->ctx, d->rows + i0, mc, d->lc))
            return -1;
        if (cfg && m->head(m->ctx, d->rows_u + i0, mc, d->lu))
            return -1;
        be->ops->denoise_logits_fix(be, d->lc, cfg ? d->lu : NULL, mc, V, w, eos);
        be->ops->denoise_draw(be, d->x0 + i0, d->prob + i0,
                              d->rand_conf ? d->rand_conf + i0 : NULL, d->lc, d->row_seq + i0,
                              d->row_pos + i0, mc, V, c->temperature, seed, (uint64_t)gstep,
                              excl);
    }
    return 0;
}

int dllm_sample_device(const dllm_device_logits *m, const int32_t *prompts,
                       const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                       uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    if (dllm_sampler_check(c, err))
        return err->code;
    if (c->cache != DLLM_CACHE_NONE || c->threshold > 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "device sampler: %s: not on the device yet",
                            c->cache != DLLM_CACHE_NONE ? "cache" : "threshold");
    if (!m || !m->be)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "device sampler: the model has no backend");
    if (c->vocab != m->V)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "device sampler: vocab %d is not the model's %d logits per row",
                            c->vocab, m->V);
    if (m->max_rows < 1 || !m->layers || !m->head)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "device sampler: the model's device view is incomplete (max_rows %d)",
                            m->max_rows);
    if (B < 0 || P < 0)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "device sampler: B=%d P=%d", B, P);
    const int G = c->gen_length, T = P + G;
    const int nblocks = G / c->block_length, spb = c->steps / nblocks;
    const bool cfg = c->cfg_scale > 0;
    const int BB = cfg ? 2 * B : B;
    if ((long)BB * T > 0x7FFFFFFFL)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "device sampler: canvas %d x %d too large", BB,
                            T);
    memset(out, 0, sizeof *out);
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
    const size_t nr = (size_t)B * G, V = (size_t)c->vocab;
    dev_bufs d = {0};
    d.canvas = dalloc(be, sizeof(int32_t) * (size_t)BB * T);
    d.keymask = dalloc(be, (size_t)BB * T);
    d.rows = dalloc(be, sizeof(int32_t) * nr);
    d.rows_u = cfg ? dalloc(be, sizeof(int32_t) * nr) : NULL;
    d.row_seq = dalloc(be, sizeof(int64_t) * nr);
    d.row_pos = dalloc(be, sizeof(int32_t) * nr);
    d.seq_start = dalloc(be, sizeof(int32_t) * (size_t)(B + 1));
    d.n = dalloc(be, sizeof(int32_t));
    d.nm = dalloc(be, sizeof(int32_t) * (size_t)B);
    d.x0 = dalloc(be, sizeof(int32_t) * nr);
    d.prob = dalloc(be, sizeof(float) * nr);
    d.rand_conf = c->remasking == REMASK_RANDOM ? dalloc(be, sizeof(double) * nr) : NULL;
    d.lc = dalloc(be, sizeof(float) * (size_t)m->max_rows * V);
    d.lu = cfg ? dalloc(be, sizeof(float) * (size_t)m->max_rows * V) : NULL;
    d.cstep = dalloc(be, sizeof(int16_t) * nr);
    d.cprob = dalloc(be, sizeof(float) * nr);
    upload_start(be, &d, prompts, prompt_mask, B, P, T, G, cfg, c->mask_id);

    const bool eos_eot = c->confidence_eos_eot_inf;
    int rc = 0, gstep = 0;
    for (int blk = 0; blk < nblocks && !rc; blk++) {
        const int lo = P + blk * c->block_length, hi = lo + c->block_length;
        be->ops->denoise_block_counts(be, d.nm, d.canvas, B, T, lo, hi, c->mask_id);
        for (int s = 0; s < spb && !rc; s++, gstep++) {
            be->ops->denoise_rows(be, d.rows, d.rows_u, d.row_seq, d.row_pos, d.seq_start, d.n,
                                  d.canvas, B, T, P, hi, c->mask_id, c->seq_offset);
            int32_t n = 0;
            be->ops->download(be, &n, d.n, sizeof n); /* the step's one sync */
            if (n == 0)
                continue;
            if (step_draw(m, &d, n, B, T, cfg, c, seed, gstep)) {
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed at step %d", gstep);
                break;
            }
            be->ops->denoise_commit(be, d.canvas, d.cstep, d.cprob, d.x0, d.prob, d.rand_conf,
                                    d.row_pos, d.seq_start, d.nm, spb, s, gstep, B, T, P, G,
                                    c->mask_id, eos_eot ? c->eos_id : -1,
                                    eos_eot ? c->eot_id : -1, cfg);
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
