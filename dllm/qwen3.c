/* qwen3.c: what the autoregressive Qwen3 has beyond its descriptor (dllm/arch.c):
 * exact sequence log-probabilities and KV-cache decoding (qwen3.h).
 *
 * KV cache: K after k_norm and RoPE, and V, per layer; a new query at slot j
 * attends the cached slots s <= j whose key mask is 1 -- the same softmax as
 * the backend's attention (fp32, max subtracted), so decoding reproduces the
 * full forward up to summation order. The layers are the core's own
 * (tf_layers_fwd) with the cached attention in place of the batch one, at the
 * trainer's numerics or, with qwen3_decode_at_rollout, the rollout copy's. A model on
 * a device backend keeps the cache in the device's memory (dllm/qwen3_device.c). */
#include "dllm/qwen3.h"
#include "dllm/ar_sampler.h"
#include "dllm/qwen3_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qwen3_decode_at_rollout(dllm_tf *m, bool on) { m->decode_rollout = on; }

/* ---- exact sequence log-probabilities -------------------------------------------------- */

int qwen3_seq_logprob(dllm_tf *m, const int32_t *prompt, int P, const int32_t *completion,
                      int L, double temperature, double *seq_logp, double *token_logp,
                      dllm_err *err)
{
    if (!m->arch->causal || m->arch->shift_logits)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_seq_logprob: %s is not a causal model with unshifted logits",
                            m->arch->name);
    if (P < 1 || L < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_seq_logprob: need a prompt and a completion (P=%d, L=%d)", P, L);
    if (!(temperature > 0) || !isfinite(temperature))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_seq_logprob: temperature %g must be positive", temperature);
    for (int i = 0; i < L; i++)
        if (completion[i] < 0 || completion[i] >= m->V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3_seq_logprob: completion token %d at %d outside the "
                                "vocabulary [0, %d)", completion[i], i, m->V);
    /* The last completion token is only a target: the input stops before it. */
    int T = P + L - 1, V = m->V;
    int32_t *seq = dllm_malloc((size_t)T * sizeof(int32_t));
    int32_t *rows = dllm_malloc((size_t)L * sizeof(int32_t));
    float *logits = dllm_malloc((size_t)L * V * sizeof(float));
    memcpy(seq, prompt, (size_t)P * sizeof(int32_t));
    memcpy(seq + P, completion, (size_t)(L - 1) * sizeof(int32_t));
    for (int i = 0; i < L; i++)
        rows[i] = P + i - 1;
    int rc = dllm_tf_forward_nograd(m, seq, NULL, 1, T, rows, L, logits);
    if (rc)
        rc = dllm_err_set(err, rc, "qwen3_seq_logprob: forward failed (see above)");
    double total = 0;
    for (int i = 0; i < L && !rc; i++) {
        const float *z = logits + (size_t)i * V;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            mx = (double)z[j] / temperature > mx ? (double)z[j] / temperature : mx;
        for (int j = 0; j < V; j++)
            sum += exp((double)z[j] / temperature - mx);
        double lp = (double)z[completion[i]] / temperature - mx - log(sum);
        if (token_logp)
            token_logp[i] = lp;
        total += lp;
    }
    if (!rc && seq_logp)
        *seq_logp = total;
    free(seq);
    free(rows);
    free(logits);
    return rc;
}

/* ---- KV-cache decoding ----------------------------------------------------------------- */

qwen3_kv_cache *qwen3_cache_new(const dllm_tf *m, int B, int max_len)
{
    qwen3_kv_cache *c = dllm_calloc(1, sizeof *c);
    c->B = B > 0 ? B : 1;
    c->max_len = max_len > 0 ? max_len : 1;
    c->L = m->L;
    c->NKV = m->NKV;
    c->HD = m->HD;
    c->mask = dllm_calloc((size_t)c->B * c->max_len, 1);
    c->npos = dllm_calloc((size_t)c->B, sizeof(int32_t));
    if (m->dev) { /* K/V in the device's memory only */
        qwen3_device_cache_init(m, c);
        return c;
    }
    size_t n = (size_t)m->L * c->B * c->max_len * m->KD;
    c->k = TF_FALLOC(n);
    c->v = TF_FALLOC(n);
    return c;
}

void qwen3_cache_free(qwen3_kv_cache *c)
{
    if (!c)
        return;
    if (c->be)
        qwen3_device_cache_free(c);
    tf_acts_free(&c->a);
    free(c->k);
    free(c->v);
    free(c->mask);
    free(c->npos);
    free(c->hlg);
    free(c);
}

int qwen3_cache_len(const qwen3_kv_cache *c) { return c->len; }

/* The hook of tf_layer_fwd, for the cache on the host or a device alike: appends the
 * layer's new K/V to the cache (and, on a device, at layer 0 their key mask: the host's is
 * written by the extend), then the new queries attend over it (the table's kv_append and
 * attention_cached, causal). */
