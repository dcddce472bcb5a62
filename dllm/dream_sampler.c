/* dream_sampler.c: Dream's timestep-schedule sampler (dream_sampler.h). */
#include "dllm/dream_sampler.h"
#include "kernels/record/record.h"

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

static dllm_dream_step step_args(const dllm_sampler_cfg *c, const dllm_dream_cfg *d)
{
    return (dllm_dream_step){.alg = (int)d->alg, .temperature = c->temperature,
                             .top_p = d->top_p, .alg_temp = d->alg_temp, .top_k = d->top_k,
                             .exclude = c->mask_token == DLLM_MASK_TOKEN_FORBID ? c->mask_id : -1};
}

int32_t dllm_dream_token_dist(const float *logit, const dllm_sampler_cfg *c,
                              const dllm_dream_cfg *d, double *p, double *conf)
{
    dllm_dream_step a = step_args(c, d);
    void *work = dllm_malloc(dllm_dream_work_bytes(c->vocab));
    dllm_dream_probs(logit, c->vocab, &a, p, work);
    a.temperature = 0;
    int32_t x0 = dllm_dream_pick(p, c->vocab, &a, 0.5, conf);
    free(work);
    return x0;
}

/* ---- the one loop, over the backend's entries (kernels/backend.h) ----------------------
 * each step  the masked generated rows (denoise_rows) -> their count down (the step's one
 *            synchronisation: it ends the loop when nothing is masked) -> layers() once ->
 *            per chunk of rows head() and dream_draw -> dream_commit
 * the end    canvas and records down; n_masked_left counted on the host. */
typedef struct {
    int32_t *canvas, *rows, *row_pos, *seq_start, *n, *x0; /* (B,T) (B*G) (B*G) (B+1) (1) (B*G) */
    uint8_t *keymask, *take;                                /* (B,T) (B*G) */
    int64_t *row_seq;                                       /* (B*G) */
    double *key;                                            /* (B*G) */
    float *prob, *lg, *cprob;                               /* (B*G) (cap, V) (B,G) */
    int16_t *cstep;                                         /* (B,G) */
} dream_bufs;

static void *balloc(dllm_backend *be, size_t bytes)
{
    return be->ops->alloc(be, bytes ? bytes : 1);
}

