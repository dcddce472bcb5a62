/* qwen3_device.c: the KV cache of dllm/qwen3.c in a device backend's memory, for a model
 * on a device (dllm_tf_to_device).
 *
 * Each extend runs the core's layers (tf_layers_fwd, at the device view the host cache
 * would read: the rollout copy with qwen3_decode_at_rollout, else the trainer view) over
 * the B*T new tokens only. Its attention hook is the host cache's (qwen3_cache_attention:
 * the table's kv_append and attention_cached on the device's memory). The B last rows of the
 * extend are kept for the head, which runs a chunk of rows at a time into device memory
 * (qwen3_head_device) or, behind qwen3_extend, into a chunk downloaded to the host.
 *
 * What crosses per extend: the RoPE positions of the new tokens (B*T int32 up: the host
 * counts real tokens, as the host cache does), the new slots' key mask when one is given
 * (B*T bytes up), the head rows of a T > 1 extend (B int32 up); the tokens themselves
 * only behind qwen3_extend (host tokens). */
#include "config.h"

#include "dllm/ar_sampler.h"
#include "dllm/qwen3_impl.h"
#include "dllm/transformer_device_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qwen3_device_cache_init(const dllm_tf *m, qwen3_kv_cache *c)
{
    dllm_backend *be = m->dev->be;
    size_t slots = (size_t)c->B * c->max_len, n = (size_t)m->L * slots * m->KD;
    c->be = be;
    c->dk = be->ops->alloc(be, n * sizeof(float));
    c->dv = be->ops->alloc(be, n * sizeof(float));
    c->dmask = be->ops->alloc(be, slots);
    c->dnew = be->ops->alloc(be, slots);
    c->a.be = be;
}

void qwen3_device_cache_free(qwen3_kv_cache *c)
{
    dllm_backend *be = c->be;
    void *all[] = {c->dk, c->dv, c->dmask, c->dnew, c->dtok, c->dlg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i])
            be->ops->free(be, all[i]);
    c->dk = c->dv = NULL, c->dmask = c->dnew = NULL, c->dtok = NULL, c->dlg = NULL;
}

int qwen3_extend_device(dllm_tf *m, qwen3_kv_cache *c, const int32_t *d_tokens,
                        const uint8_t *keymask, int T, dllm_err *err)
{
    if (!c->be || !m->dev || c->be != m->dev->be)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_extend_device: the model and the cache are not on one device");
    if (!m->arch->causal || m->arch->shift_logits)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_extend_device: %s is not a causal model with unshifted logits",
                            m->arch->name);
    if (c->L != m->L || c->NKV != m->NKV || c->HD != m->HD)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_extend_device: the cache belongs to another model");
    if (T <= 0 || c->len + T > c->max_len)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_extend_device: %d new slots do not fit the cache (%d of %d "
                            "used)", T, c->len, c->max_len);
    dllm_backend *be = c->be;
    tf_device *d = m->dev;
    int B = c->B, N = B * T;
    tf_acts *a = &c->a;
    if (m->lora_rank && !a->xa) /* LoRA enabled since the buffers were sized */
        tf_acts_free(a);
    a->be = be;
    tf_acts_ensure(m, a, B, T, B, 1);
    a->B = B, a->T = T, a->N = N, a->R = B;
    /* positions on the host, as the host cache counts them (the staging of the model) */
    if (d->hcap < (size_t)N) {
        free(d->h_tok), free(d->h_pos), free(d->h_rows), free(d->h_mask);
        d->h_tok = dllm_malloc((size_t)N * sizeof(int32_t));
        d->h_pos = dllm_malloc((size_t)N * sizeof(int32_t));
        d->h_rows = dllm_malloc((size_t)N * sizeof(int32_t));
        d->h_mask = dllm_malloc((size_t)N);
        d->hcap = (size_t)N;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int n = b * T + t;
            uint8_t real = keymask ? keymask[n] != 0 : 1;
            c->mask[(size_t)b * c->max_len + c->len + t] = real;
            d->h_pos[n] = real ? c->npos[b]++ : 0;
        }
    tf_rope_grow(m, c->max_len); /* once: positions never reach max_len */
    be->ops->upload(be, a->pos, d->h_pos, (size_t)N * sizeof(int32_t));
    c->newmask = NULL;
    if (keymask) {
        be->ops->upload(be, c->dnew, keymask, (size_t)N);
        c->newmask = c->dnew;
    }
    be->ops->copy(be, a->tokens, d_tokens, (size_t)N * sizeof(int32_t));
    c->view = tf_device_view(m, m->decode_rollout);
    c->T = T;
    const float *x = tf_layers_fwd(m, a, c->view, false, qwen3_cache_attention, c);
    c->len += T;
    c->newmask = NULL;
    /* the B last rows for the head */
    size_t C = (size_t)m->C;
    if (T == 1)
        be->ops->copy(be, a->xr, x, (size_t)B * C * sizeof(float));
    else {
        for (int b = 0; b < B; b++)
            d->h_rows[b] = b * T + T - 1;
        be->ops->upload(be, a->hrows, d->h_rows, (size_t)B * sizeof(int32_t));
        be->ops->embedding_fwd(be, a->xr, a->hrows, x, B, m->C);
    }
    c->have_rows = true;
    return 0;
}