void qwen3_cache_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx)
{
    qwen3_kv_cache *c = ctx;
    dllm_backend *be = c->be ? c->be : m->be;
    size_t lstride = (size_t)c->B * c->max_len * m->KD;
    float *kc = (c->be ? c->dk : c->k) + l * lstride, *vc = (c->be ? c->dv : c->v) + l * lstride;
    uint8_t *cm = c->be ? c->dmask : c->mask;
    be->ops->kv_append(be, kc, vc, c->be && l == 0 ? cm : NULL, io->k, io->v, c->newmask, c->B,
                       c->T, c->len, c->max_len, m->KD);
    be->ops->attention_cached(be, io->y, io->q, kc, vc, cm, c->B, c->T, c->len, c->max_len,
                              m->NH, m->NKV, m->HD, true);
}

int qwen3_extend(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens,
                 const uint8_t *keymask, int T, float *logits, dllm_err *err)
{
    if (!m->arch->causal || m->arch->shift_logits)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_extend: %s is not a causal model with unshifted logits",
                            m->arch->name);
    if (c->L != m->L || c->NKV != m->NKV || c->HD != m->HD)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3_extend: the cache belongs to another model");
    if (T <= 0 || c->len + T > c->max_len)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_extend: %d new slots do not fit the cache (%d of %d used)", T,
                            c->len, c->max_len);
    int B = c->B, N = B * T;
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0 || tokens[n] >= m->V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3_extend: token %d at (%d, %d) outside the vocabulary [0, %d)",
                                tokens[n], n / T, n % T, m->V);
    if (c->be || m->dev) {
        if (c->be != dllm_tf_device(m))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3_extend: the cache and the model are on different backends");
        return qwen3_device_extend_host(m, c, tokens, keymask, T, logits, err);
    }
    if (m->lora_rank && !c->a.xa) /* LoRA enabled since the buffers were sized */
        tf_acts_free(&c->a);
    tf_acts_ensure(m, &c->a, B, T, B, 1);
    tf_acts *a = &c->a;
    a->B = B, a->T = T, a->N = N, a->R = B;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int n = b * T + t;
            uint8_t real = keymask ? keymask[n] != 0 : 1;
            c->mask[(size_t)b * c->max_len + c->len + t] = real;
            a->pos[n] = real ? c->npos[b]++ : 0;
        }
    int maxpos = 0;
    for (int b = 0; b < B; b++)
        maxpos = c->npos[b] > maxpos ? c->npos[b] : maxpos;
    tf_rope_grow(m, maxpos);
    memcpy(a->tokens, tokens, (size_t)N * sizeof(int32_t));

    const tf_view *v =
        m->decode_rollout && m->prec.rollout != DLLM_ROLLOUT_TRAINER ? &m->rv : &m->tv;
    c->T = T;
    c->newmask = NULL;
    const float *x = tf_layers_fwd(m, a, v, false, qwen3_cache_attention, c);
    c->len += T;
    if (logits) {
        size_t C = (size_t)m->C;
        for (int b = 0; b < B; b++)
            m->be->ops->copy(m->be, a->xr + b * C, x + ((size_t)b * T + T - 1) * C,
                             C * sizeof(float));
        tf_head_fwd(m, v, a->xr, a->nf, a->rstdf, B, logits);
    }
    return 0;
}

int qwen3_prefill(dllm_tf *m, qwen3_kv_cache *c, const int32_t *prompts,
                  const uint8_t *prompt_mask, int P, float *logits, dllm_err *err)
{
    return qwen3_extend(m, c, prompts, prompt_mask, P, logits, err);
}

int qwen3_decode_step(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens, float *logits,
                      dllm_err *err)
{
    return qwen3_extend(m, c, tokens, NULL, 1, logits, err);
}

/* ---- the host decoder (dllm/ar_sampler.h) ---------------------------------------------- */

static int host_extend(void *ctx, const int32_t *tokens, const uint8_t *keymask, int T,
                       dllm_err *err)
{
    qwen3_kv_cache *c = ctx;
    return qwen3_extend(c->m, c, tokens, keymask, T, c->hlg, err);
}

static int host_head(void *ctx, int r0, int n, float *logits, dllm_err *err)
{
    qwen3_kv_cache *c = ctx;
    if (r0 < 0 || n <= 0 || r0 + n > c->B || !c->len)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "qwen3 host decoder: rows [%d, %d) of %d%s",
                            r0, r0 + n, c->B, c->len ? "" : " before any extend");
    size_t V = (size_t)c->m->V;
    memcpy(logits, c->hlg + (size_t)r0 * V, (size_t)n * V * sizeof(float));
    return 0;
}

int qwen3_host_decoder(dllm_tf *m, qwen3_kv_cache *c, dllm_ar_decoder *out, dllm_err *err)
{
    (void)err;
    c->m = m;
    if (!c->hlg)
        c->hlg = dllm_malloc((size_t)c->B * m->V * sizeof(float));
    *out = (dllm_ar_decoder){c, dllm_backend_cpu(), m->V, c->B, host_extend, host_head};
    return 0;
}
