/* block_cache.c: the block-wise key/value cache of cached denoising (block_cache.h):
 * the core's layers (tf_layers_fwd) with an attention hook that stores, or replaces and
 * attends over, the cached keys and values through the table's kv_append and
 * attention_cached, in the memory of the model's backend (the host's, or its device's). */
#include "dllm/block_cache.h"

#include "dllm/transformer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dllm_block_cache {
    dllm_tf *m;
    bool rollout;
    dllm_backend *be; /* the model's: every buffer below but the host staging is its memory */
    bool host;        /* be is the host's: the host model's inputs are read as given */
    tf_acts a;        /* the passes' activations (the model's own stay untouched) */
    int B, T;         /* of the last fill; 0 before it */
    int max_rows;     /* head rows one call takes */
    size_t cap;       /* floats allocated in k and v */
    float *k, *v;     // (L, B, T, KD) keys after RoPE, values
    uint8_t *km;      // (B, T) the fill's key mask
    int32_t *pos;     // (B, T) RoPE positions of the whole canvas
    float *xs;        // (B, T, C) a step's hidden rows at their canvas rows
    size_t xcap;
    const float *xl;  /* the hidden rows head() reads, flat canvas rows b*T + t */
    bool have_mask;   /* attention reads km (else every key is visible) */
    int lo, Tq;       /* the current step's positions: [lo, lo + Tq) */
    int32_t *h_pos;   // (hcap) host staging of the device path's positions
    uint8_t *h_km;    // (hcap)
    size_t hcap;
};

int dllm_block_cache_new(dllm_block_cache **out, dllm_tf *m, bool rollout, dllm_err *err)
{
    *out = NULL;
    if (m->arch->causal || m->arch->shift_logits)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "cache: %s is not a bidirectional model with unshifted logits",
                            m->arch->name);
    dllm_block_cache *c = dllm_calloc(1, sizeof *c);
    c->m = m;
    c->rollout = rollout;
    c->be = m->dev ? m->dev : m->be;
    c->host = !m->dev;
    c->a.be = c->be;
    c->max_rows = m->dev ? dllm_tf_device_chunk_rows(m->V) : 1;
    /* on a device that trains, the cache's forward buffers take turns with the kept
     * forward's and the other forwards' in their region: a rollout never needs theirs */
    if (tf_device_training(m))
        tf_acts_set_region(m, &c->a, &m->region);
    *out = c;
    return 0;
}

void dllm_block_cache_free(dllm_block_cache *c)
{
    if (!c)
        return;
    tf_acts_free(&c->a);
    void *all[] = {c->k, c->v, c->km, c->pos, c->xs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i])
            c->be->ops->free(c->be, all[i]);
    free(c->h_pos);
    free(c->h_km);
    free(c);
}

static const tf_view *view(const dllm_block_cache *c) { return tf_fwd_view(c->m, c->rollout); }

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

static void *grow(dllm_backend *be, void *p, size_t bytes)
{
    if (p)
        be->ops->free(be, p);
    return be->ops->alloc(be, bytes ? bytes : 1);
}

/* The fill's hook: the batch attention of the plain forward, then layer l's keys and
 * values of every position into the cache. */
static void fill_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx)
{
    dllm_block_cache *c = ctx;
    tf_batch_attention(m, l, io, &c->a);
    size_t lstride = (size_t)c->B * c->T * m->KD;
    c->be->ops->kv_append(c->be, c->k + l * lstride, c->v + l * lstride, NULL, io->k, io->v, NULL,
                          c->B, c->T, 0, c->T, m->KD);
}

/* The step's hook: the recomputed positions' keys and values replace the cached ones,
 * then their queries attend to the whole cache. */
static void step_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx)
{
    dllm_block_cache *c = ctx;
    dllm_backend *be = c->be;
    size_t lstride = (size_t)c->B * c->T * m->KD;
    float *kl = c->k + l * lstride, *vl = c->v + l * lstride;
    be->ops->kv_append(be, kl, vl, NULL, io->k, io->v, NULL, c->B, c->Tq, c->lo, c->T, m->KD);
    be->ops->attention_cached(be, io->y, io->q, kl, vl, c->have_mask ? c->km : NULL, c->B, c->Tq,
                              c->lo, c->T, m->NH, m->NKV, m->HD, false);
}

/* The fill over tokens [B,T] and keymask [B,T] (NULL: all real) in the backend's memory,
 * sized for head() calls of up to c->max_rows rows. rows (host memory, a host cache only;
 * NULL: none): the R rows the fill's head reads alone, where the forward would run its last
 * layer over them alone (tf_head_rows_at); x_L's rows then lie in c->a.xr, in order, and
 * c->a.head_in_xr is set. */
