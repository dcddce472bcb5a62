/* ar_sampler.c: autoregressive decoding with a KV cache, temperature and nucleus
 * (top-p) sampling, keyed randomness (contract in ar_sampler.h). One loop over a
 * decoder (the model and its cache, in the memory of the decoder's backend) and the
 * backend's ar_choose entry: the same code runs on the host and on a device. */
#include "dllm/ar_sampler.h"
#include "kernels/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dllm_ar_check(const dllm_ar_cfg *c, int vocab, dllm_err *err)
{
    if (c->max_new_tokens < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "max_new_tokens %d: must be at least 1",
                            c->max_new_tokens);
    if (!(c->temperature >= 0) || !isfinite(c->temperature))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "temperature %g: must be >= 0", c->temperature);
    if (!(c->top_p > 0 && c->top_p <= 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "top_p %g: must be in (0, 1]", c->top_p);
    if (c->eos_id < -1 || c->eos_id >= vocab)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "eos_id %d: outside the vocabulary [0, %d)",
                            c->eos_id, vocab);
    return 0;
}

void dllm_ar_rollout_free(dllm_ar_rollout *r)
{
    void *arrays[] = {r->tokens, r->logp, r->logp_t1, r->length};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        free(arrays[i]);
    memset(r, 0, sizeof *r);
}

int dllm_ar_sample_decoder(const dllm_ar_decoder *d, const int32_t *prompts,
                           const uint8_t *prompt_mask, int B, int P, const dllm_ar_cfg *c,
                           uint64_t seed, dllm_ar_rollout *out, dllm_err *err)
{
    memset(out, 0, sizeof *out);
    if (!d || !d->be || d->max_rows < 1 || !d->extend || !d->head)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "ar sampler: the decoder is incomplete");
    int rc = dllm_ar_check(c, d->V, err);
    if (rc)
        return rc;
    dllm_backend *be = d->be;
    const bool nucleus = c->temperature > 0 && c->top_p < 1;
    if (nucleus && !dllm_backend_supports(be, DLLM_OP_AR_NUCLEUS))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "ar sampler: top_p %g: the %s backend chooses only from the whole "
                            "nucleus (top_p 1)", c->top_p, be->name);
    if (B < 1 || P < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "ar sampler: empty batch (B=%d, P=%d)", B, P);
    for (size_t i = 0; i < (size_t)B * P; i++) /* a device's embedding does not check */
        if (prompts[i] < 0 || prompts[i] >= d->V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "ar sampler: prompt token %d at (%zu, %zu) outside the "
                                "vocabulary [0, %d)", prompts[i], i / (size_t)P, i % (size_t)P,
                                d->V);
    for (int b = 0; b < B && prompt_mask; b++) {
        int real = 0;
        for (int t = 0; t < P; t++)
            real += prompt_mask[(size_t)b * P + t] != 0;
        if (!real)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "ar sampler: prompt %d has no real token", b);
    }
    const int G = c->max_new_tokens, V = d->V;
    const size_t BG = (size_t)B * G;
    int32_t *d_prompts = be->ops->alloc(be, sizeof(int32_t) * (size_t)B * P);
    int32_t *d_tok = be->ops->alloc(be, sizeof(int32_t) * BG);    // (B, G)
    int32_t *d_next = be->ops->alloc(be, sizeof(int32_t) * (size_t)B);
    int32_t *d_len = be->ops->alloc(be, sizeof(int32_t) * (size_t)B);
    uint8_t *d_done = be->ops->alloc(be, (size_t)B);
    float *d_lp = be->ops->alloc(be, sizeof(float) * BG);         // (B, G)
    float *d_lp1 = be->ops->alloc(be, sizeof(float) * BG);        // (B, G)
    float *d_lg = be->ops->alloc(be, sizeof(float) * (size_t)d->max_rows * V); // (rows, V)
    /* alloc zero-fills: records 0, lengths 0, no row finished */
    be->ops->upload(be, d_prompts, prompts, sizeof(int32_t) * (size_t)B * P);
    uint8_t *done = dllm_malloc((size_t)B);

    rc = d->extend(d->ctx, d_prompts, prompt_mask, P, err);
    for (int g = 0; g < G && !rc; g++) {
        for (int r0 = 0; r0 < B && !rc; r0 += d->max_rows) {
            int n = B - r0 < d->max_rows ? B - r0 : d->max_rows;
            rc = d->head(d->ctx, r0, n, d_lg, err);
            if (rc)
                break;
            if (nucleus)
                be->ops->ar_choose_nucleus(be, d_tok, d_next, d_lp, d_lp1, d_len, d_done, d_lg,
                                           r0, n, V, G, g, c->temperature, c->top_p, c->eos_id,
                                           seed, c->seq_offset);
            else
                be->ops->ar_choose(be, d_tok, d_next, d_lp, d_lp1, d_len, d_done, d_lg, r0, n,
                                   V, G, g, c->temperature, c->eos_id, seed, c->seq_offset);
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
        rc = d->extend(d->ctx, d_next, NULL, 1, err);
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
        /* a row's slots after its first EOS: EOS (0 without one), log-probs 0 */
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

int dllm_ar_sample(dllm_tf *m, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                   int P, const dllm_ar_cfg *c, uint64_t seed, dllm_ar_rollout *out,
                   dllm_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = dllm_ar_check(c, dllm_tf_config(m)->vocab_size, err);
    if (rc)
        return rc;
    if (B < 1 || P < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "ar sampler: empty batch (B=%d, P=%d)", B, P);
    qwen3_kv_cache *kv = qwen3_cache_new(m, B, P + c->max_new_tokens);
    dllm_backend *dev = dllm_tf_device(m);
    const bool nucleus = c->temperature > 0 && c->top_p < 1;
    dllm_ar_decoder d;
    if (!dev || !nucleus || dllm_backend_supports(dev, DLLM_OP_AR_NUCLEUS))
        rc = qwen3_decoder(m, kv, &d, err);
    else
        rc = qwen3_host_decoder(m, kv, &d, err);
    if (!rc)
        rc = dllm_ar_sample_decoder(&d, prompts, prompt_mask, B, P, c, seed, out, err);
    qwen3_cache_free(kv);
    return rc;
}
