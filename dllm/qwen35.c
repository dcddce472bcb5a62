/* qwen35.c: Qwen3.5's text model on the host (qwen35.h): config.json, weights,
 * the hybrid forward over a cache, exact log-probabilities and greedy decoding. */
#include "dllm/qwen35.h"
#include "dllm/json_util.h"
#include "dllm/param_io.h"
#include "dllm/safetensors.h"
#include "kernels/fp8.h"
#include "kernels/backend.h"
#include "kernels/gated_delta.h"
#include "kernels/int8.h"
#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- weights --------------------------------------------------------------------------- */

typedef struct {
    float *n1, *n2;                 /* (C) 1 + the published zero-centred weights */
    /* linear attention */
    float *qkv, *z, *b, *a, *out;   /* (2Hk Dk + Hv Dv, C), (Hv Dv, C), (Hv, C), (Hv, C), (C, Hv Dv) */
    float *conv;                    /* (2Hk Dk + Hv Dv, K) */
    float *A_log, *dt_bias;         /* (Hv) */
    float *gnorm;                   /* (Dv) the gated norm's weight, as published */
    /* full attention */
    float *q, *k, *v, *o;           /* (2 NH HD, C), (NKV HD, C), (NKV HD, C), (C, NH HD) */
    float *qn, *kn;                 /* (HD) 1 + w */
    /* MLP */
    float *gate, *up, *down;        /* (H, C), (H, C), (C, H) */
} layer_w;

/* What a keeping forward leaves for the backward: per batch row its real tokens
 * (compressed), where each canvas position sits among them, and each layer's input. */
typedef struct {
    int B, T, R;
    int32_t *rows;  /* (R) the logits rows */
    int *n;         /* (B) real tokens of row b */
    int32_t *ids;   /* (B, T) row b's real tokens first */
    int *idx;       /* (B, T) position t's index among its row's real tokens (-1: padding) */
    float *xs;      /* (B, L + 1, T, C) the layers' inputs, [L] the last residual */
    bool valid;
} qwen35_kept;

/* One projection of a quantised rollout copy (qwen35_quantise), in place of weight w. */
typedef struct {
    const float *w;
    dllm_rollout_kind kind; /* fp8, fp8-exact, int8 or nvfp4 */
    fp8_matrix f8;
    int8_matrix i8;
    nvfp4_matrix f4;
} qlin;

/* A LoRA adapter on one projection W (out, in): W x + scale B (A x). */
typedef struct {
    float *A, *B, *dA, *dB; /* (r, in), (out, r), their gradients */
    int in, out;
} q35_lora;

struct qwen35_model;
static void kept_free(struct qwen35_model *m);
static float *grad_of(struct qwen35_model *m, const float *p);

struct qwen35_model {
    qwen35_config cfg;
    dllm_backend *be; /* where the forward and backward run (the host's) */
    float *embed, *head, *fnorm; /* (V, C), (V, C) or embed, (C) 1 + w */
    layer_w *lw;
    float **owned;  /* every weight buffer, in load order */
    char **names;   /* its published name */
    size_t *numel;
    float **grad;   /* its gradient (NULL until the first qwen35_loss_grad) */
    bool *centred;  /* held as 1 + w (the zero-centred norms) */
    float **mom, **var; /* AdamW's moments (NULL until the first step) */
    int nowned;
    bool bf16; /* qwen35_round_bf16: the decoding path's big linears read bf16 inputs */
    /* every weight in one allocation (load order): owned[i] = flat + off[i]; the
     * gradients and moments alike */
    float *flat, *gflat, *mflat, *vflat;
    size_t nflat, *off;
    qwen35_kept kept; /* the last keeping qwen35_forward, for qwen35_backward */
    qlin *ql;         /* qwen35_quantise: the big projections' quantised matrices */
    int nql;
    /* LoRA (qwen35_lora_enable): ad[i] the adapter of weight i (A NULL: none); the base
     * weights frozen, the adapters the trainable vector (lflat, in llist's order) */
    int lrank, lmask;
    float lalpha, lscale;
    q35_lora *ad;      /* (nowned) */
    dllm_param *llist; /* (nl) PEFT names, data and grad in lflat / lgflat */
    int nl;
    float *lflat, *lgflat, *lmflat, *lvflat;
    size_t nlflat;
    float *master; /* qwen35_keep_master: fp32 weights beside bf16-rounded ones (flat's layout) */
    float *shift;  /* (2 * nshift): -1s then +1s, for the optimizer's zero-centred norms */
    int nshift;
    float *host;   /* a host copy of the trainable vector read on a device (nhost floats) */
    size_t nhost;
};

const qwen35_config *qwen35_config_of(const qwen35_model *m) { return &m->cfg; }

static int conv_dim(const qwen35_config *c) { return 2 * c->Hk * c->Dk + c->Hv * c->Dv; }

/* ---- the backend -------------------------------------------------------------------------
 * Every op of the forward, the backward and the optimizer runs through the model's backend
 * (kernels/backend.h), and every array it owns -- weights, gradients, moments, adapters,
 * activations, caches, quantised copies -- is that backend's memory: the host's until
 * qwen35_to_backend moves the model to a device. */

#define OP(name, ...) m->be->ops->name(m->be, __VA_ARGS__)
#define GD(op, ...) m->be->ops->gd_##op(m->be, __VA_ARGS__)

/* n floats (and one more) of the backend's memory, zeroed. */
static float *fb(const qwen35_model *m, size_t n)
{
    return m->be->ops->alloc(m->be, (n + 1) * sizeof(float));
}

static void fdrop(const qwen35_model *m, void *p)
{
    if (p)
        m->be->ops->free(m->be, p);
}

/* n host ids (or positions) in the backend's memory. */
static int32_t *ints_on(const qwen35_model *m, const int32_t *h, int n)
{
    int32_t *d = m->be->ops->alloc(m->be, ((size_t)n + 1) * sizeof(int32_t));
    if (n > 0)
        m->be->ops->upload(m->be, d, h, (size_t)n * sizeof(int32_t));
    return d;
}

/* The positions from .. from+n-1 in the backend's memory. */
static int32_t *positions_on(const qwen35_model *m, int from, int n)
{
    int32_t *h = dllm_malloc(((size_t)n + 1) * sizeof(int32_t));
    for (int t = 0; t < n; t++)
        h[t] = from + t;
    int32_t *d = ints_on(m, h, n);
    free(h);
    return d;
}


typedef struct {
    qwen35_model *m;
    const st_archive *ar; /* the checkpoint, or NULL: the random values of seed */
    const char *prefix; /* "model." or "model.language_model." */
    dllm_err *err;
    int rc;
    uint64_t seed;
} loader;

/* Reads tensor PREFIX + name of shape dims into a new buffer; plus_one: 1 + w. */
static float *load(loader *ld, const char *name, int nd, int64_t d0, int64_t d1, int64_t d2,
                   bool plus_one, bool top)
{
    if (ld->rc)
        return NULL;
    char full[256];
    snprintf(full, sizeof full, "%s%s", top ? "" : ld->prefix, name);
    int64_t shape[3] = {d0, d1, d2};
    size_t n = (size_t)d0 * (nd > 1 ? d1 : 1) * (nd > 2 ? d2 : 1);
    float *p = dllm_malloc(n * sizeof(float) + 4);
    if (ld->ar)
        ld->rc = st_read_f32(ld->ar, full, shape, nd, p, ld->err);
    else
        qwen35_random_tensor(&ld->m->cfg, full, ld->seed, p, n);
    if (ld->rc) {
        free(p);
        return NULL;
    }
    if (plus_one)
        for (size_t i = 0; i < n; i++)
            p[i] += 1.0f;
    qwen35_model *m = ld->m;
    m->owned = realloc(m->owned, (size_t)(m->nowned + 1) * sizeof(float *));
    m->names = realloc(m->names, (size_t)(m->nowned + 1) * sizeof(char *));
    m->numel = realloc(m->numel, (size_t)(m->nowned + 1) * sizeof(size_t));
    m->centred = realloc(m->centred, (size_t)(m->nowned + 1) * sizeof(bool));
    m->centred[m->nowned] = plus_one;
    m->owned[m->nowned] = p;
    m->names[m->nowned] = dllm_strdup(full);
    m->numel[m->nowned++] = n;
    return p;
}

static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static int build(qwen35_model *m, loader *ld);

