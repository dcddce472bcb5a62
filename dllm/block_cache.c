/* block_cache.c: the block-wise key/value cache of cached denoising (block_cache.h):
 * the core's layers (tf_layers_fwd) with an attention hook that stores, or replaces
 * and attends over, the cached keys and values. */
#include "dllm/block_cache.h"

#include "dllm/transformer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dllm_block_cache {
    dllm_tf *m;
    bool rollout;
    tf_acts a;       /* the passes' activations (the model's own stay untouched) */
    int B, T;        /* of the last fill; 0 before it */
    size_t cap;      /* floats allocated in k and v */
    float *k, *v;    // (L, B, T, KD) keys after RoPE, values
    uint8_t *km;     // (B, T) the fill's key mask
    int32_t *pos;    // (B, T) RoPE positions of the whole canvas
    bool have_mask;  /* attention reads km (else every key is visible) */
    int lo, Tq;      /* the current step's positions: [lo, lo + Tq) */
};

int dllm_block_cache_new(dllm_block_cache **out, dllm_tf *m, bool rollout, dllm_err *err)
{
    *out = NULL;
    if (dllm_tf_device(m))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "cache: not on the device yet (the block cache is host memory)");
    if (m->arch->causal || m->arch->shift_logits)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "cache: %s is not a bidirectional model with unshifted logits",
                            m->arch->name);
    dllm_block_cache *c = dllm_calloc(1, sizeof *c);
    c->m = m;
    c->rollout = rollout;
    *out = c;
    return 0;
}

void dllm_block_cache_free(dllm_block_cache *c)
{
    if (!c)
        return;
    tf_acts_free(&c->a);
    free(c->k);
    free(c->v);
    free(c->km);
    free(c->pos);
    free(c);
}

static const tf_view *view(const dllm_block_cache *c)
{
    return c->rollout ? tf_rollout_view(c->m) : &c->m->tv;
}

static int check_tokens(const dllm_tf *m, const int32_t *tokens, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->V) {
            fprintf(stderr, "block cache: token %d at %zu outside the vocabulary [0, %d)\n",
                    tokens[i], i, m->V);
            return DLLM_EXIT_INPUT;
        }
    return 0;
}

/* The fill's hook: the batch attention of the plain forward, then layer l's keys and
 * values of every position into the cache. */
static void fill_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx)
{
    dllm_block_cache *c = ctx;
    tf_batch_attention(m, l, io, &c->a);
    size_t n = (size_t)c->B * c->T * m->KD, off = (size_t)l * n;
    memcpy(c->k + off, io->k, n * sizeof(float));
    memcpy(c->v + off, io->v, n * sizeof(float));
}

/* The step's hook: the recomputed positions' keys and values replace the cached ones,
 * then their queries attend to the whole cache. */
static void step_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx)
{
    dllm_block_cache *c = ctx;
    size_t KD = (size_t)m->KD, lstride = (size_t)c->B * c->T * KD;
    float *kl = c->k + (size_t)l * lstride, *vl = c->v + (size_t)l * lstride;
    for (int b = 0; b < c->B; b++) {
        size_t dst = ((size_t)b * c->T + (size_t)c->lo) * KD, src = (size_t)b * c->Tq * KD;
        memcpy(kl + dst, io->k + src, (size_t)c->Tq * KD * sizeof(float));
        memcpy(vl + dst, io->v + src, (size_t)c->Tq * KD * sizeof(float));
    }
    op_attention_kv_fwd(io->y, io->q, kl, vl, c->have_mask ? c->km : NULL, c->B, c->Tq, c->T,
                        m->NH, m->NKV, m->HD);
}

/* The final norm and head of rows whose hidden states are rows hrows of x. */
static void head(dllm_block_cache *c, const float *x, int R, float *logits)
{
    dllm_tf *m = c->m;
    size_t C = (size_t)m->C;
    for (int r = 0; r < R; r++)
        memcpy(c->a.xr + r * C, x + (size_t)c->a.hrows[r] * C, C * sizeof(float));
    tf_head_fwd(m, view(c), c->a.xr, c->a.nf, c->a.rstdf, R, logits);
}