static int fill(dllm_block_cache *c, const int32_t *tokens, const uint8_t *keymask, int B,
                int T, const int32_t *rows, int R)
{
    dllm_tf *m = c->m;
    dllm_backend *be = c->be;
    const int N = B * T;
    if (B <= 0 || T <= 0 || (c->host && check_tokens(m, tokens, (size_t)N)))
        return DLLM_EXIT_INPUT;
    size_t need = (size_t)m->L * N * m->KD;
    if (need > c->cap) {
        c->k = grow(be, c->k, need * sizeof(float));
        c->v = grow(be, c->v, need * sizeof(float));
        c->cap = need;
    }
    if (B * T > c->B * c->T || !c->km) {
        c->km = grow(be, c->km, (size_t)N);
        c->pos = grow(be, c->pos, sizeof(int32_t) * (size_t)N);
    }
    c->B = B;
    c->T = T;
    tf_rope_grow(m, T);
    tf_acts_ensure_fwd(m, &c->a, B, T, c->max_rows, false);
    tf_acts *a = &c->a;
    a->B = B, a->T = T, a->N = N, a->R = 0;
    if (c->host) {
        a->have_mask = tf_inputs(m, B, T, 0, tokens, keymask, NULL, a->tokens, a->keymask,
                                 a->pos, NULL, NULL);
    } else { /* positions on the host, from the key mask where they count real tokens */
        const bool count = m->arch->rope_pos == DLLM_ROPE_REAL_COUNT;
        if ((size_t)N > c->hcap) {
            free(c->h_pos), free(c->h_km);
            c->h_pos = dllm_malloc(sizeof *c->h_pos * (size_t)N);
            c->h_km = dllm_malloc((size_t)N);
            c->hcap = (size_t)N;
        }
        if (keymask && count)
            be->ops->download(be, c->h_km, keymask, (size_t)N);
        be->ops->copy(be, a->tokens, tokens, sizeof(int32_t) * (size_t)N);
        if (keymask)
            be->ops->copy(be, a->keymask, keymask, (size_t)N);
        a->have_mask = tf_inputs(m, B, T, 0, NULL, keymask && count ? c->h_km : NULL, NULL,
                                 NULL, NULL, c->h_pos, NULL, NULL) ||
                       keymask != NULL;
        be->ops->upload(be, a->pos, c->h_pos, sizeof(int32_t) * (size_t)N);
    }
    c->have_mask = a->have_mask;
    be->ops->copy(be, c->km, a->keymask, (size_t)N);
    be->ops->copy(be, c->pos, a->pos, sizeof(int32_t) * (size_t)N);
    bool head_rows = rows && tf_head_rows_at(view(c), c->rollout);
    if (head_rows) {
        memcpy(a->hrows, rows, sizeof(int32_t) * (size_t)R);
        a->R = R;
    }
    c->xl = tf_layers_fwd(m, a, view(c), false, fill_attention, c, head_rows);
    if (a->head_in_xr)
        c->xl = NULL; /* x_L's other rows were never made: no head() reads them */
    return 0;
}

/* The step over positions [lo, hi) of tokens [B,T] (the fill's B and T). rows (flat canvas
 * rows b*T + t inside [lo, hi), host memory, a host cache only; NULL: none): the R rows the
 * step's head reads alone, as fill's. */
static int step(dllm_block_cache *c, const int32_t *tokens, int B, int T, int lo, int hi,
                const int32_t *rows, int R)
{
    dllm_tf *m = c->m;
    dllm_backend *be = c->be;
    if (B != c->B || T != c->T || lo < 0 || hi > T || lo >= hi) {
        fprintf(stderr, "block cache: a step over [%d, %d) of [%d, %d) does not match the "
                        "fill's [%d, %d)\n", lo, hi, B, T, c->B, c->T);
        return DLLM_EXIT_INPUT;
    }
    const int Tq = hi - lo, N = B * Tq;
    const size_t C = (size_t)m->C;
    tf_acts_ensure_fwd(m, &c->a, B, Tq, c->max_rows, false);
    tf_acts *a = &c->a;
    a->B = B, a->T = Tq, a->N = N, a->R = 0;
    a->have_mask = false; /* the hook reads the fill's mask */
    for (int b = 0; b < B; b++) {
        size_t src = (size_t)b * T + (size_t)lo, dst = (size_t)b * Tq;
        be->ops->copy(be, a->tokens + dst, tokens + src, sizeof(int32_t) * (size_t)Tq);
        be->ops->copy(be, a->pos + dst, c->pos + src, sizeof(int32_t) * (size_t)Tq);
    }
    if (c->host && check_tokens(m, a->tokens, (size_t)N))
        return DLLM_EXIT_INPUT;
    c->lo = lo;
    c->Tq = Tq;
    bool head_rows = rows && tf_head_rows_at(view(c), c->rollout);
    for (int r = 0; head_rows && r < R; r++) /* canvas rows -> the step's rows */
        a->hrows[r] = rows[r] / T * Tq + rows[r] % T - lo;
    a->R = head_rows ? R : 0;
    const float *x = tf_layers_fwd(m, a, view(c), false, step_attention, c, head_rows);
    if (a->head_in_xr) {
        c->xl = NULL; /* x_L's other rows were never made: no head() reads them */
        return 0;
    }
    /* the step's rows at their canvas rows, so head() reads flat rows b*T + t */
    if ((size_t)B * T * C > c->xcap) {
        c->xs = grow(be, c->xs, sizeof(float) * (size_t)B * T * C);
        c->xcap = (size_t)B * T * C;
    }
    for (int b = 0; b < B; b++)
        be->ops->copy(be, c->xs + ((size_t)b * T + (size_t)lo) * C, x + (size_t)b * Tq * C,
                      sizeof(float) * (size_t)Tq * C);
    c->xl = c->xs;
    return 0;
}