int qwen35_load(qwen35_model **out, const char *dir, dllm_err *err)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    qwen35_model *m = dllm_calloc(1, sizeof *m);
    int rc = qwen35_config_read(path, &m->cfg, err);
    st_archive *ar = NULL;
    rc = rc ? rc : st_open(&ar, dir, err);
    if (rc) {
        free(m);
        return rc;
    }
    /* which names the text model has; what is ignored */
    int nvis = 0, nmtp = 0;
    bool lm = false, plain = false;
    for (int i = 0; i < st_count(ar); i++) {
        const char *n = st_at(ar, i)->name;
        nvis += starts(n, "model.visual.") || starts(n, "visual.");
        nmtp += starts(n, "mtp.");
        lm |= starts(n, "model.language_model.");
        plain |= starts(n, "model.layers.") || starts(n, "model.embed_tokens.");
    }
    if (!lm && !plain) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: no text model weights (model.embed_tokens.weight or "
                          "model.language_model.*)%s", dir,
                          nvis ? ": a vision-only checkpoint" : "");
        st_close(ar);
        free(m);
        return rc;
    }
    if (nvis || nmtp)
        fprintf(stderr, "note: %s: %d vision and %d multi-token-prediction tensors ignored (the "
                        "text model is what runs)\n", dir, nvis, nmtp);
    loader ld = {m, ar, lm ? "model.language_model." : "model.", err, 0, 0};
    rc = build(m, &ld);
    st_close(ar);
    if (rc) {
        qwen35_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

qwen35_model *qwen35_create(const qwen35_config *c, uint64_t seed)
{
    qwen35_model *m = dllm_calloc(1, sizeof *m);
    m->cfg = *c;
    dllm_err err = {0};
    loader ld = {m, NULL, "model.", &err, 0, seed};
    if (build(m, &ld)) { /* random values cannot fail */
        qwen35_free(m);
        return NULL;
    }
    return m;
}

/* Every weight moved into one allocation (the trainable vector), the pointers with it. */
static void flatten(qwen35_model *m)
{
    m->off = dllm_malloc(((size_t)m->nowned + 1) * sizeof(size_t));
    size_t tot = 0;
    for (int i = 0; i < m->nowned; i++) {
        m->off[i] = tot;
        tot += m->numel[i];
    }
    m->nflat = tot;
    m->flat = dllm_malloc((tot + 1) * sizeof(float));
    for (int i = 0; i < m->nowned; i++)
        memcpy(m->flat + m->off[i], m->owned[i], m->numel[i] * sizeof(float));
    /* layer_w is float pointers only */
    const int per = (int)(sizeof(layer_w) / sizeof(float *));
    for (int i = 0; i < m->nowned; i++) {
        float *old = m->owned[i], *now = m->flat + m->off[i];
        if (m->embed == old)
            m->embed = now;
        if (m->head == old)
            m->head = now;
        if (m->fnorm == old)
            m->fnorm = now;
        for (int l = 0; l < m->cfg.L; l++) {
            float **f = (float **)&m->lw[l];
            for (int k = 0; k < per; k++)
                if (f[k] == old)
                    f[k] = now;
        }
        free(old);
        m->owned[i] = now;
    }
}

/* The text model's weights through ld (a checkpoint's or random), in one allocation. */
static int build(qwen35_model *m, loader *ld_)
{
    loader ld = *ld_;
    m->be = dllm_backend_cpu();
    const qwen35_config *c = &m->cfg;
    int C = c->C, D = conv_dim(c), VD = c->Hv * c->Dv;
    m->embed = load(&ld, "embed_tokens.weight", 2, c->V, C, 0, false, false);
    m->fnorm = load(&ld, "norm.weight", 1, C, 0, 0, true, false);
    m->head = c->tied ? m->embed : load(&ld, "lm_head.weight", 2, c->V, C, 0, false, true);
    m->lw = dllm_calloc((size_t)c->L, sizeof *m->lw);
    char nm[128];
#define LW(field, name, nd, d0, d1, d2, p1)                                                        \
    (snprintf(nm, sizeof nm, "layers.%d.%s", l, name),                                             \
     w->field = load(&ld, nm, nd, d0, d1, d2, p1, false))
    for (int l = 0; l < c->L && !ld.rc; l++) {
        layer_w *w = &m->lw[l];
        LW(n1, "input_layernorm.weight", 1, C, 0, 0, true);
        LW(n2, "post_attention_layernorm.weight", 1, C, 0, 0, true);
        if (c->kind[l] == QWEN35_LINEAR) {
            LW(qkv, "linear_attn.in_proj_qkv.weight", 2, D, C, 0, false);
            LW(z, "linear_attn.in_proj_z.weight", 2, VD, C, 0, false);
            LW(b, "linear_attn.in_proj_b.weight", 2, c->Hv, C, 0, false);
            LW(a, "linear_attn.in_proj_a.weight", 2, c->Hv, C, 0, false);
            LW(conv, "linear_attn.conv1d.weight", 3, D, 1, c->K, false);
            LW(A_log, "linear_attn.A_log", 1, c->Hv, 0, 0, false);
            LW(dt_bias, "linear_attn.dt_bias", 1, c->Hv, 0, 0, false);
            LW(gnorm, "linear_attn.norm.weight", 1, c->Dv, 0, 0, false);
            LW(out, "linear_attn.out_proj.weight", 2, C, VD, 0, false);
        } else {
            LW(q, "self_attn.q_proj.weight", 2, 2 * c->NH * c->HD, C, 0, false);
            LW(k, "self_attn.k_proj.weight", 2, c->NKV * c->HD, C, 0, false);
            LW(v, "self_attn.v_proj.weight", 2, c->NKV * c->HD, C, 0, false);
            LW(o, "self_attn.o_proj.weight", 2, C, c->NH * c->HD, 0, false);
            LW(qn, "self_attn.q_norm.weight", 1, c->HD, 0, 0, true);
            LW(kn, "self_attn.k_norm.weight", 1, c->HD, 0, 0, true);
        }
        LW(gate, "mlp.gate_proj.weight", 2, c->H, C, 0, false);
        LW(up, "mlp.up_proj.weight", 2, c->H, C, 0, false);
        LW(down, "mlp.down_proj.weight", 2, C, c->H, 0, false);
    }
#undef LW
    if (!ld.rc)
        flatten(m);
    return ld.rc;
}

static void ql_free(qwen35_model *m)
{
    bool host = m->be->kind == DLLM_BACKEND_CPU;
    for (int i = 0; i < m->nql; i++) {
        if (!host) { /* a device's arrays (dllm_backend_fp8_weight, _int8_weight) */
            dllm_backend_fp8_weight_free(m->be, &m->ql[i].f8);
            dllm_backend_int8_weight_free(m->be, &m->ql[i].i8);
            continue;
        }
        fp8_matrix_free(&m->ql[i].f8);
        int8_matrix_free(&m->ql[i].i8);
        nvfp4_matrix_free(&m->ql[i].f4);
    }
    free(m->ql);
    m->ql = NULL;
    m->nql = 0;
}

static void lora_free(qwen35_model *m)
{
    free(m->ad), free(m->llist);
    fdrop(m, m->lflat), fdrop(m, m->lgflat), fdrop(m, m->lmflat), fdrop(m, m->lvflat);
    m->ad = NULL, m->llist = NULL, m->lflat = m->lgflat = m->lmflat = m->lvflat = NULL;
    m->nl = 0, m->nlflat = 0, m->lrank = m->lmask = 0, m->lalpha = m->lscale = 0.0f;
}

void qwen35_free(qwen35_model *m)
{
    if (!m)
        return;
    ql_free(m);
    lora_free(m);
    for (int i = 0; i < m->nowned; i++) {
        if (!m->flat)
            free(m->owned[i]); /* a load that failed before flatten */
        free(m->names[i]);
    }
    if (m->be) { /* NULL: a load that failed before build */
        kept_free(m);
        fdrop(m, m->flat), fdrop(m, m->gflat), fdrop(m, m->mflat), fdrop(m, m->vflat);
        fdrop(m, m->master), fdrop(m, m->shift);
    }
    free(m->host);
    free(m->off);
    free(m->centred);
    free(m->mom);
    free(m->var);
    free(m->owned);
    free(m->names);
    free(m->numel);
    free(m->grad);
    free(m->lw);
    free(m);
}

/* ---- the cache ---------------------------------------------------------------------------- */

struct qwen35_cache {
    const qwen35_model *m; /* whose backend holds the arrays */
    int L, max_len, len;
    float **conv;  // (L) linear layers: (K-1, conv_dim) the last inputs of the convolution
    float **state; // (L) linear layers: (Hv, Dk, Dv) the recurrent state
    float **k, **v; // (L) full layers: (max_len, NKV*HD) K after k_norm and RoPE, V
};

qwen35_cache *qwen35_cache_new(const qwen35_model *m, int max_len)
{
    const qwen35_config *c = &m->cfg;
    qwen35_cache *k = dllm_calloc(1, sizeof *k);
    k->m = m;
    k->L = c->L;
    k->max_len = max_len > 0 ? max_len : 1;
    k->conv = dllm_calloc((size_t)c->L, sizeof(float *));
    k->state = dllm_calloc((size_t)c->L, sizeof(float *));
    k->k = dllm_calloc((size_t)c->L, sizeof(float *));
    k->v = dllm_calloc((size_t)c->L, sizeof(float *));
    for (int l = 0; l < c->L; l++)
        if (c->kind[l] == QWEN35_LINEAR) {
            k->conv[l] = fb(m, (size_t)(c->K - 1) * conv_dim(c));
            k->state[l] = fb(m, (size_t)c->Hv * c->Dk * c->Dv);
        } else {
            k->k[l] = fb(m, (size_t)k->max_len * c->NKV * c->HD);
            k->v[l] = fb(m, (size_t)k->max_len * c->NKV * c->HD);
        }
    return k;
}

void qwen35_cache_free(qwen35_cache *k)
{
    if (!k)
        return;
    const qwen35_model *m = k->m;
    for (int l = 0; l < k->L; l++) {
        fdrop(m, k->conv[l]);
        fdrop(m, k->state[l]);
        fdrop(m, k->k[l]);
        fdrop(m, k->v[l]);
    }
    free(k->conv);
    free(k->state);
    free(k->k);
    free(k->v);
    free(k);
}

int qwen35_cache_len(const qwen35_cache *c) { return c->len; }

/* ---- the forward ----------------------------------------------------------------------------- */

/* The index of weight W among m's (-1: none). */
static int widx(const qwen35_model *m, const float *W)
{
    for (int i = 0; i < m->nowned; i++)
        if (m->owned[i] == W)
            return i;
    return -1;
}

/* W's LoRA adapter, or NULL. */
static const q35_lora *adapter_of(const qwen35_model *m, const float *W)
{
    int i = m->ad ? widx(m, W) : -1;
    return i >= 0 && m->ad[i].A ? &m->ad[i] : NULL;
}

/* in (T, C) as the big projections read it: a bf16-rounded copy after qwen35_round_bf16
 * (*tmp to free), else in itself. */
static const float *proj_input(const qwen35_model *m, const float *in, size_t n, float **tmp)
{
    *tmp = NULL;
    if (!m->bf16)
        return in;
    *tmp = fb(m, n);
    OP(copy, *tmp, in, n * sizeof(float));
    OP(round_bf16, *tmp, n);
    return *tmp;
}

/* An adapter's product: on bf16 operands after qwen35_round_bf16 (the bf16 trainer, as
 * torch.autocast(bfloat16) runs a PEFT adapter), else in fp32 (the core's LoRA path,
 * dllm/transformer_fwd.c, does the same). */
static void lora_gemm(const qwen35_model *m, bool tA, bool tB, int M, int N, int K, float alpha,
                      const float *A, const float *B, float beta, float *C)
{
    if (m->bf16)
        OP(gemm_bf16, tA, tB, M, N, K, alpha, A, B, beta, C);
    else
        OP(gemm, tA, tB, M, N, K, alpha, A, B, beta, C);
}

/* out (T, D) += scale (x A^T) B^T: the adapter's part of a projection of x (T, C). */
static void lora_fwd(const qwen35_model *m, const q35_lora *ad, float *out, const float *x, int T)
{
    int r = m->lrank;
    float *xa = fb(m, (size_t)T * r); /* (T, r) */
    if (m->bf16)
        OP(gemm_bf16, false, true, T, r, ad->in, 1.0f, x, ad->A, 0.0f, xa);
    else
        OP(linear_fwd, xa, x, ad->A, T, ad->in, r);
    lora_gemm(m, false, true, T, ad->out, r, m->lscale, xa, ad->B, 1.0f, out);
    fdrop(m, xa);
}

/* out (T, D) = in (T, C) W^T for one of the big projections: with qwen35_round_bf16, the
 * input rounded to bf16 (W already is), the products in fp32; a quantised copy's product;
 * plus W's LoRA adapter (on the same input, lora_gemm's precision) when it has one. */
static void big_linear(const qwen35_model *m, float *out, const float *in, const float *W, int T,
                       int C, int D)
{
    const q35_lora *ad = adapter_of(m, W);
    if (ad) { /* the trainer (or its bf16 copy) with LoRA at run time */
        float *tmp;
        const float *x = proj_input(m, in, (size_t)T * C, &tmp);
        OP(linear_fwd, out, x, W, T, C, D);
        lora_fwd(m, ad, out, x, T);
        fdrop(m, tmp);
        return;
    }
    for (int i = 0; i < m->nql; i++)
        if (m->ql[i].w == W) { /* the quantised copy's product, activations quantised per call */
            qlin *q = &m->ql[i];
            if (q->kind == DLLM_ROLLOUT_INT8)
                OP(int8_linear_fwd, out, in, &q->i8, T, C, D);
            else if (q->kind == DLLM_ROLLOUT_NVFP4)
                OP(nvfp4_linear_fwd, out, in, &q->f4, T, C, D);
            else
                OP(fp8_linear_fwd, out, in, &q->f8, T, C, D);
            return;
        }
    float *tmp;
    const float *x = proj_input(m, in, (size_t)T * C, &tmp);
    OP(linear_fwd, out, x, W, T, C, D);
    fdrop(m, tmp);
}

/* The backward of big_linear (the trainer's numerics: no quantised copy): din (T, C) +=
 * dout W (straight through the bf16 rounding of the input); W's gradient (none under
 * LoRA: the base is frozen) and its adapter's accumulated, from the input as the forward
 * read it. */
static void big_linear_bwd(qwen35_model *m, float *din, const float *dout, const float *in,
                           const float *W, int T, int C, int D)
{
    float *tmp;
    const float *x = proj_input(m, in, (size_t)T * C, &tmp);
    OP(linear_bwd, din, grad_of(m, W), dout, x, W, T, C, D);
    const q35_lora *ad = adapter_of(m, W);
    if (ad) {
        int r = m->lrank;
        float *xa = fb(m, (size_t)T * r);  /* (T, r) x A^T */
        float *dxa = fb(m, (size_t)T * r); /* (T, r) */
        if (m->bf16) { /* lora_fwd's bf16 operands */
            OP(gemm_bf16, false, true, T, r, C, 1.0f, x, ad->A, 0.0f, xa);
            OP(gemm_bf16, false, false, T, r, D, m->lscale, dout, ad->B, 0.0f, dxa);
            OP(gemm_bf16, true, false, D, r, T, m->lscale, dout, xa, 1.0f, ad->dB);
            OP(gemm_bf16, false, false, T, C, r, 1.0f, dxa, ad->A, 1.0f, din);
            OP(gemm_bf16, true, false, r, C, T, 1.0f, dxa, x, 1.0f, ad->dA);
        } else {
            OP(linear_fwd, xa, x, ad->A, T, C, r);
            OP(gemm, false, false, T, r, D, m->lscale, dout, ad->B, 0.0f, dxa);
            OP(gemm, true, false, D, r, T, m->lscale, dout, xa, 1.0f, ad->dB);
            OP(linear_bwd, din, ad->dA, dxa, x, ad->A, T, C, r);
        }
        fdrop(m, xa);
        fdrop(m, dxa);
    }
    fdrop(m, tmp);
}

static void drop_all(const qwen35_model *m, float **bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fdrop(m, bufs[i]);
}
#define DROP_ALL(...)                                                                              \
    do {                                                                                           \
        float *bufs_[] = {__VA_ARGS__};                                                            \
        drop_all(m, bufs_, sizeof bufs_ / sizeof bufs_[0]);                                        \
    } while (0)

/* y (T, C) += the linear-attention mix of n1 (T, C) for layer l; caches advanced. */
static void linear_mix(const qwen35_model *m, const layer_w *w, float *conv_state, float *S,
                       const float *n1, int T, float *y)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, D = conv_dim(c), KD = c->Hk * c->Dk, VD = c->Hv * c->Dv;
    float *qkv = fb(m, (size_t)T * D), *cq = fb(m, (size_t)T * D);
    float *z = fb(m, (size_t)T * VD), *bb = fb(m, (size_t)T * c->Hv);
    float *aa = fb(m, (size_t)T * c->Hv), *g = fb(m, (size_t)T * c->Hv);
    float *beta = fb(m, (size_t)T * c->Hv);
    float *q = fb(m, (size_t)T * KD), *k = fb(m, (size_t)T * KD);
    float *v = fb(m, (size_t)T * VD), *o = fb(m, (size_t)T * VD);
    float *on = fb(m, (size_t)T * VD), *mix = fb(m, (size_t)T * C);
    big_linear(m, qkv, n1, w->qkv, T, C, D);
    big_linear(m, z, n1, w->z, T, C, VD);
    OP(linear_fwd, bb, n1, w->b, T, C, c->Hv);
    OP(linear_fwd, aa, n1, w->a, T, C, c->Hv);
    GD(conv_fwd, cq, NULL, conv_state, qkv, conv_state, w->conv, 1, T, D, c->K);
    OP(copy_2d, q, KD, cq, D, T, KD);
    OP(copy_2d, k, KD, cq + KD, D, T, KD);
    OP(copy_2d, v, VD, cq + 2 * KD, D, T, VD);
    GD(l2norm_fwd, q, NULL, q, T * c->Hk, c->Dk, 1e-6f);
    GD(l2norm_fwd, k, NULL, k, T * c->Hk, c->Dk, 1e-6f);
    GD(gates_fwd, g, beta, aa, bb, w->A_log, w->dt_bias, T, c->Hv);
    if (T == 1)
        GD(rule_recurrent_fwd, o, S, q, k, v, g, beta, S, 1, T, c->Hk, c->Dk, c->Hv, c->Dv);
    else
        GD(rule_chunked_fwd, o, S, q, k, v, g, beta, S, 1, T, c->Hk, c->Dk, c->Hv, c->Dv, 64);
    GD(gated_rmsnorm_fwd, on, NULL, o, z, w->gnorm, T * c->Hv, c->Dv, c->eps);
    big_linear(m, mix, on, w->out, T, VD, C);
    OP(add, y, mix, (size_t)T * C);
    DROP_ALL(qkv, cq, z, bb, aa, g, beta, q, k, v, o, on, mix);
}

