/* qwen3.c: what the autoregressive Qwen3 has beyond its descriptor (dllm/arch.c):
 * exact sequence log-probabilities and KV-cache decoding (qwen3.h).
 *
 * KV cache: K after k_norm and RoPE, and V, per layer; a new query at slot j
 * attends the cached slots s <= j whose key mask is 1 -- the same softmax as
 * the backend's attention (fp32, max subtracted), so decoding reproduces the
 * full forward up to summation order. The layers are the core's own
 * (tf_layers_fwd) with the cached attention in place of the batch one, at the
 * trainer's numerics or, with qwen3_decode_at_rollout, the rollout copy's. The cache lives
 * in the memory of the backend the model runs on: the host's, or its device's. */
#include "dllm/qwen3.h"
#include "dllm/ar_sampler.h"
#include "dllm/transformer_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qwen3_kv_cache {
    int B, max_len, len, L, NKV, HD;
    int T;            /* slots the extend in progress appends */
    dllm_backend *be; /* whose memory the cache is: the backend the model runs on */
    bool dev;         /* be is a device's (the model is on one) */
    float *k, *v;     // (L, B, max_len, NKV*HD) in be's memory
    uint8_t *mask;    // (B, max_len) the key mask (on a device: the host's mirror)
    int32_t *npos;    // (B) real tokens so far = the next RoPE position
    tf_acts a;        /* one layer's activations for the B*T new rows (grown on demand), in
                         be's memory, with the B last rows in a.xr */
    dllm_tf *m;       /* the model a decoder (dllm/ar_sampler.h) runs */
    /* on a device */
    uint8_t *dmask;   // (B, max_len) the key mask
    uint8_t *dnew;    // (B * max_len) the new slots' key mask of an extend
    const uint8_t *newmask; /* dnew while an extend with a key mask runs, else NULL */
    int32_t *dtok;    // (B * max_len) host tokens of qwen3_extend, uploaded
    float *dlg;       // (lg_rows, V) a chunk of logits for qwen3_extend
    int lg_rows;
    float *hlg;       // (B, V) host: the last rows' logits of the host decoder's extend
    const tf_view *view; /* the weights of the last extend, which the head reads */
    bool have_rows;   /* a.xr holds the last extend's B last rows */
};

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
    c->dev = m->dev != NULL;
    c->be = c->dev ? m->dev : m->be;
    dllm_backend *be = c->be;
    size_t slots = (size_t)c->B * c->max_len, n = (size_t)m->L * slots * m->KD;
    c->k = be->ops->alloc(be, n * sizeof(float));
    c->v = be->ops->alloc(be, n * sizeof(float));
    if (c->dev) { /* the key mask and the new slots' in the device's memory too */
        c->dmask = be->ops->alloc(be, slots);
        c->dnew = be->ops->alloc(be, slots);
        c->a.be = be;
    }
    return c;
}

void qwen3_cache_free(qwen3_kv_cache *c)
{
    if (!c)
        return;
    dllm_backend *be = c->be;
    void *all[] = {c->k, c->v, c->dmask, c->dnew, c->dtok, c->dlg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i])
            be->ops->free(be, all[i]);
    tf_acts_free(&c->a);
    free(c->mask);
    free(c->npos);
    free(c->hlg);
    free(c);
}

int qwen3_cache_len(const qwen3_kv_cache *c) { return c->len; }

/* The hook of tf_layer_fwd: appends the layer's new K/V to the cache (and, on a device,
 * at layer 0 their key mask: the host's is written by the extend), then the new queries
 * attend over it (the table's kv_append and attention_cached, causal). */
static void cache_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx)
{
    qwen3_kv_cache *c = ctx;
    dllm_backend *be = c->be;
    size_t lstride = (size_t)c->B * c->max_len * m->KD;
    float *kc = c->k + l * lstride, *vc = c->v + l * lstride;
    uint8_t *cm = c->dev ? c->dmask : c->mask;
    be->ops->kv_append(be, kc, vc, c->dev && l == 0 ? cm : NULL, io->k, io->v, c->newmask,
                       c->B, c->T, c->len, c->max_len, m->KD);
    be->ops->attention_cached(be, io->y, io->q, kc, vc, cm, c->B, c->T, c->len, c->max_len,
                              m->NH, m->NKV, m->HD, true);
}

/* T new slots of every row from tokens (B*T, in the cache's memory): the core's layers
 * over them alone, at the view the decoding reads; the B last rows kept for the head.
 * What crosses on a device: the new slots' RoPE positions (counted on the host, as real
 * tokens), their key mask when one is given, the head rows of a T > 1 extend. */