/* logits (n, V) of the flat canvas rows (be's memory) of the last fill or step: those
 * it was given (rows at fill and step) when it left their x_L in c->a.xr. */
static int head(dllm_block_cache *c, const int32_t *rows, int n, float *logits)
{
    dllm_tf *m = c->m;
    const bool ready = c->a.head_in_xr;
    if ((!c->xl && !ready) || n < 0 || n > c->max_rows) {
        fprintf(stderr, "block cache head: %s\n", !c->xl && !ready
                ? "no fill before it" : "row count outside [0, max_rows]");
        return DLLM_EXIT_INPUT;
    }
    if (n == 0)
        return 0;
    if (!ready)
        c->be->ops->embedding_fwd(c->be, c->a.xr, rows, c->xl, n, m->C); /* gather the rows */
    tf_head_fwd(m, view(c), c->a.xr, c->a.nf, c->a.rstdf, n, logits);
    return 0;
}

/* ---- the host model's functions (dllm_sampler_cache) ----------------------------------- */

int dllm_block_cache_fill(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          const int32_t *rows, int n_rows, float *logits)
{
    dllm_block_cache *c = ctx;
    const int N = B * T, R = rows ? n_rows : N;
    if (!c->host || R < 0)
        return DLLM_EXIT_INPUT;
    for (int r = 0; rows && r < R; r++)
        if (rows[r] < 0 || rows[r] >= N)
            return DLLM_EXIT_INPUT;
    if (R > c->max_rows) /* one head call over every row, as the plain forward's */
        c->max_rows = R;
    int rc = fill(c, tokens, keymask, B, T, rows, R);
    if (rc)
        return rc;
    int32_t *all = NULL;
    if (!rows) {
        all = dllm_malloc(sizeof *all * (size_t)(N > 0 ? N : 1));
        for (int i = 0; i < N; i++)
            all[i] = i;
    }
    rc = head(c, rows ? rows : all, R, logits);
    free(all);
    return rc;
}

int dllm_block_cache_step(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          int lo, int hi, const int32_t *rows, int n_rows, float *logits)
{
    (void)keymask;
    dllm_block_cache *c = ctx;
    if (!c->host || n_rows < 0 || !rows)
        return DLLM_EXIT_INPUT;
    for (int r = 0; r < n_rows; r++) {
        int b = rows[r] / (T > 0 ? T : 1), t = rows[r] % (T > 0 ? T : 1);
        if (rows[r] < 0 || b >= B || t < lo || t >= hi) {
            fprintf(stderr, "block cache: row %d outside the step's positions [%d, %d)\n",
                    rows[r], lo, hi);
            return DLLM_EXIT_INPUT;
        }
    }
    if (n_rows > c->max_rows)
        c->max_rows = n_rows;
    int rc = step(c, tokens, B, T, lo, hi, rows, n_rows);
    return rc ? rc : head(c, rows, n_rows, logits);
}

/* ---- the view of the sampler's loop (dllm/device_logits.h) ------------------------------ */

static int v_fill(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T)
{
    return fill(ctx, tokens, keymask, B, T, NULL, 0);
}

static int v_step(void *ctx, const int32_t *tokens, int B, int T, int lo, int hi)
{
    return step(ctx, tokens, B, T, lo, hi, NULL, 0);
}

static int v_head(void *ctx, const int32_t *rows, int n, float *logits)
{
    return head(ctx, rows, n, logits);
}

dllm_device_logits dllm_block_cache_view(dllm_block_cache *c)
{
    return (dllm_device_logits){c, c->be, c->m->V, c->max_rows, v_fill, v_head, v_fill, v_step};
}