/* q (T, NH, HD) and gate (T, NH, HD) out of q_proj's output qg (T, NH, 2 HD): per head its
 * HD query dims, then its HD gate dims. */
static void split_query(const qwen35_model *m, float *q, float *gate, const float *qg, int T)
{
    int NH = m->cfg.NH, HD = m->cfg.HD;
    OP(copy_2d, q, HD, qg, 2 * (size_t)HD, T * NH, HD);
    OP(copy_2d, gate, HD, qg + HD, 2 * (size_t)HD, T * NH, HD);
}

/* y (T, C) += the gated full-attention mix of n1 (T, C) at positions len.. over the cache's
 * keys and values kc, vc (max_len, NKV HD). */
static void full_mix(const qwen35_model *m, const layer_w *w, float *kc, float *vc, int len,
                     int max_len, const float *n1, int T, float *y)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, NH = c->NH, HD = c->HD, QD = NH * HD, KD = c->NKV * HD;
    float *qg = fb(m, (size_t)T * 2 * QD), *q = fb(m, (size_t)T * QD);
    float *gate = fb(m, (size_t)T * QD), *k = fb(m, (size_t)T * KD);
    float *att = fb(m, (size_t)T * QD), *mix = fb(m, (size_t)T * C);
    int32_t *pos = positions_on(m, len, T);
    big_linear(m, qg, n1, w->q, T, C, 2 * QD);
    split_query(m, q, gate, qg, T);
    big_linear(m, k, n1, w->k, T, C, KD);
    big_linear(m, vc + (size_t)len * KD, n1, w->v, T, C, KD);
    OP(rmsnorm_fwd, q, NULL, q, w->qn, T * NH, HD, c->eps);
    OP(rmsnorm_fwd, k, NULL, k, w->kn, T * c->NKV, HD, c->eps);
    GD(partial_rope_fwd, q, q, pos, T, NH, HD, c->rot, c->theta);
    GD(partial_rope_fwd, kc + (size_t)len * KD, k, pos, T, c->NKV, HD, c->rot, c->theta);
    OP(attention_cached, att, q, kc, vc, NULL, 1, T, len, max_len, NH, c->NKV, HD, true);
    GD(out_gate_fwd, att, att, gate, (size_t)T * QD);
    big_linear(m, mix, att, w->o, T, QD, C);
    OP(add, y, mix, (size_t)T * C);
    DROP_ALL(qg, q, gate, k, att, mix);
    fdrop(m, pos);
}

/* y (T, C) += layer l's mix of n1 (T, C), appended to the cache kc at its length. */
static void layer_mix(const qwen35_model *m, int l, qwen35_cache *kc, const float *n1, int T,
                      float *y)
{
    const layer_w *w = &m->lw[l];
    if (m->cfg.kind[l] == QWEN35_LINEAR)
        linear_mix(m, w, kc->conv[l], kc->state[l], n1, T, y);
    else
        full_mix(m, w, kc->k[l], kc->v[l], kc->len, kc->max_len, n1, T, y);
}

/* x (T, C) += layer l's MLP of x (its post-attention norm first); n (T, C), gu, up (T, H)
 * scratch. */
static void mlp_fwd(const qwen35_model *m, const layer_w *w, float *x, float *n, float *gu,
                    float *up, float *mlp, int T)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, H = c->H;
    OP(rmsnorm_fwd, n, NULL, x, w->n2, T, C, c->eps);
    big_linear(m, gu, n, w->gate, T, C, H);
    big_linear(m, up, n, w->up, T, C, H);
    OP(swiglu_fwd, gu, gu, up, (size_t)T * H);
    big_linear(m, mlp, gu, w->down, T, H, C);
    OP(add, x, mlp, (size_t)T * C);
}

/* x (T, C) = the last residual of ids [T] (host) appended to the cache; xs ((L + 1, T, C),
 * may be NULL) receives every layer's input and, last, x. */
static void extend_hidden(qwen35_model *m, qwen35_cache *kc, const int32_t *ids, int T,
                          float *x, float *xs)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, H = c->H;
    size_t TC = (size_t)T * C;
    float *n = fb(m, TC), *gu = fb(m, (size_t)T * H), *up = fb(m, (size_t)T * H);
    float *mlp = fb(m, TC);
    int32_t *dids = ints_on(m, ids, T);
    OP(embedding_fwd, x, dids, m->embed, T, C);
    for (int l = 0; l < c->L; l++) {
        if (xs)
            OP(copy, xs + (size_t)l * TC, x, TC * sizeof(float));
        OP(rmsnorm_fwd, n, NULL, x, m->lw[l].n1, T, C, c->eps);
        layer_mix(m, l, kc, n, T, x);
        mlp_fwd(m, &m->lw[l], x, n, gu, up, mlp, T);
    }
    if (xs)
        OP(copy, xs + (size_t)c->L * TC, x, TC * sizeof(float));
    kc->len += T;
    DROP_ALL(n, gu, up, mlp);
    fdrop(m, dids);
}

/* logits (R, V) = head(norm(x rows)) of R rows of x (C each). */
static void head_fwd(const qwen35_model *m, const float *x, int R, float *logits)
{
    const qwen35_config *c = &m->cfg;
    float *n = fb(m, (size_t)R * c->C);
    OP(rmsnorm_fwd, n, NULL, x, m->fnorm, R, c->C, c->eps);
    big_linear(m, logits, n, m->head, R, c->C, c->V);
    fdrop(m, n);
}

/* qwen35_extend with the logits written to the host (be_logits false) or to the model's
 * backend's memory. */
static int extend_to(qwen35_model *m, qwen35_cache *kc, const int32_t *ids, int T,
                     float *logits, bool all_rows, bool be_logits, dllm_err *err)
{
    const qwen35_config *c = &m->cfg;
    if (T < 1 || kc->len + T > kc->max_len)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3.5: %d new tokens do not fit the cache (%d of %d used)", T,
                            kc->len, kc->max_len);
    for (int t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= c->V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3.5: token %d at %d outside the vocabulary [0, %d)", ids[t],
                                t, c->V);
    int C = c->C;
    float *x = fb(m, (size_t)T * C);
    extend_hidden(m, kc, ids, T, x, NULL);
    if (logits) {
        int r0 = all_rows ? 0 : T - 1;
        float *lg = be_logits ? logits : fb(m, (size_t)(T - r0) * c->V);
        head_fwd(m, x + (size_t)r0 * C, T - r0, lg);
        if (!be_logits) {
            OP(download, logits, lg, (size_t)(T - r0) * c->V * sizeof(float));
            fdrop(m, lg);
        }
    }
    fdrop(m, x);
    return 0;
}