static int extend(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens, const uint8_t *keymask,
                  int T, const char *fn, dllm_err *err)
{
    if (!m->arch->causal || m->arch->shift_logits)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s is not a causal model with unshifted "
                            "logits", fn, m->arch->name);
    if (c->L != m->L || c->NKV != m->NKV || c->HD != m->HD)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: the cache belongs to another model", fn);
    if (c->be != (m->dev ? m->dev : m->be))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: the cache and the model are on different backends", fn);
    if (T <= 0 || c->len + T > c->max_len)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: %d new slots do not fit the cache (%d of %d used)", fn, T,
                            c->len, c->max_len);
    dllm_backend *be = c->be;
    int B = c->B, N = B * T;
    tf_acts *a = &c->a;
    if (m->lora_rank && !a->xa) /* LoRA enabled since the buffers were sized */
        tf_acts_free(a);
    tf_acts_ensure(m, a, B, T, B, 1);
    a->B = B, a->T = T, a->N = N, a->R = B;
    int32_t *pos = a->pos, *hrows = a->hrows;
    if (c->dev) { /* built on the host, in the model's staging */
        tf_device_staging(m, (size_t)N);
        pos = m->io.h_pos, hrows = m->io.h_rows;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int n = b * T + t;
            uint8_t real = keymask ? keymask[n] != 0 : 1;
            c->mask[(size_t)b * c->max_len + c->len + t] = real;
            pos[n] = real ? c->npos[b]++ : 0;
        }
    tf_rope_grow(m, c->max_len); /* once: positions never reach max_len */
    c->newmask = NULL;
    if (c->dev) {
        be->ops->upload(be, a->pos, pos, (size_t)N * sizeof(int32_t));
        if (keymask) {
            be->ops->upload(be, c->dnew, keymask, (size_t)N);
            c->newmask = c->dnew;
        }
    }
    be->ops->copy(be, a->tokens, tokens, (size_t)N * sizeof(int32_t));
    c->view = tf_fwd_view(m, m->decode_rollout);
    c->T = T;
    const float *x = tf_layers_fwd(m, a, c->view, false, cache_attention, c, false);
    c->len += T;
    c->newmask = NULL;
    size_t C = (size_t)m->C;
    if (T == 1)
        be->ops->copy(be, a->xr, x, (size_t)B * C * sizeof(float));
    else {
        for (int b = 0; b < B; b++)
            hrows[b] = b * T + T - 1;
        if (c->dev)
            be->ops->upload(be, a->hrows, hrows, (size_t)B * sizeof(int32_t));
        be->ops->embedding_fwd(be, a->xr, a->hrows, x, B, m->C); /* gather the rows */
    }
    c->have_rows = true;
    return 0;
}

/* logits (n, V, the cache's memory) of rows r0 .. r0 + n - 1 of the last extend. */
static int head(dllm_tf *m, qwen3_kv_cache *c, int r0, int n, float *logits, dllm_err *err)
{
    if (!c->have_rows || r0 < 0 || n <= 0 || r0 + n > c->B)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3 head: rows [%d, %d) of %d%s", r0,
                            r0 + n, c->B, c->have_rows ? "" : " before any extend");
    size_t C = (size_t)m->C;
    tf_acts *a = &c->a;
    tf_head_fwd(m, c->view, a->xr + r0 * C, a->nf + r0 * C, a->rstdf + r0, n, logits);
    return 0;
}

int qwen3_extend(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens,
                 const uint8_t *keymask, int T, float *logits, dllm_err *err)
{
    dllm_backend *be = c->be;
    for (size_t n = 0; n < (size_t)c->B * (T > 0 ? T : 0); n++)
        if (tokens[n] < 0 || tokens[n] >= m->V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3_extend: token %d at (%zu, %zu) outside the vocabulary "
                                "[0, %d)", tokens[n], n / (size_t)T, n % (size_t)T, m->V);
    const int32_t *tok = tokens;
    if (c->dev && T > 0 && c->len + T <= c->max_len) { /* host tokens go up */
        if (!c->dtok)
            c->dtok = be->ops->alloc(be, (size_t)c->B * c->max_len * sizeof(int32_t));
        be->ops->upload(be, c->dtok, tokens, (size_t)c->B * T * sizeof(int32_t));
        tok = c->dtok;
    }
    int rc = extend(m, c, tok, keymask, T, "qwen3_extend", err);
    if (rc || !logits)
        return rc;
    if (!c->dev) /* every row in one product */
        return head(m, c, 0, c->B, logits, err);
    size_t V = (size_t)m->V;
    if (!c->dlg) { /* on a device the logits come down a chunk of rows at a time */
        c->lg_rows = dllm_tf_device_chunk_rows(m->V);
        c->lg_rows = c->lg_rows < c->B ? c->lg_rows : c->B;
        c->dlg = be->ops->alloc(be, (size_t)c->lg_rows * V * sizeof(float));
    }
    for (int r0 = 0; r0 < c->B && !rc; r0 += c->lg_rows) {
        int n = c->B - r0 < c->lg_rows ? c->B - r0 : c->lg_rows;
        rc = head(m, c, r0, n, c->dlg, err);
        if (!rc)
            be->ops->download(be, logits + (size_t)r0 * V, c->dlg, (size_t)n * V * sizeof(float));
    }
    return rc;
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

/* ---- the decoders (dllm/ar_sampler.h) -------------------------------------------------- */

static int be_extend(void *ctx, const int32_t *tokens, const uint8_t *keymask, int T,
                     dllm_err *err)
{
    qwen3_kv_cache *c = ctx;
    return extend(c->m, c, tokens, keymask, T, "qwen3 decoder", err);
}

static int be_head(void *ctx, int r0, int n, float *logits, dllm_err *err)
{
    qwen3_kv_cache *c = ctx;
    return head(c->m, c, r0, n, logits, err);
}

int qwen3_decoder(dllm_tf *m, qwen3_kv_cache *c, dllm_ar_decoder *out, dllm_err *err)
{
    (void)err;
    c->m = m;
    /* on the host every row in one product, as qwen3_extend's */
    int rows = c->dev ? dllm_tf_device_chunk_rows(m->V) : c->B;
    *out = (dllm_ar_decoder){c, c->be, m->V, rows < c->B ? rows : c->B, be_extend, be_head};
    return 0;
}

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