int qwen3_head_device(dllm_tf *m, qwen3_kv_cache *c, int r0, int n, float *d_logits,
                      dllm_err *err)
{
    if (!c->be || !c->have_rows || r0 < 0 || n <= 0 || r0 + n > c->B)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_head_device: rows [%d, %d) of %d%s", r0, r0 + n, c->B,
                            c->have_rows ? "" : " before any extend");
    size_t C = (size_t)m->C;
    tf_acts *a = &c->a;
    tf_head_fwd(m, c->view, a->xr + r0 * C, a->nf + r0 * C, a->rstdf + r0, n, d_logits);
    return 0;
}

int qwen3_device_extend_host(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens,
                             const uint8_t *keymask, int T, float *logits, dllm_err *err)
{
    dllm_backend *be = c->be;
    size_t N = (size_t)c->B * T, V = (size_t)m->V;
    if (!c->dtok)
        c->dtok = be->ops->alloc(be, (size_t)c->B * c->max_len * sizeof(int32_t));
    be->ops->upload(be, c->dtok, tokens, N * sizeof(int32_t));
    int rc = qwen3_extend_device(m, c, c->dtok, keymask, T, err);
    if (rc || !logits)
        return rc;
    if (!c->dlg) {
        c->lg_rows = dllm_tf_device_chunk_rows(m->V);
        c->lg_rows = c->lg_rows < c->B ? c->lg_rows : c->B;
        c->dlg = be->ops->alloc(be, (size_t)c->lg_rows * V * sizeof(float));
    }
    for (int r0 = 0; r0 < c->B && !rc; r0 += c->lg_rows) {
        int n = c->B - r0 < c->lg_rows ? c->B - r0 : c->lg_rows;
        rc = qwen3_head_device(m, c, r0, n, c->dlg, err);
        if (!rc)
            be->ops->download(be, logits + (size_t)r0 * V, c->dlg, (size_t)n * V * sizeof(float));
    }
    return rc;
}

/* ---- the device decoder (dllm/ar_sampler.h) -------------------------------------------- */

static int dm_extend(void *ctx, const int32_t *d_tokens, const uint8_t *keymask, int T,
                     dllm_err *err)
{
    qwen3_kv_cache *c = ctx;
    return qwen3_extend_device(c->m, c, d_tokens, keymask, T, err);
}

static int dm_head(void *ctx, int r0, int n, float *d_logits, dllm_err *err)
{
    qwen3_kv_cache *c = ctx;
    return qwen3_head_device(c->m, c, r0, n, d_logits, err);
}

int qwen3_device_decoder(dllm_tf *m, qwen3_kv_cache *c, dllm_ar_decoder *out, dllm_err *err)
{
    if (!c->be || !m->dev || c->be != m->dev->be)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_device_decoder: the model and the cache are not on one device");
    c->m = m;
    int rows = dllm_tf_device_chunk_rows(m->V);
    *out = (dllm_ar_decoder){c, c->be, m->V, rows < c->B ? rows : c->B, dm_extend, dm_head};
    return 0;
}