int qwen35_extend(qwen35_model *m, qwen35_cache *kc, const int32_t *ids, int T, float *logits,
                  bool all_rows, dllm_err *err)
{
    return extend_to(m, kc, ids, T, logits, all_rows, false, err);
}

int qwen35_extend_last(qwen35_model *m, qwen35_cache *kc, const int32_t *ids, int T,
                       float *d_logits, dllm_err *err)
{
    return extend_to(m, kc, ids, T, d_logits, false, true, err);
}

static void layers_bwd(qwen35_model *m, const int32_t *ids, int T, const float *xs, float *dx);

/* ---- batches: the forward and backward behind the policy ---------------------------------
 * A row of a batch is its real tokens (keymask 1) run as one sequence: left padding is
 * dropped, so a row's logits are those of its tokens alone, as a padded batch's are for
 * the transformer core's causal models (positions count real tokens). */

static void kept_free(qwen35_model *m)
{
    qwen35_kept *k = &m->kept;
    free(k->rows), free(k->n), free(k->ids), free(k->idx);
    fdrop(m, k->xs);
    memset(k, 0, sizeof *k);
}

int qwen35_forward(qwen35_model *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                   const int32_t *rows, int n_rows, float *logits, bool keep, dllm_err *err)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, V = c->V, L = c->L;
    int R = rows ? n_rows : B * T;
    if (B < 1 || T < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3.5: empty batch (%d x %d)", B, T);
    for (int i = 0; i < B * T; i++)
        if ((!keymask || keymask[i]) && (tokens[i] < 0 || tokens[i] >= V))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3.5: token %d at row %d, position %d outside the "
                                "vocabulary [0, %d)", tokens[i], i / T, i % T, V);
    for (int r = 0; rows && r < R; r++)
        if (rows[r] < 0 || rows[r] >= B * T)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3.5: logits row %d outside %d x %d",
                                rows[r], B, T);
    kept_free(m);
    qwen35_kept *k = &m->kept;
    k->B = B, k->T = T, k->R = R;
    k->rows = dllm_malloc(((size_t)R + 1) * sizeof(int32_t));
    k->n = dllm_calloc((size_t)B, sizeof(int));
    k->ids = dllm_malloc((size_t)B * T * sizeof(int32_t));
    k->idx = dllm_malloc((size_t)B * T * sizeof(int));
    if (keep)
        k->xs = fb(m, (size_t)B * (L + 1) * T * C);
    for (int r = 0; r < R; r++)
        k->rows[r] = rows ? rows[r] : r;
    float *x = fb(m, (size_t)T * C), *xr = fb(m, (size_t)T * C), *lg = fb(m, (size_t)T * V);
    int *sel = dllm_malloc(((size_t)R + 1) * sizeof(int));
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int t = 0; t < T; t++) {
            bool real = !keymask || keymask[(size_t)b * T + t];
            k->idx[(size_t)b * T + t] = real ? n : -1;
            if (real)
                k->ids[(size_t)b * T + n++] = tokens[(size_t)b * T + t];
        }
        k->n[b] = n;
        if (!n)
            continue;
        qwen35_cache *kc = qwen35_cache_new(m, n);
        extend_hidden(m, kc, k->ids + (size_t)b * T, n, x,
                      keep ? k->xs + (size_t)b * (L + 1) * T * C : NULL);
        qwen35_cache_free(kc);
        /* the row's wanted positions through the head together, T rows at a time */
        int ns = 0;
        for (int r = 0; r < R; r++) {
            int rr = k->rows[r];
            if (rr / T != b)
                continue;
            if (k->idx[rr] < 0) /* a padding position: no token of its own, never scored */
                memset(logits + (size_t)r * V, 0, (size_t)V * sizeof(float));
            else
                sel[ns++] = r;
        }
        for (int f = 0; f < ns; f += T) {
            int cnt = ns - f < T ? ns - f : T;
            for (int j = 0; j < cnt; j++)
                OP(copy, xr + (size_t)j * C, x + (size_t)k->idx[k->rows[sel[f + j]]] * C,
                   (size_t)C * sizeof(float));
            head_fwd(m, xr, cnt, lg);
            for (int j = 0; j < cnt; j++)
                OP(download, logits + (size_t)sel[f + j] * V, lg + (size_t)j * V,
                   (size_t)V * sizeof(float));
        }
    }
    for (int r = 0; r < R; r++) /* rows of rows without a real token */
        if (!k->n[k->rows[r] / T])
            memset(logits + (size_t)r * V, 0, (size_t)V * sizeof(float));
    DROP_ALL(x, xr, lg);
    free(sel);
    k->valid = keep;
    return 0;
}

void qwen35_backward(qwen35_model *m, const float *dlogits)
{
    qwen35_kept *k = &m->kept;
    if (!k->valid)
        return;
    if (!m->grad)
        qwen35_zero_grad(m);
    const qwen35_config *c = &m->cfg;
    int C = c->C, V = c->V, L = c->L, T = k->T;
    size_t TC = (size_t)T * C;
    int *sel = dllm_malloc(((size_t)k->R + 1) * sizeof(int));
    int most = 1; /* the most rows of one batch row: the head's buffers are one row's */
    for (int b = 0; b < k->B; b++) {
        int R = 0;
        for (int r = 0; r < k->R; r++)
            R += k->rows[r] / T == b && k->idx[k->rows[r]] >= 0;
        most = R > most ? R : most;
    }
    float *xr = fb(m, (size_t)most * C), *nf = fb(m, (size_t)most * C);
    float *rsf = fb(m, most), *dlg = fb(m, (size_t)most * V), *dn = fb(m, (size_t)most * C);
    float *dxr = fb(m, (size_t)most * C), *dx = fb(m, TC);
    for (int b = 0; b < k->B; b++) {
        int n = k->n[b], R = 0;
        const float *xs = k->xs + (size_t)b * (L + 1) * TC;
        for (int r = 0; r < k->R; r++)
            if (k->rows[r] / T == b && k->idx[k->rows[r]] >= 0)
                sel[R++] = r;
        if (!n || !R)
            continue;
        for (int j = 0; j < R; j++) {
            OP(copy, xr + (size_t)j * C,
               xs + ((size_t)L * n + (size_t)k->idx[k->rows[sel[j]]]) * C,
               (size_t)C * sizeof(float));
            OP(upload, dlg + (size_t)j * V, dlogits + (size_t)sel[j] * V,
               (size_t)V * sizeof(float));
        }
        OP(rmsnorm_fwd, nf, rsf, xr, m->fnorm, R, C, c->eps);
        OP(memset0, dn, (size_t)R * C * sizeof(float));
        OP(memset0, dxr, (size_t)R * C * sizeof(float));
        big_linear_bwd(m, dn, dlg, nf, m->head, R, C, V);
        OP(rmsnorm_bwd, dxr, grad_of(m, m->fnorm), dn, xr, m->fnorm, rsf, R, C);
        OP(memset0, dx, (size_t)n * C * sizeof(float)); /* xs and dx: (n, C) per layer */
        for (int j = 0; j < R; j++)
            OP(add, dx + (size_t)k->idx[k->rows[sel[j]]] * C, dxr + (size_t)j * C, (size_t)C);
        layers_bwd(m, k->ids + (size_t)b * T, n, xs, dx);
    }
    DROP_ALL(xr, nf, rsf, dlg, dn, dxr, dx);
    free(sel);
    k->valid = false;
}

int qwen35_seq_logprob(qwen35_model *m, const int32_t *prompt, int P, const int32_t *completion,
                       int L, double temperature, double *seq_logp, double *token_logp,
                       dllm_err *err)
{
    int V = m->cfg.V;
    if (P < 1 || L < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3.5: need a prompt and a completion (P=%d, L=%d)", P, L);
    if (!(temperature > 0) || !isfinite(temperature))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3.5: temperature %g must be positive",
                            temperature);
    for (int i = 0; i < L; i++)
        if (completion[i] < 0 || completion[i] >= V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3.5: completion token %d at %d outside the vocabulary "
                                "[0, %d)", completion[i], i, V);
    int T = P + L - 1;
    int32_t *seq = dllm_malloc((size_t)T * sizeof(int32_t));
    float *lg = dllm_malloc(((size_t)T * V + 1) * sizeof(float));
    memcpy(seq, prompt, (size_t)P * sizeof(int32_t));
    memcpy(seq + P, completion, (size_t)(L - 1) * sizeof(int32_t));
    qwen35_cache *kc = qwen35_cache_new(m, T);
    int rc = qwen35_extend(m, kc, seq, T, lg, true, err);
    double total = 0;
    for (int i = 0; i < L && !rc; i++) {
        const float *z = lg + (size_t)(P + i - 1) * V;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            mx = z[j] / temperature > mx ? z[j] / temperature : mx;
        for (int j = 0; j < V; j++)
            sum += exp(z[j] / temperature - mx);
        double lp = z[completion[i]] / temperature - mx - log(sum);
        if (token_logp)
            token_logp[i] = lp;
        total += lp;
    }
    if (!rc && seq_logp)
        *seq_logp = total;
    qwen35_cache_free(kc);
    free(seq);
    free(lg);
    return rc;
}

int qwen35_greedy(qwen35_model *m, const int32_t *prompt, int P, int G, int eos, int32_t *out,
                  int *n, dllm_err *err)
{
    int V = m->cfg.V;
    float *lg = dllm_malloc(((size_t)V + 1) * sizeof(float));
    qwen35_cache *kc = qwen35_cache_new(m, P + G);
    int rc = qwen35_extend(m, kc, prompt, P, lg, false, err), g = 0;
    for (; g < G && !rc; g++) {
        int32_t tok = 0;
        for (int j = 1; j < V; j++)
            if (lg[j] > lg[tok])
                tok = j;
        out[g] = tok;
        if (tok == eos || g == G - 1) {
            g++;
            break;
        }
        rc = qwen35_extend(m, kc, &tok, 1, lg, false, err);
    }
    for (int r = g; r < G && !rc; r++)
        out[r] = eos >= 0 ? eos : 0;
    if (n)
        *n = g;
    qwen35_cache_free(kc);
    free(lg);
    return rc;
}

/* ---- the next-token loss and its gradient ----------------------------------------------------
 * Only each layer's input is kept; a layer's activations are recomputed when the backward
 * reaches it (one layer's worth of memory), then differentiated through the ops' backward. */

/* The gradient buffer of weight p (its owner's index), allocated zeroed on first use. */
static float *grad_of(qwen35_model *m, const float *p)
{
    if (m->lrank)
        return NULL; /* LoRA: the base weights are frozen */
    for (int i = 0; i < m->nowned; i++)
        if (m->owned[i] == p)
            return m->grad[i];
    return NULL;
}

