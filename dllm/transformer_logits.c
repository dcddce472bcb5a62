/* transformer_logits.c: the transformer core as the denoising sampler's loop sees a model
 * on a device (dllm/device_logits.h, dllm_tf_device_logits): token ids and key mask
 * already in the device's memory, the layers over them in the device's one activation set
 * (every forward without backward's), logits of the rows asked for into the caller's
 * device buffer a chunk at a time. The RoPE positions of a canvas go up once per shape
 * (every denoising step of a canvas has the same ones), except where they count real
 * tokens (the key mask comes down to build them). */
#include "dllm/device_logits.h"
#include "dllm/transformer_impl.h"

#include <stdio.h>
#include <string.h>

static int dl_layers(void *ctx, const int32_t *d_tokens, const uint8_t *d_keymask, int B, int T)
{
    tf_dl_ctx *c = ctx;
    dllm_tf *m = c->m;
    tf_io *d = &m->io;
    dllm_backend *be = m->dev;
    int k = c->rollout;
    tf_acts *a = &m->ra;
    d->xl[0] = d->xl[1] = NULL; /* one set: the other view's x_L is overwritten */
    if (B <= 0 || T <= 0 || (size_t)B * T > (size_t)1 << 30) {
        fprintf(stderr, "%s device layers: bad batch (B=%d, T=%d)\n", m->arch->name, B, T);
        return DLLM_EXIT_INPUT;
    }
    int N = B * T;
    bool count = m->arch->rope_pos == DLLM_ROPE_REAL_COUNT;
    const tf_view *v = tf_device_view(m, k);
    tf_rope_grow(m, T);
    a->be = be;
    tf_acts_ensure(m, a, B, T, d->lg_rows, 1);
    a->B = B, a->T = T, a->N = N, a->R = 0;
    tf_device_staging(m, (size_t)(N > d->lg_rows ? N : d->lg_rows)); /* head() stages its rows too */
    be->ops->copy(be, a->tokens, d_tokens, (size_t)N * sizeof(int32_t));
    /* positions counting real tokens need the mask on the host (N bytes down) */
    if (d_keymask && count)
        be->ops->download(be, d->h_mask, d_keymask, (size_t)N);
    if (d_keymask)
        be->ops->copy(be, a->keymask, d_keymask, (size_t)N);
    else if (count) {
        memset(d->h_mask, 1, (size_t)N);
        be->ops->upload(be, a->keymask, d->h_mask, (size_t)N);
    }
    a->have_mask = count || d_keymask != NULL;
    /* a denoising step's positions are its previous step's (t, for every row): the
     * upload, a blocking copy, happens once per canvas shape, not once per step */
    if (count || a->pos_T != T || a->pos_N < (size_t)N) {
        tf_inputs(m, B, T, 0, NULL, d_keymask && count ? d->h_mask : NULL, NULL, NULL, NULL,
                  d->h_pos, NULL, NULL);
        be->ops->upload(be, a->pos, d->h_pos, (size_t)N * sizeof(int32_t));
        a->pos_T = count ? 0 : T;
        a->pos_N = (size_t)N;
    }
    d->xl[k] = tf_layers_fwd(m, a, v, false, tf_batch_attention, a, false);
    return 0;
}

static int dl_head(void *ctx, const int32_t *d_rows, int n, float *d_logits)
{
    tf_dl_ctx *c = ctx;
    dllm_tf *m = c->m;
    tf_io *d = &m->io;
    dllm_backend *be = m->dev;
    int k = c->rollout;
    tf_acts *a = &m->ra;
    if (!d->xl[k] || n <= 0 || n > d->lg_rows) {
        fprintf(stderr, "%s device head: %s\n", m->arch->name,
                !d->xl[k] ? "no layers() call before it" : "row count outside [1, max_rows]");
        return DLLM_EXIT_INPUT;
    }
    const int32_t *hr = d_rows;
    if (m->arch->shift_logits) { /* the row before, within its sequence (n ints each way) */
        be->ops->download(be, d->h_rows, d_rows, (size_t)n * sizeof(int32_t));
        for (int r = 0; r < n; r++)
            d->h_rows[r] = d->h_rows[r] % a->T > 0 ? d->h_rows[r] - 1 : d->h_rows[r];
        be->ops->upload(be, a->hrows, d->h_rows, (size_t)n * sizeof(int32_t));
        hr = a->hrows;
    }
    be->ops->embedding_fwd(be, a->xr, hr, d->xl[k], n, m->C);
    tf_head_fwd(m, tf_device_view(m, k), a->xr, a->nf, a->rstdf, n, d_logits);
    return 0;
}

int dllm_tf_device_logits(dllm_tf *m, bool rollout, dllm_device_logits *out, dllm_err *err)
{
    if (!m->dev)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "dllm_tf_device_logits: the model is not on a device backend "
                            "(dllm_tf_to_device)");
    tf_io *d = &m->io;
    d->dl[rollout] = (tf_dl_ctx){m, rollout};
    *out = (dllm_device_logits){&d->dl[rollout], m->dev, m->V, d->lg_rows, dl_layers, dl_head,
                                 NULL, NULL};
    return 0;
}
