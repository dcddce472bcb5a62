/* ar_sampler_device.c: dllm_ar_sample's loop with its state on the device
 * (ar_sampler_device.h):
 *   start      prompts up; records zeroed on the device; extend() over the prompts
 *   each step  per chunk of at most max_rows rows: head() -> the choice kernel (token,
 *              log-probs, length, finished flag; a finished row feeds EOS) -> (the
 *              finished flags down, when there is an EOS) -> extend() over the next
 *              tokens, unless every row has stopped or this was the last step
 *   the end    tokens, log-probs and lengths down; a row's slots after its length are
 *              EOS (0 without one), as on the CPU. */
#include "config.h"

#include "dllm/ar_sampler_device.h"

#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "kernels/cuda_ops.h"

int dllm_ar_sample_device(const dllm_ar_device_model *m, const int32_t *prompts,
                          const uint8_t *prompt_mask, int B, int P, const dllm_ar_cfg *c,
                          uint64_t seed, dllm_ar_rollout *out, dllm_err *err)
{
    memset(out, 0, sizeof *out);
    if (!m || !m->be || m->be->kind != DLLM_BACKEND_CUDA)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "ar device sampler: the model runs on the %s backend, not cuda",
                            m && m->be ? m->be->name : "(no)");
    int rc = dllm_ar_check(c, m->V, err);
    if (rc)
        return rc;
    if (c->temperature > 0 && c->top_p < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "ar device sampler: top_p %g: only the whole nucleus (top_p 1) runs "
                            "on the device", c->top_p);
    if (B < 1 || P < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "ar sampler: empty batch (B=%d, P=%d)", B, P);
    if (m->max_rows < 1 || !m->extend || !m->head)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "ar device sampler: the decoder is incomplete (max_rows %d)",
                            m->max_rows);
    for (size_t i = 0; i < (size_t)B * P; i++) /* the device's embedding does not check */
        if (prompts[i] < 0 || prompts[i] >= m->V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "ar sampler: prompt token %d at (%zu, %zu) outside the "
                                "vocabulary [0, %d)", prompts[i], i / (size_t)P, i % (size_t)P,
                                m->V);
    for (int b = 0; b < B && prompt_mask; b++) {
        int real = 0;
        for (int t = 0; t < P; t++)
            real += prompt_mask[(size_t)b * P + t] != 0;
        if (!real)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "ar sampler: prompt %d has no real token", b);
    }
    const int G = c->max_new_tokens, V = m->V;
    const size_t BG = (size_t)B * G;
    dllm_backend *be = m->be;
    int32_t *d_prompts = be->ops->alloc(be, sizeof(int32_t) * (size_t)B * P);
    int32_t *d_tok = be->ops->alloc(be, sizeof(int32_t) * BG);
    int32_t *d_next = be->ops->alloc(be, sizeof(int32_t) * (size_t)B);
    int32_t *d_len = be->ops->alloc(be, sizeof(int32_t) * (size_t)B);
    uint8_t *d_done = be->ops->alloc(be, (size_t)B);
    float *d_lp = be->ops->alloc(be, sizeof(float) * BG);
    float *d_lp1 = be->ops->alloc(be, sizeof(float) * BG);
    float *d_lg = be->ops->alloc(be, sizeof(float) * (size_t)m->max_rows * V);
    /* alloc zero-fills: records 0, lengths 0, no row finished */
    be->ops->upload(be, d_prompts, prompts, sizeof(int32_t) * (size_t)B * P);
    uint8_t *done = dllm_malloc((size_t)B);

    if (m->extend(m->ctx, d_prompts, prompt_mask, P))
        rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "ar device sampler: prefill failed");
    for (int g = 0; g < G && !rc; g++) {
        for (int r0 = 0; r0 < B && !rc; r0 += m->max_rows) {
            int n = B - r0 < m->max_rows ? B - r0 : m->max_rows;
            if (m->head(m->ctx, r0, n, d_lg)) {
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "ar device sampler: head failed at "
                                  "step %d", g);
                break;
            }
            dllm_cuda_ar_choose(d_tok, d_next, d_lp, d_lp1, d_len, d_done, d_lg, r0, n, V, G, g,
                                c->temperature, c->eos_id, seed, c->seq_offset, NULL);
        }
        if (rc || g == G - 1)
            break;
        if (c->eos_id >= 0) { /* the step's one synchronisation */
            be->ops->download(be, done, d_done, (size_t)B);
            int ndone = 0;
            for (int b = 0; b < B; b++)
                ndone += done[b] != 0;
            if (ndone == B)
                break;
        }
        if (m->extend(m->ctx, d_next, NULL, 1))
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "ar device sampler: decode step %d failed",
                              g + 1);
    }
    if (!rc) {
        out->B = B, out->P = P, out->G = G;
        out->tokens = dllm_malloc(sizeof(int32_t) * (size_t)B * (P + G));
        out->logp = dllm_malloc(sizeof(float) * BG);
        out->logp_t1 = dllm_malloc(sizeof(float) * BG);
        out->length = dllm_malloc(sizeof(int32_t) * (size_t)B);
        int32_t *gen = dllm_malloc(sizeof(int32_t) * BG);
        be->ops->download(be, gen, d_tok, sizeof(int32_t) * BG);
        be->ops->download(be, out->logp, d_lp, sizeof(float) * BG);
        be->ops->download(be, out->logp_t1, d_lp1, sizeof(float) * BG);
        be->ops->download(be, out->length, d_len, sizeof(int32_t) * (size_t)B);
        for (int b = 0; b < B; b++) {
            int32_t *row = out->tokens + (size_t)b * (P + G);
            memcpy(row, prompts + (size_t)b * P, sizeof(int32_t) * (size_t)P);
            for (int k = 0; k < G; k++)
                row[P + k] = k < out->length[b] ? gen[(size_t)b * G + k]
                                                : c->eos_id >= 0 ? c->eos_id : 0;
        }
        free(gen);
    }
    void *all[] = {d_prompts, d_tok, d_next, d_len, d_done, d_lp, d_lp1, d_lg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        be->ops->free(be, all[i]);
    free(done);
    return rc;
}

#else /* !HAVE_CUDA */

int dllm_ar_sample_device(const dllm_ar_device_model *m, const int32_t *prompts,
                          const uint8_t *prompt_mask, int B, int P, const dllm_ar_cfg *c,
                          uint64_t seed, dllm_ar_rollout *out, dllm_err *err)
{
    (void)m, (void)prompts, (void)prompt_mask, (void)B, (void)P, (void)c, (void)seed;
    if (out)
        memset(out, 0, sizeof *out);
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "ar device sampler: built without CUDA (configure --with-cuda)");
}

#endif