void qwen35_zero_grad(qwen35_model *m)
{
    if (m->lrank) { /* the adapters' gradients (allocated with them) */
        OP(memset0, m->lgflat, m->nlflat * sizeof(float));
        return;
    }
    if (!m->grad) {
        m->gflat = fb(m, m->nflat);
        m->grad = dllm_calloc((size_t)m->nowned, sizeof(float *));
        for (int i = 0; i < m->nowned; i++)
            m->grad[i] = m->gflat + m->off[i];
    }
    OP(memset0, m->gflat, m->nflat * sizeof(float));
}

const float *qwen35_grad(const qwen35_model *m, const char *name, size_t *n)
{
    if (m->be->kind != DLLM_BACKEND_CPU)
        return NULL; /* a device's array */
    for (int i = 0; i < m->nl; i++)
        if (!strcmp(m->llist[i].name, name)) {
            if (n)
                *n = m->llist[i].numel;
            return m->llist[i].grad;
        }
    for (int i = 0; m->grad && i < m->nowned; i++)
        if (!strcmp(m->names[i], name)) {
            if (n)
                *n = m->numel[i];
            return m->grad[i];
        }
    return NULL;
}

/* dn1 (T, C) += d(linear mix)/d n1 given dmix (T, C); weight gradients accumulated. */
static void linear_mix_bwd(qwen35_model *m, const layer_w *w, const float *n1, int T,
                           const float *dmix, float *dn1)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, D = conv_dim(c), KD = c->Hk * c->Dk, VD = c->Hv * c->Dv, Hv = c->Hv;
    size_t TD = (size_t)T * D, TK = (size_t)T * KD, TV = (size_t)T * VD, TH = (size_t)T * Hv;
    float *qkv = fb(m, TD), *pre = fb(m, TD), *cq = fb(m, TD), *z = fb(m, TV);
    float *bb = fb(m, TH), *aa = fb(m, TH), *g = fb(m, TH), *beta = fb(m, TH);
    float *q = fb(m, TK), *k = fb(m, TK), *v = fb(m, TV), *rq = fb(m, (size_t)T * c->Hk);
    float *rk = fb(m, (size_t)T * c->Hk), *o = fb(m, TV), *on = fb(m, TV);
    float *rs = fb(m, (size_t)T * Hv);
    /* recompute */
    big_linear(m, qkv, n1, w->qkv, T, C, D);
    big_linear(m, z, n1, w->z, T, C, VD);
    OP(linear_fwd, bb, n1, w->b, T, C, Hv);
    OP(linear_fwd, aa, n1, w->a, T, C, Hv);
    GD(conv_fwd, cq, pre, NULL, qkv, NULL, w->conv, 1, T, D, c->K);
    OP(copy_2d, q, KD, cq, D, T, KD);
    OP(copy_2d, k, KD, cq + KD, D, T, KD);
    OP(copy_2d, v, VD, cq + 2 * KD, D, T, VD);
    GD(l2norm_fwd, q, rq, q, T * c->Hk, c->Dk, 1e-6f);
    GD(l2norm_fwd, k, rk, k, T * c->Hk, c->Dk, 1e-6f);
    GD(gates_fwd, g, beta, aa, bb, w->A_log, w->dt_bias, T, Hv);
    GD(rule_chunked_fwd, o, NULL, q, k, v, g, beta, NULL, 1, T, c->Hk, c->Dk, Hv, c->Dv, 64);
    GD(gated_rmsnorm_fwd, on, rs, o, z, w->gnorm, T * Hv, c->Dv, c->eps);
    /* backward (every gradient buffer starts zeroed: the backend's alloc) */
    float *don = fb(m, TV), *dO = fb(m, TV), *dz = fb(m, TV), *dq = fb(m, TK);
    float *dk = fb(m, TK), *dg = fb(m, TH), *dbeta = fb(m, TH), *daa = fb(m, TH);
    float *dbb = fb(m, TH), *dcq = fb(m, TD), *dqkv = fb(m, TD);
    float *dvt = fb(m, TV), *dqn = fb(m, TK), *dkn = fb(m, TK);
    big_linear_bwd(m, don, dmix, on, w->out, T, VD, C);
    GD(gated_rmsnorm_bwd, dO, dz, grad_of(m, w->gnorm), don, o, z, w->gnorm, rs, T * Hv, c->Dv);
    GD(rule_bwd, dqn, dkn, dvt, dg, dbeta, NULL, dO, q, k, v, g, beta, NULL, 1, T, c->Hk, c->Dk, Hv,
       c->Dv);
    GD(gates_bwd, daa, dbb, grad_of(m, w->A_log), grad_of(m, w->dt_bias), dg, dbeta, aa, bb,
       w->A_log, w->dt_bias, T, Hv);
    GD(l2norm_bwd, dq, dqn, q, rq, T * c->Hk, c->Dk);
    GD(l2norm_bwd, dk, dkn, k, rk, T * c->Hk, c->Dk);
    OP(copy_2d, dcq, D, dq, KD, T, KD);
    OP(copy_2d, dcq + KD, D, dk, KD, T, KD);
    OP(copy_2d, dcq + 2 * KD, D, dvt, VD, T, VD);
    GD(conv_bwd, dqkv, grad_of(m, w->conv), NULL, dcq, pre, qkv, NULL, w->conv, 1, T, D, c->K);
    big_linear_bwd(m, dn1, dqkv, n1, w->qkv, T, C, D);
    big_linear_bwd(m, dn1, dz, n1, w->z, T, C, VD);
    OP(linear_bwd, dn1, grad_of(m, w->b), dbb, n1, w->b, T, C, Hv);
    OP(linear_bwd, dn1, grad_of(m, w->a), daa, n1, w->a, T, C, Hv);
    DROP_ALL(qkv, pre, cq, z, bb, aa, g, beta, q, k, v, rq, rk, o, on, rs, don, dO, dz, dq, dk, dg,
             dbeta, daa, dbb, dcq, dqkv, dvt, dqn, dkn);
}

/* dn1 (T, C) += d(gated attention mix)/d n1 given dmix (T, C), positions 0 .. T-1: the
 * forward recomputed through the table's attention, which keeps what its backward needs. */
static void full_mix_bwd(qwen35_model *m, const layer_w *w, const float *n1, int T,
                         const float *dmix, float *dn1)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, NH = c->NH, NKV = c->NKV, HD = c->HD, QD = NH * HD, KD = NKV * HD;
    size_t TQ = (size_t)T * QD, TK = (size_t)T * KD;
    float *qg = fb(m, 2 * TQ), *q0 = fb(m, TQ), *gate = fb(m, TQ), *k0 = fb(m, TK);
    float *v = fb(m, TK), *qn = fb(m, TQ), *kn = fb(m, TK), *rsq = fb(m, (size_t)T * NH);
    float *rsk = fb(m, (size_t)T * NKV), *qr = fb(m, TQ), *kr = fb(m, TK);
    float *st = fb(m, OP(attn_state_floats, 1, T, NH)), *att = fb(m, TQ), *y = fb(m, TQ);
    int32_t *pos = positions_on(m, 0, T);
    big_linear(m, qg, n1, w->q, T, C, 2 * QD);
    split_query(m, q0, gate, qg, T);
    big_linear(m, k0, n1, w->k, T, C, KD);
    big_linear(m, v, n1, w->v, T, C, KD);
    OP(rmsnorm_fwd, qn, rsq, q0, w->qn, T * NH, HD, c->eps);
    OP(rmsnorm_fwd, kn, rsk, k0, w->kn, T * NKV, HD, c->eps);
    GD(partial_rope_fwd, qr, qn, pos, T, NH, HD, c->rot, c->theta);
    GD(partial_rope_fwd, kr, kn, pos, T, NKV, HD, c->rot, c->theta);
    OP(attention_fwd, att, st, qr, kr, v, NULL, 1, T, NH, NKV, HD, true);
    GD(out_gate_fwd, y, att, gate, TQ);
    /* backward (every gradient buffer starts zeroed: the backend's alloc) */
    float *dy = fb(m, TQ), *datt = fb(m, TQ), *dgate = fb(m, TQ), *dqg = fb(m, 2 * TQ);
    float *dqr = fb(m, TQ), *dkr = fb(m, TK), *dv = fb(m, TK), *dqn = fb(m, TQ);
    float *dkn = fb(m, TK), *dq0 = fb(m, TQ), *dk0 = fb(m, TK);
    big_linear_bwd(m, dy, dmix, y, w->o, T, QD, C);
    GD(out_gate_bwd, datt, dgate, dy, att, gate, TQ);
    OP(attention_bwd, dqr, dkr, dv, datt, att, st, qr, kr, v, NULL, 1, T, NH, NKV, HD, true);
    GD(partial_rope_bwd, dqn, dqr, pos, T, NH, HD, c->rot, c->theta);
    GD(partial_rope_bwd, dkn, dkr, pos, T, NKV, HD, c->rot, c->theta);
    OP(rmsnorm_bwd, dq0, grad_of(m, w->qn), dqn, q0, w->qn, rsq, T * NH, HD);
    OP(rmsnorm_bwd, dk0, grad_of(m, w->kn), dkn, k0, w->kn, rsk, T * NKV, HD);
    OP(copy_2d, dqg, 2 * (size_t)HD, dq0, HD, T * NH, HD);
    OP(copy_2d, dqg + HD, 2 * (size_t)HD, dgate, HD, T * NH, HD);
    big_linear_bwd(m, dn1, dqg, n1, w->q, T, C, 2 * QD);
    big_linear_bwd(m, dn1, dk0, n1, w->k, T, C, KD);
    big_linear_bwd(m, dn1, dv, n1, w->v, T, C, KD);
    DROP_ALL(qg, q0, gate, k0, v, qn, kn, rsq, rsk, qr, kr, st, att, y, dy, datt, dgate, dqg, dqr,
             dkr, dv, dqn, dkn, dq0, dk0);
    fdrop(m, pos);
}

/* The backward of the layers over ids [T] (host) from dx (T, C) = d loss / d (the last
 * residual): each layer recomputed from its input xs[l] ((L + 1, T, C)) and differentiated;
 * the weight gradients accumulated, the embedding's last. dx is overwritten. */