int dllm_block_cache_fill(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          const int32_t *rows, int n_rows, float *logits)
{
    dllm_block_cache *c = ctx;
    dllm_tf *m = c->m;
    int N = B * T, R = rows ? n_rows : N;
    if (B <= 0 || T <= 0 || R < 0 || check_tokens(m, tokens, (size_t)N))
        return DLLM_EXIT_INPUT;
    for (int r = 0; rows && r < R; r++)
        if (rows[r] < 0 || rows[r] >= N)
            return DLLM_EXIT_INPUT;
    size_t need = (size_t)m->L * N * m->KD;
    if (need > c->cap) {
        free(c->k);
        free(c->v);
        c->k = TF_FALLOC(need);
        c->v = TF_FALLOC(need);
        c->cap = need;
    }
    if (B * T > c->B * c->T || !c->km) {
        free(c->km);
        free(c->pos);
        c->km = dllm_malloc((size_t)N);
        c->pos = dllm_malloc(sizeof *c->pos * (size_t)N);
    }
    c->B = B;
    c->T = T;
    tf_rope_grow(m, T);
    tf_acts_ensure_fwd(m, &c->a, B, T, R, false);
    tf_acts *a = &c->a;
    a->B = B, a->T = T, a->N = N, a->R = R;
    a->have_mask = tf_inputs(m, B, T, R, tokens, keymask, rows, a->tokens, a->keymask, a->pos,
                             a->rows, a->hrows);
    c->have_mask = a->have_mask;
    memcpy(c->km, a->keymask, (size_t)N);
    memcpy(c->pos, a->pos, sizeof *c->pos * (size_t)N);
    const float *x = tf_layers_fwd(m, a, view(c), false, fill_attention, c);
    head(c, x, R, logits);
    return 0;
}

int dllm_block_cache_step(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          int lo, int hi, const int32_t *rows, int n_rows, float *logits)
{
    (void)keymask;
    dllm_block_cache *c = ctx;
    dllm_tf *m = c->m;
    if (B != c->B || T != c->T || lo < 0 || hi > T || lo >= hi || n_rows < 0 || !rows) {
        fprintf(stderr, "block cache: a step over [%d, %d) of [%d, %d) does not match the "
                        "fill's [%d, %d)\n", lo, hi, B, T, c->B, c->T);
        return DLLM_EXIT_INPUT;
    }
    const int Tq = hi - lo, N = B * Tq, R = n_rows;
    tf_acts_ensure_fwd(m, &c->a, B, Tq, R, false);
    tf_acts *a = &c->a;
    a->B = B, a->T = Tq, a->N = N, a->R = R;
    a->have_mask = false; /* the hook reads the fill's mask */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tq; t++) {
            size_t src = (size_t)b * T + (size_t)(lo + t), n = (size_t)b * Tq + (size_t)t;
            a->tokens[n] = tokens[src];
            a->pos[n] = c->pos[src];
        }
    if (check_tokens(m, a->tokens, (size_t)N))
        return DLLM_EXIT_INPUT;
    for (int r = 0; r < R; r++) {
        int b = rows[r] / T, t = rows[r] % T;
        if (rows[r] < 0 || b >= B || t < lo || t >= hi) {
            fprintf(stderr, "block cache: row %d outside the step's positions [%d, %d)\n",
                    rows[r], lo, hi);
            return DLLM_EXIT_INPUT;
        }
        a->rows[r] = rows[r];
        a->hrows[r] = b * Tq + (t - lo);
    }
    c->lo = lo;
    c->Tq = Tq;
    const float *x = tf_layers_fwd(m, a, view(c), false, step_attention, c);
    head(c, x, R, logits);
    return 0;
}