int dllm_dream_sample_model(const dllm_device_logits *m, const int32_t *prompts,
                            const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                            const dllm_dream_cfg *d, uint64_t seed, dllm_rollout *out,
                            dllm_err *err)
{
    memset(out, 0, sizeof *out);
    if (dllm_dream_check(c, d, err))
        return err->code;
    if (!m || !m->be || !m->layers || !m->head || m->max_rows < 1)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "dream sampler: the model's view is incomplete");
    if (c->vocab != m->V)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "dream sampler: vocab %d is not the model's %d logits per row",
                            c->vocab, m->V);
    if (B < 0 || P < 0 || (long)B * (P + c->gen_length) > 0x7FFFFFFFL)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "dream sampler: canvas %d x %d", B,
                            P + c->gen_length);
    dllm_backend *be = m->be;
    const int G = c->gen_length, T = P + G, V = c->vocab, S = c->steps;
    uint8_t *keymask = dllm_rollout_start(out, prompts, prompt_mask, B, P, G, c->mask_id);
    if (B == 0) {
        free(keymask);
        return 0;
    }
    const size_t nr = (size_t)B * G;
    dream_bufs q = {0};
    q.canvas = balloc(be, sizeof(int32_t) * (size_t)B * T);
    q.keymask = balloc(be, (size_t)B * T);
    q.rows = balloc(be, sizeof(int32_t) * nr);
    q.row_seq = balloc(be, sizeof(int64_t) * nr);
    q.row_pos = balloc(be, sizeof(int32_t) * nr);
    q.seq_start = balloc(be, sizeof(int32_t) * (size_t)(B + 1));
    q.n = balloc(be, sizeof(int32_t));
    q.x0 = balloc(be, sizeof(int32_t) * nr);
    q.take = balloc(be, nr);
    q.key = balloc(be, sizeof(double) * nr);
    q.prob = balloc(be, sizeof(float) * nr);
    q.cstep = balloc(be, sizeof(int16_t) * nr);
    q.cprob = balloc(be, sizeof(float) * nr);
    be->ops->upload(be, q.canvas, out->tokens, sizeof(int32_t) * (size_t)B * T);
    be->ops->upload(be, q.keymask, keymask, (size_t)B * T);
    be->ops->upload(be, q.cstep, out->commit_step, sizeof(int16_t) * nr);
    be->ops->upload(be, q.cprob, out->commit_prob, sizeof(float) * nr);
    size_t cap = 0; /* logits rows held */
    float *ts = dllm_malloc(sizeof *ts * (size_t)(S + 1));
    timesteps(ts, S + 1, (float)d->eps);
    dllm_dream_step a = step_args(c, d);
    a.seed = seed;
    int rc = 0;
    int left = G; /* on a backend that counts nothing (plan's recording): the schedule's */

    for (int i = 0; i < S && !rc; i++) {
        be->ops->denoise_rows(be, q.rows, NULL, q.row_seq, q.row_pos, q.seq_start, q.n, q.canvas,
                              B, T, P, T, -1, c->mask_id, c->seq_offset);
        int32_t n = 0;
        be->ops->download(be, &n, q.n, sizeof n); /* the step's one synchronisation */
        if (dllm_record_is(be)) {
            n = B * left;
            left -= i == S - 1 ? left : (int)((float)left * (1.0f - ts[i + 1] / ts[i]));
        }
        if (n == 0)
            break;
        if (m->layers(m->ctx, q.canvas, q.keymask, B, T)) {
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed at step %d", i);
            break;
        }
        out->nfe++;
        a.step = (uint64_t)i;
        a.last = i == S - 1;
        a.ratio = 1.0f - ts[i + 1] / ts[i]; /* float32, as published */
        const int chunk = m->max_rows;
        const size_t need = (size_t)(n < chunk ? n : chunk);
        if (need > cap) {
            if (q.lg)
                be->ops->free(be, q.lg);
            q.lg = balloc(be, sizeof(float) * need * (size_t)V);
            cap = need;
        }
        for (int i0 = 0; i0 < n && !rc; i0 += chunk) {
            const int mc = n - i0 < chunk ? n - i0 : chunk;
            if (m->head(m->ctx, q.rows + i0, mc, q.lg)) {
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "forward pass failed at step %d", i);
                break;
            }
            be->ops->dream_draw(be, q.x0 + i0, q.key + i0, q.prob + i0, q.take + i0, q.lg,
                                q.row_seq + i0, q.row_pos + i0, mc, V, &a);
        }
        if (!rc)
            be->ops->dream_commit(be, q.canvas, q.cstep, q.cprob, q.x0, q.key, q.prob, q.take,
                                  q.row_pos, q.seq_start, B, T, P, G, c->mask_id, &a);
    }
    if (!rc) {
        be->ops->download(be, out->tokens, q.canvas, sizeof(int32_t) * (size_t)B * T);
        be->ops->download(be, out->commit_step, q.cstep, sizeof(int16_t) * nr);
        be->ops->download(be, out->commit_prob, q.cprob, sizeof(float) * nr);
        for (int b = 0; b < B; b++)
            for (int t = P; t < T; t++)
                out->n_masked_left[b] += out->tokens[(size_t)b * T + t] == c->mask_id;
    }
    void *all[] = {q.canvas, q.keymask, q.rows, q.row_seq, q.row_pos, q.seq_start, q.n, q.x0,
                   q.take, q.key, q.prob, q.lg, q.cstep, q.cprob};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        if (all[k])
            be->ops->free(be, all[k]);
    free(keymask);
    free(ts);
    if (rc)
        dllm_rollout_free(out);
    return rc;
}

int dllm_dream_sample(dllm_logits_fn fn, void *model, const int32_t *prompts,
                      const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                      const dllm_dream_cfg *d, uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    dllm_host_view h;
    dllm_device_logits v = dllm_host_view_make(&h, fn, model, NULL, c->vocab,
                                               (long)(B > 0 ? B : 1) * c->gen_length);
    return dllm_dream_sample_model(&v, prompts, prompt_mask, B, P, c, d, seed, out, err);
}