static void layers_bwd(qwen35_model *m, const int32_t *ids, int T, const float *xs, float *dx)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, H = c->H, L = c->L;
    size_t TC = (size_t)T * C, TH = (size_t)T * H;
    float *n = fb(m, TC), *gu = fb(m, TH), *up = fb(m, TH), *s = fb(m, TH);
    float *n2 = fb(m, TC), *h = fb(m, TC), *rs1 = fb(m, T), *rs2 = fb(m, T);
    float *dn = fb(m, TC), *dh = fb(m, TC), *ds = fb(m, TH);
    float *dgu = fb(m, TH), *dup = fb(m, TH);
    for (int l = L - 1; l >= 0; l--) {
        const layer_w *w = &m->lw[l];
        const float *xin = xs + (size_t)l * TC;
        /* recompute the layer: n1, the mix into h, then the MLP's inputs */
        OP(copy, h, xin, TC * sizeof(float));
        OP(rmsnorm_fwd, n, rs1, xin, w->n1, T, C, c->eps);
        qwen35_cache *kc = qwen35_cache_new(m, T);
        layer_mix(m, l, kc, n, T, h);
        qwen35_cache_free(kc);
        OP(rmsnorm_fwd, n2, rs2, h, w->n2, T, C, c->eps);
        big_linear(m, gu, n2, w->gate, T, C, H);
        big_linear(m, up, n2, w->up, T, C, H);
        OP(swiglu_fwd, s, gu, up, TH);
        /* x_out = h + down(s): dh = dx + MLP's */
        OP(memset0, ds, TH * sizeof(float));
        OP(memset0, dn, TC * sizeof(float));
        OP(copy, dh, dx, TC * sizeof(float));
        big_linear_bwd(m, ds, dx, s, w->down, T, H, C);
        OP(swiglu_bwd, dgu, dup, ds, gu, up, TH);
        big_linear_bwd(m, dn, dgu, n2, w->gate, T, C, H);
        big_linear_bwd(m, dn, dup, n2, w->up, T, C, H);
        OP(rmsnorm_bwd, dh, grad_of(m, w->n2), dn, h, w->n2, rs2, T, C);
        /* h = x_in + mix(n1): dx_in = dh + n1's */
        OP(memset0, dn, TC * sizeof(float));
        if (c->kind[l] == QWEN35_LINEAR)
            linear_mix_bwd(m, w, n, T, dh, dn);
        else
            full_mix_bwd(m, w, n, T, dh, dn);
        OP(copy, dx, dh, TC * sizeof(float));
        OP(rmsnorm_bwd, dx, grad_of(m, w->n1), dn, xin, w->n1, rs1, T, C);
    }
    int32_t *dids = ints_on(m, ids, T);
    OP(embedding_bwd, grad_of(m, m->embed), dx, dids, T, C);
    fdrop(m, dids);
    DROP_ALL(n, gu, up, s, n2, h, rs1, rs2, dn, dh, ds, dgu, dup);
}

int qwen35_loss_grad(qwen35_model *m, const int32_t *ids, int T, double *loss, dllm_err *err)
{
    const qwen35_config *c = &m->cfg;
    if (T < 2)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3.5: a loss needs 2 tokens or more (%d)",
                            T);
    for (int t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= c->V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "qwen3.5: token %d at %d outside the vocabulary [0, %d)", ids[t],
                                t, c->V);
    if (!m->grad)
        qwen35_zero_grad(m);
    int C = c->C, V = c->V, L = c->L;
    size_t TC = (size_t)T * C;
    /* forward, keeping each layer's input: xs[l] (T, C), xs[L] the last residual */
    float *xs = fb(m, (size_t)(L + 1) * TC), *x = fb(m, TC);
    qwen35_cache *kc = qwen35_cache_new(m, T);
    extend_hidden(m, kc, ids, T, x, xs);
    qwen35_cache_free(kc);
    /* head and loss: mean over the T-1 next-token targets */
    int R = T - 1;
    float *nf = fb(m, TC), *rsf = fb(m, T), *lg = fb(m, (size_t)R * V);
    float *lp = fb(m, R), *lse = fb(m, R), *dlp = fb(m, R), *dlg = fb(m, (size_t)R * V);
    float *hlp = dllm_malloc(((size_t)R + 1) * sizeof(float));
    int32_t *tgt = ints_on(m, ids + 1, R);
    OP(rmsnorm_fwd, nf, rsf, xs + (size_t)L * TC, m->fnorm, R, C, c->eps);
    big_linear(m, lg, nf, m->head, R, C, V);
    OP(xent_fwd, lp, lse, lg, tgt, R, V);
    OP(download, hlp, lp, (size_t)R * sizeof(float));
    double tot = 0;
    for (int r = 0; r < R; r++)
        tot -= hlp[r];
    if (loss)
        *loss = tot / R;
    for (int r = 0; r < R; r++)
        hlp[r] = -1.0f / (float)R;
    OP(upload, dlp, hlp, (size_t)R * sizeof(float));
    OP(xent_bwd, dlg, dlp, lg, lse, tgt, R, V);
    float *dx = fb(m, TC), *dn = fb(m, TC);
    big_linear_bwd(m, dn, dlg, nf, m->head, R, C, V);
    OP(rmsnorm_bwd, dx, grad_of(m, m->fnorm), dn, xs + (size_t)L * TC, m->fnorm, rsf, R, C);
    layers_bwd(m, ids, T, xs, dx);
    DROP_ALL(xs, x, nf, rsf, lg, lp, lse, dlp, dlg, dx, dn);
    fdrop(m, tgt);
    free(hlp);
    return 0;
}

/* AdamW's moments, zeroed, on first use. */
static void ensure_moments(qwen35_model *m)
{
    if (m->mom)
        return;
    m->mflat = fb(m, m->nflat);
    m->vflat = fb(m, m->nflat);
    m->mom = dllm_calloc((size_t)m->nowned, sizeof(float *));
    m->var = dllm_calloc((size_t)m->nowned, sizeof(float *));
    for (int i = 0; i < m->nowned; i++) {
        m->mom[i] = m->mflat + m->off[i];
        m->var[i] = m->vflat + m->off[i];
    }
}

/* w (n) += -1 (sign < 0) or +1: a zero-centred norm between 1 + w and w (bit for bit the
 * host's w -= 1, w += 1). */
static void shift_centred(qwen35_model *m, float *w, size_t n, int sign)
{
    if (!m->shift) {
        size_t k = 0;
        for (int i = 0; i < m->nowned; i++)
            if (m->centred[i] && m->numel[i] > k)
                k = m->numel[i];
        float *h = dllm_malloc((2 * k + 1) * sizeof(float));
        for (size_t j = 0; j < k; j++)
            h[j] = -1.0f, h[k + j] = 1.0f;
        m->shift = fb(m, 2 * k);
        OP(upload, m->shift, h, 2 * k * sizeof(float));
        m->nshift = (int)k;
        free(h);
    }
    OP(add, w, m->shift + (sign < 0 ? 0 : m->nshift), n);
}

/* adamw over every weight of P (the weights' layout: m->flat, or a vector like it); a
 * zero-centred norm is held as 1 + w: w itself is stepped, so the decay pulls w (not 1 + w)
 * towards 0. */
static void adamw_all(qwen35_model *m, float *P, int t, float lr, float b1, float b2, float eps,
                      float wd)
{
    ensure_moments(m);
    for (int i = 0; i < m->nowned; i++) {
        float *w = P + m->off[i];
        if (m->centred[i])
            shift_centred(m, w, m->numel[i], -1);
        OP(adamw, w, m->grad[i], m->mom[i], m->var[i], m->numel[i], t, lr, b1, b2, eps, wd);
        if (m->centred[i])
            shift_centred(m, w, m->numel[i], +1);
    }
}

void qwen35_adamw_step(qwen35_model *m, int t, float lr, float wd)
{
    if (m->lrank)
        OP(adamw, m->lflat, m->lgflat, qwen35_moment(m, 0), qwen35_moment(m, 1), m->nlflat, t,
           lr, 0.9f, 0.999f, 1e-8f, wd);
    else if (m->grad)
        adamw_all(m, m->flat, t, lr, 0.9f, 0.999f, 1e-8f, wd);
}

/* The global norm of g (n); a finite one clipped to a->max_norm (> 0). */
static double clipped_norm(qwen35_model *m, float *g, size_t n, const dllm_adamw_args *a)
{
    double norm = OP(grad_norm, g, n);
    if (isfinite(norm) && a->max_norm > 0)
        OP(clip_grad, g, n, a->max_norm);
    return norm;
}

double qwen35_optim_step(qwen35_model *m, const dllm_adamw_args *a)
{
    if (m->lrank) { /* the adapters, as the core's LoRA vector (no zero-centred entries) */
        double norm = clipped_norm(m, m->lgflat, m->nlflat, a);
        if (isfinite(norm))
            OP(adamw, m->lflat, m->lgflat, qwen35_moment(m, 0), qwen35_moment(m, 1), m->nlflat,
               a->t, a->lr, a->b1, a->b2, a->eps, a->wd);
        return norm;
    }
    if (!m->grad)
        qwen35_zero_grad(m);
    double norm = clipped_norm(m, m->gflat, m->nflat, a);
    if (isfinite(norm)) /* the fp32 masters where the model keeps them */
        adamw_all(m, m->master ? m->master : m->flat, a->t, a->lr, a->b1, a->b2, a->eps, a->wd);
    return norm;
}

void qwen35_keep_master(qwen35_model *m)
{
    if (m->master)
        return;
    m->master = fb(m, m->nflat);
    OP(copy, m->master, m->flat, m->nflat * sizeof(float));
}

bool qwen35_has_master(const qwen35_model *m) { return m->master != NULL; }

void qwen35_weights_from_master(qwen35_model *m)
{
    if (m->master)
        OP(copy, m->flat, m->master, m->nflat * sizeof(float));
    m->bf16 = false;
}

float *qwen35_params(qwen35_model *m, size_t *n)
{
    if (m->lrank) {
        if (n)
            *n = m->nlflat;
        return m->lflat;
    }
    if (n)
        *n = m->nflat;
    return m->master ? m->master : m->flat;
}

float *qwen35_weights(qwen35_model *m, size_t *n)
{
    if (n)
        *n = m->nflat;
    return m->flat;
}

float *qwen35_grads(qwen35_model *m)
{
    if (m->lrank)
        return m->lgflat;
    if (!m->grad)
        qwen35_zero_grad(m);
    return m->gflat;
}

float *qwen35_moment(qwen35_model *m, int which)
{
    if (m->lrank) {
        if (!m->lmflat) {
            m->lmflat = fb(m, m->nlflat);
            m->lvflat = fb(m, m->nlflat);
        }
        return which ? m->lvflat : m->lmflat;
    }
    ensure_moments(m);
    return which ? m->vflat : m->mflat;
}

dllm_backend *qwen35_backend(const qwen35_model *m) { return m->be; }

void qwen35_vec_move(qwen35_model *m, qwen35_vec which, size_t off, size_t n, float *buf,
                     bool write)
{
    float *v = which == QWEN35_VEC_PARAMS    ? qwen35_params(m, NULL)
               : which == QWEN35_VEC_GRADS   ? qwen35_grads(m)
               : which == QWEN35_VEC_WEIGHTS ? m->flat
                                             : qwen35_moment(m, which == QWEN35_VEC_ADAM_V);
    if (write)
        OP(upload, v + off, buf, n * sizeof(float));
    else
        OP(download, buf, v + off, n * sizeof(float));
}

const float *qwen35_params_host(qwen35_model *m, size_t *n)
{
    size_t k;
    float *p = qwen35_params(m, &k);
    if (n)
        *n = k;
    if (m->be->kind == DLLM_BACKEND_CPU)
        return p;
    if (m->nhost < k) {
        free(m->host);
        m->host = dllm_malloc((k + 1) * sizeof(float));
        m->nhost = k;
    }
    OP(download, m->host, p, k * sizeof(float));
    return m->host;
}

/* p (n floats of the host) into a new array of `to`'s memory; p freed. */
static float *move_vec(dllm_backend *to, float *p, size_t n)
{
    if (!p)
        return NULL;
    float *d = to->ops->alloc(to, (n + 1) * sizeof(float));
    to->ops->upload(to, d, p, n * sizeof(float));
    free(p);
    return d;
}

/* p moved with its array: from [old, old + n) to now. */
static float *rebase(float *p, const float *old, size_t n, float *now)
{
    if (!p || (uintptr_t)p < (uintptr_t)old || (uintptr_t)p >= (uintptr_t)(old + n))
        return p;
    return now + (p - old);
}

int qwen35_to_backend(qwen35_model *m, dllm_backend *be, dllm_err *err)
{
    if (!be || be == m->be)
        return 0;
    if (m->be->kind != DLLM_BACKEND_CPU)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3.5: the model is on the %s backend "
                            "already", m->be->name);
    if (!dllm_backend_supports(be, DLLM_OP_GATED_DELTA))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "qwen3.5: the %s backend has no Gated "
                            "DeltaNet ops (%s)", be->name,
                            dllm_backend_op_name(DLLM_OP_GATED_DELTA));
    kept_free(m);
    ql_free(m); /* a quantised copy is made again where it runs (qwen35_quantise) */
    fdrop(m, m->shift);
    m->shift = NULL;
    float *old = m->flat, *now = move_vec(be, m->flat, m->nflat);
    m->flat = now;
    m->embed = rebase(m->embed, old, m->nflat, now);
    m->head = rebase(m->head, old, m->nflat, now);
    m->fnorm = rebase(m->fnorm, old, m->nflat, now);
    const int per = (int)(sizeof(layer_w) / sizeof(float *));
    for (int l = 0; l < m->cfg.L; l++) {
        float **f = (float **)&m->lw[l];
        for (int k = 0; k < per; k++)
            f[k] = rebase(f[k], old, m->nflat, now);
    }
    for (int i = 0; i < m->nowned; i++)
        m->owned[i] = now + m->off[i];
    m->gflat = move_vec(be, m->gflat, m->nflat);
    m->mflat = move_vec(be, m->mflat, m->nflat);
    m->vflat = move_vec(be, m->vflat, m->nflat);
    m->master = move_vec(be, m->master, m->nflat);
    for (int i = 0; i < m->nowned; i++) {
        if (m->grad)
            m->grad[i] = m->gflat + m->off[i];
        if (m->mom)
            m->mom[i] = m->mflat + m->off[i], m->var[i] = m->vflat + m->off[i];
    }
    if (m->lrank) {
        float *ol = m->lflat, *og = m->lgflat;
        m->lflat = move_vec(be, m->lflat, m->nlflat);
        m->lgflat = move_vec(be, m->lgflat, m->nlflat);
        m->lmflat = move_vec(be, m->lmflat, m->nlflat);
        m->lvflat = move_vec(be, m->lvflat, m->nlflat);
        for (int i = 0; i < m->nl; i++) {
            m->llist[i].data = rebase(m->llist[i].data, ol, m->nlflat, m->lflat);
            m->llist[i].grad = rebase(m->llist[i].grad, og, m->nlflat, m->lgflat);
        }
        for (int i = 0; i < m->nowned; i++) {
            q35_lora *ad = &m->ad[i];
            ad->A = rebase(ad->A, ol, m->nlflat, m->lflat);
            ad->B = rebase(ad->B, ol, m->nlflat, m->lflat);
            ad->dA = rebase(ad->dA, og, m->nlflat, m->lgflat);
            ad->dB = rebase(ad->dB, og, m->nlflat, m->lgflat);
        }
    }
    m->be = be;
    return 0;
}

/* ---- LoRA ------------------------------------------------------------------------------ */

const char *const qwen35_lora_names[QWEN35_NLORA] = {
    "in_proj_qkv", "in_proj_z", "out_proj", "q_proj",  "k_proj",
    "v_proj",      "o_proj",    "gate_proj", "up_proj", "down_proj"};

int qwen35_lora_bit(const char *name)
{
    for (int j = 0; name && j < QWEN35_NLORA; j++)
        if (!strcmp(name, qwen35_lora_names[j]))
            return 1 << j;
    return 0;
}

const char *qwen35_lora_list(char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int j = 0; j < QWEN35_NLORA && n < cap; j++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", qwen35_lora_names[j],
                              j == QWEN35_NLORA - 2 ? " or " : j < QWEN35_NLORA - 1 ? ", " : "");
    return buf;
}

/* LLaDA's names for the projections Qwen3 and Qwen3.5 share, as the registry accepts them
 * (the default target list is LLaDA's seven). */
static int alias_bit(const char *name)
{
    static const char *const llada[][2] = {
        {"attn_out", "o_proj"}, {"ff_proj", "gate_proj"}, {"ff_out", "down_proj"}};
    for (size_t i = 0; name && i < sizeof llada / sizeof llada[0]; i++)
        if (!strcmp(name, llada[i][0]))
            return qwen35_lora_bit(llada[i][1]);
    return qwen35_lora_bit(name);
}

int qwen35_lora_mask(const char *const *names, int n, const char *what, int *mask, dllm_err *err)
{
    const int all = (1 << QWEN35_NLORA) - 1;
    const int gdn = qwen35_lora_bit("in_proj_qkv") | qwen35_lora_bit("in_proj_z") |
                    qwen35_lora_bit("out_proj");
    *mask = n > 0 ? 0 : all;
    for (int i = 0; i < n; i++) {
        int bit = alias_bit(names[i]);
        char list[200];
        if (!bit)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: unknown LoRA target '%s' (expected %s)", what,
                                names[i] ? names[i] : "(null)",
                                qwen35_lora_list(list, sizeof list));
        *mask |= bit;
    }
    /* every projection of a layer of the core (the default list) and no Gated DeltaNet
     * name: every projection of Qwen3.5's layers, as the default means for the others */
    if (*mask == (all & ~gdn))
        *mask = all;
    return 0;
}

/* (out, in) of target j (qwen35_lora_names' order) in c. */
static void lora_dims(const qwen35_config *c, int j, int *out, int *in)
{
    const int dims[QWEN35_NLORA][2] = {
        {conv_dim(c), c->C}, {c->Hv * c->Dv, c->C}, {c->C, c->Hv * c->Dv},
        {2 * c->NH * c->HD, c->C}, {c->NKV * c->HD, c->C}, {c->NKV * c->HD, c->C},
        {c->C, c->NH * c->HD}, {c->H, c->C}, {c->H, c->C}, {c->C, c->H}};
    *out = dims[j][0], *in = dims[j][1];
}

int64_t qwen35_lora_numel(const qwen35_config *c, int rank, int mask)
{
    int64_t n = 0;
    for (int l = 0; l < c->L; l++)
        for (int j = 0; j < QWEN35_NLORA; j++) {
            /* 0-2: the Gated DeltaNet layers', 3-6: the full ones', 7-9: every layer's */
            bool has = j >= 7 || (j < 3) == (c->kind[l] == QWEN35_LINEAR);
            int o, i;
            lora_dims(c, j, &o, &i);
            if (has && ((mask >> j) & 1))
                n += (int64_t)rank * (o + i);
        }
    return n;
}

/* Which target (0 .. QWEN35_NLORA-1) weight `name` is ("...linear_attn.out_proj.weight"),
 * -1 if none. */
static int lora_slot(const char *name)
{
    size_t n = strlen(name);
    for (int j = 0; j < QWEN35_NLORA; j++) {
        size_t k = strlen(qwen35_lora_names[j]);
        if (n > k + 8 && !strcmp(name + n - 7, ".weight") &&
            !strncmp(name + n - 7 - k, qwen35_lora_names[j], k) && name[n - 8 - k] == '.')
            return j;
    }
    return -1;
}

static void lparam(dllm_param *p, const char *mod, const char *ab, int64_t d0, int64_t d1)
{
    snprintf(p->name, sizeof p->name, "base_model.model.%s.lora_%s.weight", mod, ab);
    p->ndim = 2, p->shape[0] = d0, p->shape[1] = d1;
    p->numel = (size_t)d0 * (size_t)d1;
}

void qwen35_lora_enable(qwen35_model *m, int rank, float alpha, int mask, uint64_t seed)
{
    lora_free(m);
    /* the base is frozen: its gradients and moments go */
    fdrop(m, m->gflat), fdrop(m, m->mflat), fdrop(m, m->vflat);
    free(m->grad), free(m->mom), free(m->var);
    m->gflat = m->mflat = m->vflat = NULL;
    m->grad = m->mom = m->var = NULL;
    kept_free(m);
    mask &= (1 << QWEN35_NLORA) - 1;
    if (rank <= 0 || !mask)
        return;
    m->lrank = rank, m->lalpha = alpha, m->lscale = alpha / (float)rank, m->lmask = mask;
    m->ad = dllm_calloc((size_t)m->nowned, sizeof *m->ad);
    m->llist = dllm_calloc((size_t)2 * m->nowned + 1, sizeof *m->llist);
    for (int i = 0; i < m->nowned; i++) {
        int j = lora_slot(m->names[i]);
        if (j < 0 || !((mask >> j) & 1))
            continue;
        char mod[256];
        snprintf(mod, sizeof mod, "%.*s", (int)(strlen(m->names[i]) - 7), m->names[i]);
        lora_dims(&m->cfg, j, &m->ad[i].out, &m->ad[i].in); /* A and B placed below */
        lparam(&m->llist[m->nl++], mod, "A", rank, m->ad[i].in);
        lparam(&m->llist[m->nl++], mod, "B", m->ad[i].out, rank);
    }
    for (int i = 0; i < m->nl; i++)
        m->nlflat += m->llist[i].numel;
    m->lflat = fb(m, m->nlflat); /* B = 0: the model unchanged */
    m->lgflat = fb(m, m->nlflat);
    float *h = dllm_calloc(m->nlflat + 1, sizeof(float)); /* A drawn on the host */
    size_t off = 0;
    for (int i = 0; i < m->nl; i++) {
        m->llist[i].data = m->lflat + off;
        m->llist[i].grad = m->lgflat + off;
        off += m->llist[i].numel;
    }
    for (int i = 0, k = 0; i < m->nowned; i++) {
        q35_lora *ad = &m->ad[i];
        if (!ad->in)
            continue;
        ad->A = m->llist[k].data, ad->dA = m->llist[k++].grad;
        ad->B = m->llist[k].data, ad->dB = m->llist[k++].grad;
        /* PEFT: kaiming_uniform(a = sqrt(5)) on A (r, in) = U(-1/sqrt(in), 1/sqrt(in)) */
        double bound = 1.0 / sqrt((double)ad->in);
        dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, 2000000u + (uint64_t)i, 1);
        float *hA = h + (ad->A - m->lflat);
        for (size_t e = 0; e < (size_t)rank * ad->in; e++)
            hA[e] = (float)((2.0 * dllm_rng_uniform(&r) - 1.0) * bound);
    }
    OP(upload, m->lflat, h, m->nlflat * sizeof(float));
    free(h);
}

int qwen35_lora_info(const qwen35_model *m, float *alpha, int *mask)
{
    if (alpha)
        *alpha = m->lalpha;
    if (mask)
        *mask = m->lmask;
    return m->lrank;
}

int qwen35_lora_params(qwen35_model *m, const dllm_param **out)
{
    *out = m->llist;
    return m->nl;
}

void qwen35_lora_merge(const qwen35_model *m, qwen35_model *dst)
{
    for (int i = 0; m->ad && i < m->nowned; i++) {
        const q35_lora *ad = &m->ad[i];
        if (ad->A) /* dst (out, in) += scale B A, as the core merges */
            OP(gemm, false, false, ad->out, ad->in, m->lrank, m->lscale, ad->B, ad->A, 1.0f,
               dst->owned[i]);
    }
}

/* The adapters' list with its data on the host (*host: a copy to free, on a device). */
static dllm_param *lora_host(const qwen35_model *m, float **host)
{
    *host = NULL;
    if (m->be->kind == DLLM_BACKEND_CPU)
        return m->llist;
    *host = dllm_malloc((m->nlflat + 1) * sizeof(float));
    OP(download, *host, m->lflat, m->nlflat * sizeof(float));
    dllm_param *l = dllm_malloc(((size_t)m->nl + 1) * sizeof *l);
    for (int i = 0; i < m->nl; i++) {
        l[i] = m->llist[i];
        l[i].data = *host + (m->llist[i].data - m->lflat);
        l[i].grad = NULL;
    }
    return l;
}

int qwen35_lora_save(const qwen35_model *m, const char *path, dllm_err *err)
{
    if (!m->lrank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: the model has no LoRA adapters", path);
    float *host;
    dllm_param *l = lora_host(m, &host);
    int rc = param_io_write_file(l, m->nl, path, err);
    if (host)
        free(l), free(host);
    return rc;
}

int qwen35_lora_load(qwen35_model *m, const char *path, dllm_err *err)
{
    if (!m->lrank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: LoRA is not enabled on the model", path);
    float *host;
    dllm_param *l = lora_host(m, &host);
    int rc = param_io_read(l, m->nl, path, err);
    if (host) {
        if (!rc)
            OP(upload, m->lflat, host, m->nlflat * sizeof(float));
        free(l), free(host);
    }
    return rc;
}

void qwen35_round_bf16(qwen35_model *m)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, D = conv_dim(c), VD = c->Hv * c->Dv, QD = c->NH * c->HD, KD = c->NKV * c->HD;
    OP(round_bf16, m->embed, (size_t)c->V * C);
    if (m->head != m->embed)
        OP(round_bf16, m->head, (size_t)c->V * C);
    for (int l = 0; l < c->L; l++) {
        layer_w *w = &m->lw[l];
        if (c->kind[l] == QWEN35_LINEAR) {
            OP(round_bf16, w->qkv, (size_t)D * C);
            OP(round_bf16, w->z, (size_t)VD * C);
            OP(round_bf16, w->out, (size_t)C * VD);
        } else {
            OP(round_bf16, w->q, (size_t)2 * QD * C);
            OP(round_bf16, w->k, (size_t)KD * C);
            OP(round_bf16, w->v, (size_t)KD * C);
            OP(round_bf16, w->o, (size_t)C * QD);
        }
        OP(round_bf16, w->gate, (size_t)c->H * C);
        OP(round_bf16, w->up, (size_t)c->H * C);
        OP(round_bf16, w->down, (size_t)C * c->H);
    }
    m->bf16 = true;
}

/* ---- copies and checkpoints ---------------------------------------------------------------- */

qwen35_model *qwen35_clone(const qwen35_model *m)
{
    qwen35_model *d = qwen35_create(&m->cfg, 0);
    dllm_err err = {0};
    if (d && qwen35_to_backend(d, m->be, &err)) { /* m is there: the backend can hold it */
        qwen35_free(d);
        return NULL;
    }
    if (d)
        qwen35_copy_weights(d, m);
    return d;
}

void qwen35_copy_weights(qwen35_model *dst, const qwen35_model *src)
{
    const qwen35_model *m = src;
    OP(copy, dst->flat, src->master ? src->master : src->flat, src->nflat * sizeof(float));
    dst->bf16 = false;
    ql_free(dst);
}

int qwen35_quantise(qwen35_model *m, const dllm_precision *p, dllm_err *err)
{
    const qwen35_config *c = &m->cfg;
    int C = c->C, D = conv_dim(c), VD = c->Hv * c->Dv, QD = c->NH * c->HD, KD = c->NKV * c->HD;
    ql_free(m);
    bool host = m->be->kind == DLLM_BACKEND_CPU;
    const char *need = p->rollout == DLLM_ROLLOUT_INT8    ? "int8_linear_fwd"
                       : p->rollout == DLLM_ROLLOUT_NVFP4 ? "nvfp4_linear_fwd"
                                                          : NULL;
    if (!host && need &&
        !dllm_backend_supports(m->be, p->rollout == DLLM_ROLLOUT_INT8 ? DLLM_OP_INT8_LINEAR
                                                                      : DLLM_OP_NVFP4_LINEAR))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout.precision %s: the %s backend has no %s",
                            dllm_rollout_name(p->rollout), m->be->name, need);
    if (!host && p->rollout != DLLM_ROLLOUT_INT8 && p->fp8_scaling == FP8_SCALE_BLOCK) {
        char why[256];
        if (!dllm_backend_fp8_block_ok(m->be, why, sizeof why))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "fp8.scaling block: %s", why);
    }
    m->ql = dllm_calloc((size_t)c->L * 7, sizeof *m->ql);
    /* FP8 activations are quantised to match the weights' granularity (as the core's) */
    fp8_scaling act = p->fp8_scaling == FP8_SCALE_BLOCK     ? FP8_SCALE_GROUP
                      : p->fp8_scaling == FP8_SCALE_CHANNEL ? FP8_SCALE_CHANNEL
                                                            : FP8_SCALE_TENSOR;
    int rc = 0;
    for (int l = 0; l < c->L && !rc; l++) {
        const layer_w *w = &m->lw[l];
        const float *W[7];
        int O[7], I[7], n = 0;
#define Q(ptr, o, i) (W[n] = (ptr), O[n] = (o), I[n] = (i), n++)
        if (c->kind[l] == QWEN35_LINEAR)
            Q(w->qkv, D, C), Q(w->z, VD, C), Q(w->out, C, VD);
        else
            Q(w->q, 2 * QD, C), Q(w->k, KD, C), Q(w->v, KD, C), Q(w->o, C, QD);
        Q(w->gate, c->H, C), Q(w->up, c->H, C), Q(w->down, C, c->H);
#undef Q
        for (int j = 0; j < n && !rc; j++) {
            qlin *q = &m->ql[m->nql++];
            q->w = W[j];
            q->kind = p->rollout;
            if (!host) { /* a device's matrices, in the layout its linears read */
                if (p->rollout == DLLM_ROLLOUT_INT8) {
                    float *hw = dllm_malloc(((size_t)O[j] * I[j] + 1) * sizeof(float));
                    OP(download, hw, W[j], (size_t)O[j] * I[j] * sizeof(float));
                    rc = dllm_backend_int8_weight(m->be, &q->i8, hw, O[j], I[j], p->int8_scaling,
                                                  err);
                    free(hw);
                } else {
                    dllm_backend_fp8_weight(m->be, &q->f8, W[j], O[j], I[j], p->fp8_format,
                                            p->fp8_scaling, p->fp8_pow2_scale, act,
                                            p->rollout == DLLM_ROLLOUT_FP8);
                }
                continue;
            }
            if (p->rollout == DLLM_ROLLOUT_INT8) {
                rc = int8_quantise_weight(&q->i8, W[j], O[j], I[j], p->int8_scaling, err);
            } else if (p->rollout == DLLM_ROLLOUT_NVFP4) {
                rc = nvfp4_quantise_scaled(&q->f4, W[j], O[j], I[j], p->nvfp4_scaling, err);
                if (!rc)
                    nvfp4_matrix_cache_dequant(&q->f4); /* before any threaded use */
            } else {
                rc = fp8_quantise_weight(&q->f8, W[j], O[j], I[j], p->fp8_format,
                                         p->fp8_scaling, p->fp8_pow2_scale, err);
                q->f8.act_scaling = act;
                q->f8.fast = p->rollout == DLLM_ROLLOUT_FP8;
                if (!rc && !q->f8.fast)
                    fp8_matrix_cache_dequant(&q->f8);
            }
        }
    }
    /* the embedding and the head as the bf16 copy's: rounded, the head's input too */
    OP(round_bf16, m->embed, (size_t)c->V * C);
    if (m->head != m->embed)
        OP(round_bf16, m->head, (size_t)c->V * C);
    m->bf16 = true;
    return rc;
}

typedef struct {
    const float *p;
    bool centred;
} save_src;

/* The published values: a zero-centred norm's w = held - 1. */
static int save_fill(void *ctx, size_t off, size_t n, float *dst, dllm_err *err)
{
    (void)err;
    const save_src *s = ctx;
    for (size_t i = 0; i < n; i++)
        dst[i] = s->centred ? s->p[off + i] - 1.0f : s->p[off + i];
    return 0;
}

int qwen35_save(const qwen35_model *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
                dllm_err *err)
{
    int rc = qwen35_config_save(&m->cfg, dir, dtype == ST_BF16 ? "bfloat16" : "float32", err);
    if (rc)
        return rc;
    const qwen35_config *c = &m->cfg;
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "format", "pt");
    save_src *src = dllm_calloc((size_t)m->nowned + 1, sizeof *src);
    float *hflat = NULL; /* a device's weights, brought to the host to be written */
    if (m->be->kind != DLLM_BACKEND_CPU) {
        hflat = dllm_malloc((m->nflat + 1) * sizeof(float));
        OP(download, hflat, m->flat, m->nflat * sizeof(float));
    }
    for (int i = 0; i < m->nowned && !rc; i++) {
        /* written as qwen3_5_text: the text model's names at the top */
        const char *nm = m->names[i];
        char name[256];
        snprintf(name, sizeof name, "%s%s", starts(nm, "model.language_model.") ? "model." : "",
                 starts(nm, "model.language_model.") ? nm + strlen("model.language_model.") : nm);
        int64_t shape[3] = {(int64_t)m->numel[i], 0, 0};
        int nd = 1;
        if (strstr(name, "conv1d.weight")) {
            nd = 3, shape[0] = 2 * c->Hk * c->Dk + c->Hv * c->Dv, shape[1] = 1, shape[2] = c->K;
        } else if (strstr(name, "proj") || strstr(name, "embed_tokens") ||
                   !strcmp(name, "lm_head.weight")) {
            /* (out, in): in is the hidden size except for the projections into it */
            int64_t in = strstr(name, "down_proj") ? c->H
                         : strstr(name, "out_proj") ? (int64_t)c->Hv * c->Dv
                         : strstr(name, "o_proj")   ? (int64_t)c->NH * c->HD
                                                    : c->C;
            nd = 2, shape[1] = in, shape[0] = (int64_t)m->numel[i] / in;
        }
        src[i] = (save_src){hflat ? hflat + m->off[i] : m->owned[i], m->centred[i]};
        rc = st_writer_add_f32_fn(w, name, dtype, nd, shape, save_fill, &src[i], err);
    }
    rc = rc ? rc : st_writer_save_dir(w, dir, max_shard_bytes, err);
    st_writer_free(w);
    free(src);
    free(hflat);
    return rc;
}
