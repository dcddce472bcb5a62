/* qwen3.c: the Qwen3 decoder-only transformer (HF Qwen3ForCausalLM) in fp32
 * on the CPU, forward, backward and KV-cache decoding, built from the op table.
 *
 *   x_0 = embed_tokens[tokens]                                  (N, C), N = B*T
 *   layer l:  n1 = input_layernorm(x_l)
 *             qr, kr, v = q_proj n1, k_proj n1, v_proj n1
 *             q = RoPE(q_norm(qr)),  k = RoPE(k_norm(kr))       per-head RMSNorm (HD)
 *             y = softmax(q k^T / sqrt(HD) + causal + keymask) v    (GQA)
 *             h = x_l + o_proj y
 *             n2 = post_attention_layernorm(h);  s = silu(gate_proj n2) * up_proj n2
 *             x_{l+1} = h + down_proj s
 *   logits[r] = lm_head(norm(x_L[rows[r]]))      only the requested rows;
 *                                                lm_head = embed_tokens when tied
 * RoPE position of row (b, t) = number of real tokens before it in row b
 * (left padding; see qwen3.h).
 *
 * Gradient convention (as kernels/ops.h): parameter gradients accumulate
 * across qwen3_backward calls until qwen3_zero_grad; activation gradients are
 * scratch, zeroed here before each op that accumulates into them. With tied
 * embeddings the head's gradient and the embedding's both land in the one
 * embed_tokens gradient.
 *
 * LoRA on a layer linear: out = x W^T + (alpha/r) (x A^T) B^T, A (r, in),
 * B (out, r); base weights frozen, only A, B trainable; lm_head never.
 *
 * KV cache: K after k_norm and RoPE, and V, per layer; a new query at slot j
 * attends the cached slots s <= j whose key mask is 1 -- the same softmax as
 * op_attention_fwd's (fp32, max subtracted), so decoding reproduces the full
 * forward up to summation order.
 *
 * Precision (qwen3.h, as llada.c): a forward reads its weights through a
 * q3_view -- the fp32 master weights, the trainer's bf16 copy, or the rollout
 * copy (bf16, or FP8 layer linears plus bf16 embeddings/norms/lm_head) --
 * which also says where linear inputs are rounded to bf16. The rollout
 * forward has activation buffers of its own; KV-cache decoding reads the
 * rollout copy when qwen3_decode_at_rollout is on. The backward reads the
 * trainer view (the rounded weights under a bf16 trainer: straight-through). */
#include "dllm/qwen3.h"
#include "dllm/param_io.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The seven layer linears, in the bit order of the LORA_* enum. */
enum { LIN_Q, LIN_K, LIN_V, LIN_O, LIN_GATE, LIN_UP, LIN_DOWN, NLIN };
static const char *const lin_names[NLIN] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};
static const char *const lin_parent[NLIN] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                             "mlp", "mlp", "mlp"};

typedef struct {
    float *w[NLIN];  // q (NH*HD, C), k, v (NKV*HD, C), o (C, NH*HD),
                     // gate, up (H, C), down (C, H)
    float *q_norm;   // (HD)
    float *k_norm;   // (HD)
    float *ln1;      // (C) input_layernorm
    float *ln2;      // (C) post_attention_layernorm
} q3_layer;

typedef struct {
    float *A, *B;   // (r, in), (out, r)
    float *dA, *dB; // same shapes
    int in, out;
} lora_adapter;

/* Activations kept for backward, and backward scratch. */
typedef struct {
    int B, T, N, R;
    bool valid;                /* a keeping forward ran since the last change */
    size_t capN, capAtt, capR;
    int capL;                  /* layers with kept activations: L, or 1 (no grad) */
    int32_t *tokens;  // (N)
    uint8_t *keymask; // (N)
    int32_t *pos;     // (N) index among the real tokens of the row
    int32_t *rows;    // (R)
    float *resid;     // (L+1, N, C) residual stream entering layer l; [L] = final
    float *n1;        // (L, N, C)
    float *rstd1;     // (L, N)
    float *qr;        // (L, N, NH*HD) q_proj output (q_norm input)
    float *rstdq;     // (L, N*NH)
    float *q;         // (L, N, NH*HD) after q_norm and RoPE
    float *kr;        // (L, N, NKV*HD)
    float *rstdk;     // (L, N*NKV)
    float *k;         // (L, N, NKV*HD) after k_norm and RoPE
    float *v;         // (L, N, NKV*HD)
    float *att;       // (L, B, NH, T, T) softmax probabilities
    float *y;         // (L, N, NH*HD) attention output before o_proj
    float *h;         // (L, N, C)
    float *n2;        // (L, N, C)
    float *rstd2;     // (L, N)
    float *g, *u, *s; // (L, N, H) gate, up, silu(gate) * up
    float *xa;        // (L, NLIN, N, r) LoRA x A^T (only with LoRA)
    float *xr;        // (R, C) final residual rows
    float *nf;        // (R, C) norm(xr)
    float *rstdf;     // (R)
    /* backward scratch */
    float *dx, *dh, *dn;  // (N, C)
    float *dq, *dy, *dqr; // (N, NH*HD)
    float *dk, *dv, *dkr; // (N, NKV*HD)
    float *dg, *du, *ds;  // (N, H)
    float *dxa;           // (N, r)
    float *dxr, *dnf;     // (R, C)
} q3_acts;

/* The weights one forward reads, and where it rounds to bf16. */
typedef struct {
    float *buf;         // owned copy (NULL: the master weights)
    const float *embed; // (V, C)
    const float *norm;  // (C)
    const float *head;  // (V, C): the view's embed when tied
    q3_layer *lw;       // (L); w[j] == NULL where q8 replaces them
    fp8_matrix *q8;     // (L, NLIN) FP8 layer linears, or NULL
    bool round_lin;     // bf16 at the layer linears' inputs
    bool round_head;    // bf16 at lm_head's input
    bool lora;          // apply the LoRA adapters at run time (the trainer only:
                        // the rollout copies have them merged)
    size_t nbuf;        // floats in buf
} q3_view;

struct qwen3_model {
    dllm_model_config cfg;
    int C, L, NH, NKV, HD, H, V, QD, KD; /* QD = NH*HD, KD = NKV*HD */
    bool tied;

    float *params; // (n_params) HF order
    float *grads;  // (n_params), NULL under LoRA or before first use
    size_t n_params;
    float *embed;     // (V, C)
    q3_layer *lw;     // (L)
    float *norm;      // (C)
    float *head;      // (V, C): lm_head, or embed when tied
    float *d_embed, *d_norm, *d_head; /* gradients, NULL when frozen */
    q3_layer *lg;     // (L) gradient pointers, NULL when frozen
    qwen3_param *plist;
    int np;

    int lora_rank, lora_mask;
    float lora_alpha, lora_scale;
    float *lora_params, *lora_grads;
    size_t n_lora;
    lora_adapter *ad; // (L, NLIN); A == NULL where not targeted
    qwen3_param *llist;
    int nl;

    op_rope_table rope;
    q3_acts a;

    llada_precision prec; /* last applied by qwen3_rollout_sync */
    q3_view tv;           /* trainer: master weights or their bf16 copy */
    q3_view rv;           /* rollout copy (unused under rollout "trainer") */
    q3_acts ra;           /* activations of the rollout forward */
    bool decode_rollout;  /* KV-cache decoding reads the rollout copy */
};

int qwen3_lora_target_bit(const char *name)
{
    for (int j = 0; j < NLIN; j++)
        if (name && strcmp(name, lin_names[j]) == 0)
            return 1 << j;
    return llada_lora_target_bit(name);
}

/* ---- parameters ------------------------------------------------------------------- */

static void lin_shape(const qwen3_model *m, int j, int *out, int *in)
{
    switch (j) {
    case LIN_Q: *out = m->QD; *in = m->C; break;
    case LIN_K: case LIN_V: *out = m->KD; *in = m->C; break;
    case LIN_O: *out = m->C; *in = m->QD; break;
    case LIN_GATE: case LIN_UP: *out = m->H; *in = m->C; break;
    default: *out = m->C; *in = m->H; break;
    }
}

static void add_param(qwen3_param *p, int *np, const char *name, int ndim, int64_t d0, int64_t d1)
{
    qwen3_param *q = &p[(*np)++];
    snprintf(q->name, sizeof q->name, "%s", name);
    q->ndim = ndim;
    q->shape[0] = d0;
    q->shape[1] = ndim == 2 ? d1 : 0;
    q->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
}

static int check_config(const dllm_model_config *c, const char *where, dllm_err *err)
{
    if (c->arch != DLLM_ARCH_QWEN3)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: model_type is not qwen3", where);
    if (c->d_model <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
        c->mlp_hidden <= 0 || c->vocab_size <= 0 || c->embedding_size != c->vocab_size)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: non-positive or inconsistent model sizes",
                            where);
    if (c->head_dim <= 0 || c->head_dim % 2 || c->n_heads % c->n_kv_heads)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: head_dim %d must be even and num_attention_heads %d a multiple "
                            "of num_key_value_heads %d", where, c->head_dim, c->n_heads,
                            c->n_kv_heads);
    return 0;
}

/* Walks the parameter table in build order, pointing the layer structs at
 * base (data or gradients; NULL: all NULL). */
static void carve(qwen3_model *m, bool grads, float **embed, q3_layer *lw, float **norm,
                  float **head)
{
    int k = 0;
#define NEXT (grads ? m->plist[k++].grad : m->plist[k++].data)
    *embed = NEXT;
    for (int l = 0; l < m->L; l++) {
        for (int j = 0; j < NLIN; j++) {
            lw[l].w[j] = NEXT;
            if (j == LIN_O) { /* q_norm, k_norm follow o_proj in state_dict order */
                lw[l].q_norm = NEXT;
                lw[l].k_norm = NEXT;
            }
        }
        lw[l].ln1 = NEXT;
        lw[l].ln2 = NEXT;
    }
    *norm = NEXT;
    *head = m->tied ? *embed : NEXT;
#undef NEXT
}

/* ---- weight views (precision) ------------------------------------------------------ */

static void view_free(const qwen3_model *m, q3_view *v)
{
    free(v->buf);
    if (v->q8) {
        for (int k = 0; k < m->L * NLIN; k++)
            fp8_matrix_free(&v->q8[k]);
        free(v->q8);
    }
    free(v->lw);
    memset(v, 0, sizeof *v);
}

/* The fp32 master weights with LoRA at run time: the default trainer. */
static void view_master(qwen3_model *m, q3_view *v)
{
    view_free(m, v);
    v->lw = dllm_malloc((size_t)m->L * sizeof *v->lw);
    memcpy(v->lw, m->lw, (size_t)m->L * sizeof *v->lw);
    v->embed = m->embed;
    v->norm = m->norm;
    v->head = m->head;
    v->lora = true;
}

/* dst (out, in) = W + (alpha/r) B A for linear j of layer l (W alone without
 * an adapter there): the weight the rollout copy is built from. */
static void merged_weight(const qwen3_model *m, int l, int j, float *dst)
{
    int o, i;
    lin_shape(m, j, &o, &i);
    memcpy(dst, m->lw[l].w[j], (size_t)o * i * sizeof(float));
    const lora_adapter *ad = m->ad ? &m->ad[l * NLIN + j] : NULL;
    if (ad && ad->A)
        op_gemm(false, false, o, i, m->lora_rank, m->lora_scale, ad->B, ad->A, 1.0f, dst);
}

/* v = a bf16-rounded copy of the weights, LoRA merged when `merge`, without
 * the layer linears when `skip_lin` (FP8 replaces them). Reuses v's buffer
 * when the size allows (the sync after every optimizer step). Tied: the
 * copy's lm_head is its embedding. */
static void view_bf16_copy(qwen3_model *m, q3_view *v, bool merge, bool skip_lin)
{
    size_t n = m->n_params;
    for (int l = 0; skip_lin && l < m->L; l++)
        for (int j = 0; j < NLIN; j++) {
            int o, i;
            lin_shape(m, j, &o, &i);
            n -= (size_t)o * i;
        }
    if (!v->buf || v->nbuf != n) {
        free(v->buf);
        v->buf = dllm_malloc(n * sizeof(float));
        v->nbuf = n;
    }
    if (!v->lw)
        v->lw = dllm_calloc((size_t)m->L, sizeof *v->lw);
    float *dst = v->buf;
#define TAKE(field, src, cnt)                                                                    \
    do {                                                                                         \
        memcpy(dst, (src), (size_t)(cnt) * sizeof(float));                                       \
        field = dst;                                                                             \
        dst += (size_t)(cnt);                                                                    \
    } while (0)
    TAKE(v->embed, m->embed, (size_t)m->V * m->C);
    for (int l = 0; l < m->L; l++) {
        TAKE(v->lw[l].q_norm, m->lw[l].q_norm, m->HD);
        TAKE(v->lw[l].k_norm, m->lw[l].k_norm, m->HD);
        TAKE(v->lw[l].ln1, m->lw[l].ln1, m->C);
        TAKE(v->lw[l].ln2, m->lw[l].ln2, m->C);
        for (int j = 0; j < NLIN; j++) {
            int o, i;
            lin_shape(m, j, &o, &i);
            if (skip_lin) {
                v->lw[l].w[j] = NULL;
                continue;
            }
            v->lw[l].w[j] = dst;
            if (merge)
                merged_weight(m, l, j, dst);
            else
                memcpy(dst, m->lw[l].w[j], (size_t)o * i * sizeof(float));
            dst += (size_t)o * i;
        }
    }
    TAKE(v->norm, m->norm, m->C);
    if (m->tied)
        v->head = v->embed;
    else
        TAKE(v->head, m->head, (size_t)m->V * m->C);
#undef TAKE
    op_round_bf16(v->buf, n);
}

/* v = the FP8 rollout copy: layer linears quantised from the merged weights,
 * the rest rounded to bf16. */
static int view_fp8(qwen3_model *m, q3_view *v, const llada_precision *p, dllm_err *err)
{
    view_bf16_copy(m, v, false, true);
    if (!v->q8)
        v->q8 = dllm_calloc((size_t)m->L * NLIN, sizeof *v->q8);
    size_t maxw = 0;
    for (int j = 0; j < NLIN; j++) {
        int o, i;
        lin_shape(m, j, &o, &i);
        maxw = (size_t)o * i > maxw ? (size_t)o * i : maxw;
    }
    float *tmp = dllm_malloc(maxw * sizeof(float));
    /* activations are quantised to match the weights' granularity */
    fp8_scaling act = p->fp8_scaling == FP8_SCALE_BLOCK     ? FP8_SCALE_GROUP
                      : p->fp8_scaling == FP8_SCALE_CHANNEL ? FP8_SCALE_CHANNEL
                                                            : FP8_SCALE_TENSOR;
    int rc = 0;
    for (int l = 0; l < m->L && !rc; l++)
        for (int j = 0; j < NLIN && !rc; j++) {
            int o, i;
            lin_shape(m, j, &o, &i);
            fp8_matrix *q = &v->q8[l * NLIN + j];
            merged_weight(m, l, j, tmp);
            rc = fp8_quantise_weight(q, tmp, o, i, p->fp8_format, p->fp8_scaling,
                                     p->fp8_pow2_scale, err);
            if (!rc) {
                q->act_scaling = act;
                fp8_matrix_cache_dequant(q); /* before any threaded use */
            }
        }
    free(tmp);
    return rc;
}

static qwen3_model *model_alloc(const dllm_model_config *cfg)
{
    qwen3_model *m = dllm_calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->C = cfg->d_model;
    m->L = cfg->n_layers;
    m->NH = cfg->n_heads;
    m->NKV = cfg->n_kv_heads;
    m->HD = cfg->head_dim;
    m->H = cfg->mlp_hidden;
    m->V = cfg->vocab_size;
    m->QD = m->NH * m->HD;
    m->KD = m->NKV * m->HD;
    m->tied = cfg->weight_tying;

    m->plist = dllm_calloc((size_t)11 * m->L + 3, sizeof *m->plist);
    char nm[96];
    add_param(m->plist, &m->np, "model.embed_tokens.weight", 2, m->V, m->C);
    for (int l = 0; l < m->L; l++) {
        for (int j = 0; j < NLIN; j++) {
            int o, i;
            lin_shape(m, j, &o, &i);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.%s.weight", l, lin_parent[j],
                     lin_names[j]);
            add_param(m->plist, &m->np, nm, 2, o, i);
            if (j == LIN_O) {
                snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", l);
                add_param(m->plist, &m->np, nm, 1, m->HD, 0);
                snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", l);
                add_param(m->plist, &m->np, nm, 1, m->HD, 0);
            }
        }
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        add_param(m->plist, &m->np, nm, 1, m->C, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        add_param(m->plist, &m->np, nm, 1, m->C, 0);
    }
    add_param(m->plist, &m->np, "model.norm.weight", 1, m->C, 0);
    if (!m->tied)
        add_param(m->plist, &m->np, "lm_head.weight", 2, m->V, m->C);

    for (int i = 0; i < m->np; i++)
        m->n_params += m->plist[i].numel;
    m->params = dllm_malloc(m->n_params * sizeof(float));
    m->lw = dllm_calloc((size_t)m->L, sizeof *m->lw);
    m->lg = dllm_calloc((size_t)m->L, sizeof *m->lg);
    size_t off = 0;
    for (int i = 0; i < m->np; i++) {
        m->plist[i].data = m->params + off;
        off += m->plist[i].numel;
    }
    carve(m, false, &m->embed, m->lw, &m->norm, &m->head);
    op_rope_table_init(&m->rope, cfg->max_seq_len > 0 ? cfg->max_seq_len : 1, m->HD,
                       cfg->rope_theta);
    view_master(m, &m->tv);
    m->prec = (llada_precision){.trainer_bf16 = false, .rollout = LLADA_ROLLOUT_TRAINER,
                                .fp8_format = FP8_E4M3, .fp8_scaling = FP8_SCALE_BLOCK};
    return m;
}

qwen3_model *qwen3_create(const dllm_model_config *cfg, uint64_t seed)
{
    dllm_err err;
    if (check_config(cfg, "qwen3_create", &err)) {
        fprintf(stderr, "%s\n", err.msg);
        abort(); /* presets and callers validate configs; reaching here is a bug */
    }
    qwen3_model *m = model_alloc(cfg);
    /* Norm weights 1, matrices N(0, 0.02) (HF initializer_range). One stream
     * per (tensor, chunk): the result does not depend on the thread count. */
    enum { CHUNK = 1 << 16 };
    for (int i = 0; i < m->np; i++) {
        qwen3_param *p = &m->plist[i];
        if (p->ndim == 1) {
            for (size_t e = 0; e < p->numel; e++)
                p->data[e] = 1.0f;
            continue;
        }
        size_t nchunk = (p->numel + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
        for (size_t c = 0; c < nchunk; c++) {
            dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, (uint64_t)i, c);
            size_t e1 = (c + 1) * CHUNK < p->numel ? (c + 1) * CHUNK : p->numel;
            for (size_t e = c * CHUNK; e < e1; e++)
                p->data[e] = (float)(0.02 * dllm_rng_normal(&r));
        }
    }
    return m;
}

static void acts_free(q3_acts *a)
{
    void *bufs[] = {a->tokens, a->keymask, a->pos, a->rows, a->resid, a->n1, a->rstd1, a->qr,
                    a->rstdq, a->q, a->kr, a->rstdk, a->k, a->v, a->att, a->y, a->h, a->n2,
                    a->rstd2, a->g, a->u, a->s, a->xa, a->xr, a->nf, a->rstdf, a->dx, a->dh,
                    a->dn, a->dq, a->dy, a->dqr, a->dk, a->dv, a->dkr, a->dg, a->du, a->ds,
                    a->dxa, a->dxr, a->dnf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(a, 0, sizeof *a);
}

static void lora_free(qwen3_model *m)
{
    free(m->lora_params);
    free(m->lora_grads);
    free(m->ad);
    free(m->llist);
    m->lora_params = m->lora_grads = NULL;
    m->ad = NULL;
    m->llist = NULL;
    m->nl = 0;
    m->n_lora = 0;
    m->lora_rank = m->lora_mask = 0;
    m->lora_alpha = m->lora_scale = 0.0f;
}

void qwen3_free(qwen3_model *m)
{
    if (!m)
        return;
    acts_free(&m->a);
    acts_free(&m->ra);
    view_free(m, &m->tv);
    view_free(m, &m->rv);
    lora_free(m);
    op_rope_table_free(&m->rope);
    free(m->params);
    free(m->grads);
    free(m->lw);
    free(m->lg);
    free(m->plist);
    free(m);
}

const dllm_model_config *qwen3_config(const qwen3_model *m) { return &m->cfg; }

int qwen3_params(qwen3_model *m, const qwen3_param **out)
{
    *out = m->plist;
    return m->np;
}

int qwen3_lora_params(qwen3_model *m, const qwen3_param **out)
{
    *out = m->llist;
    return m->nl;
}

int qwen3_lora_info(const qwen3_model *m, float *alpha, int *mask)
{
    if (alpha)
        *alpha = m->lora_alpha;
    if (mask)
        *mask = m->lora_mask;
    return m->lora_rank;
}

static void set_base_grads(qwen3_model *m, float *grads)
{
    size_t off = 0;
    for (int i = 0; i < m->np; i++) {
        m->plist[i].grad = grads ? grads + off : NULL;
        off += m->plist[i].numel;
    }
    carve(m, true, &m->d_embed, m->lg, &m->d_norm, &m->d_head);
}

void qwen3_lora_enable(qwen3_model *m, int rank, float alpha, int mask, uint64_t seed)
{
    lora_free(m);
    acts_free(&m->a); /* the LoRA activations change size */
    acts_free(&m->ra);
    mask &= LORA_ALL;
    free(m->grads);
    m->grads = NULL;
    set_base_grads(m, NULL);
    if (rank <= 0 || mask == 0)
        return;

    m->lora_rank = rank;
    m->lora_alpha = alpha;
    m->lora_scale = alpha / (float)rank;
    m->lora_mask = mask;
    m->ad = dllm_calloc((size_t)m->L * NLIN, sizeof *m->ad);
    int ntarget = 0;
    for (int j = 0; j < NLIN; j++)
        ntarget += (mask >> j) & 1;
    m->llist = dllm_calloc((size_t)2 * ntarget * m->L, sizeof *m->llist);
    char nm[96];
    for (int l = 0; l < m->L; l++)
        for (int j = 0; j < NLIN; j++) {
            if (!((mask >> j) & 1))
                continue;
            int o, i;
            lin_shape(m, j, &o, &i);
            snprintf(nm, sizeof nm, "base_model.model.model.layers.%d.%s.%s.lora_A.weight", l,
                     lin_parent[j], lin_names[j]);
            add_param(m->llist, &m->nl, nm, 2, rank, i);
            snprintf(nm, sizeof nm, "base_model.model.model.layers.%d.%s.%s.lora_B.weight", l,
                     lin_parent[j], lin_names[j]);
            add_param(m->llist, &m->nl, nm, 2, o, rank);
        }
    for (int i = 0; i < m->nl; i++)
        m->n_lora += m->llist[i].numel;
    m->lora_params = dllm_calloc(m->n_lora, sizeof(float)); /* B = 0 */
    m->lora_grads = dllm_calloc(m->n_lora, sizeof(float));
    size_t off = 0;
    for (int i = 0; i < m->nl; i++) {
        m->llist[i].data = m->lora_params + off;
        m->llist[i].grad = m->lora_grads + off;
        off += m->llist[i].numel;
    }
    int k = 0;
    for (int l = 0; l < m->L; l++)
        for (int j = 0; j < NLIN; j++) {
            if (!((mask >> j) & 1))
                continue;
            lora_adapter *ad = &m->ad[l * NLIN + j];
            lin_shape(m, j, &ad->out, &ad->in);
            ad->A = m->llist[k].data;
            ad->dA = m->llist[k++].grad;
            ad->B = m->llist[k].data;
            ad->dB = m->llist[k++].grad;
            /* PEFT: kaiming_uniform(a = sqrt(5)) on A [r, in] = U(-1/sqrt(in), 1/sqrt(in)) */
            double bound = 1.0 / sqrt((double)ad->in);
            dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, 1000000u + (uint64_t)l * NLIN + j, 1);
            for (size_t e = 0; e < (size_t)rank * ad->in; e++)
                ad->A[e] = (float)((2.0 * dllm_rng_uniform(&r) - 1.0) * bound);
        }
}

float *qwen3_trainable(qwen3_model *m, size_t *n)
{
    if (m->lora_rank) {
        *n = m->n_lora;
        return m->lora_params;
    }
    *n = m->n_params;
    return m->params;
}

/* Base gradients exist only once needed (inference never pays for them). */
static void ensure_grads(qwen3_model *m)
{
    if (!m->lora_rank && !m->grads) {
        m->grads = dllm_calloc(m->n_params, sizeof(float));
        set_base_grads(m, m->grads);
    }
}

float *qwen3_grads(qwen3_model *m)
{
    ensure_grads(m);
    return m->lora_rank ? m->lora_grads : m->grads;
}

void qwen3_zero_grad(qwen3_model *m)
{
    ensure_grads(m);
    if (m->lora_rank)
        memset(m->lora_grads, 0, m->n_lora * sizeof(float));
    else
        memset(m->grads, 0, m->n_params * sizeof(float));
}

/* ---- activations ------------------------------------------------------------------ */

#define FALLOC(n) ((float *)dllm_malloc(((size_t)(n) + 1) * sizeof(float)))

/* Sizes the buffers for B*T rows, R head rows and `layers` layers of kept
 * activations (L for training; 1 without backward, the residual stream then
 * alternating between two slots). */
static void acts_ensure(const qwen3_model *m, q3_acts *a, int B, int T, int R, int layers)
{
    size_t N = (size_t)B * T, natt = (size_t)B * m->NH * T * T;
    if (a->tokens && N <= a->capN && natt <= a->capAtt && (size_t)R <= a->capR &&
        layers <= a->capL)
        return;
    size_t capN = N > a->capN ? N : a->capN;
    size_t capAtt = natt > a->capAtt ? natt : a->capAtt;
    size_t capR = (size_t)R > a->capR ? (size_t)R : a->capR;
    int capL = layers > a->capL ? layers : a->capL;
    acts_free(a);
    a->capN = capN;
    a->capAtt = capAtt;
    a->capR = capR;
    a->capL = capL;
    size_t L = (size_t)capL, C = (size_t)m->C, H = (size_t)m->H;
    size_t QD = (size_t)m->QD, KD = (size_t)m->KD, r = (size_t)m->lora_rank;
    a->tokens = dllm_malloc(capN * sizeof(int32_t));
    a->keymask = dllm_malloc(capN);
    a->pos = dllm_malloc(capN * sizeof(int32_t));
    a->rows = dllm_malloc((capR + 1) * sizeof(int32_t));
    a->resid = FALLOC((L + 1) * capN * C);
    a->n1 = FALLOC(L * capN * C);
    a->rstd1 = FALLOC(L * capN);
    a->qr = FALLOC(L * capN * QD);
    a->rstdq = FALLOC(L * capN * m->NH);
    a->q = FALLOC(L * capN * QD);
    a->kr = FALLOC(L * capN * KD);
    a->rstdk = FALLOC(L * capN * m->NKV);
    a->k = FALLOC(L * capN * KD);
    a->v = FALLOC(L * capN * KD);
    a->att = FALLOC(L * capAtt);
    a->y = FALLOC(L * capN * QD);
    a->h = FALLOC(L * capN * C);
    a->n2 = FALLOC(L * capN * C);
    a->rstd2 = FALLOC(L * capN);
    a->g = FALLOC(L * capN * H);
    a->u = FALLOC(L * capN * H);
    a->s = FALLOC(L * capN * H);
    a->xa = r ? FALLOC(L * NLIN * capN * r) : NULL;
    a->xr = FALLOC(capR * C);
    a->nf = FALLOC(capR * C);
    a->rstdf = FALLOC(capR);
}

/* Backward scratch, allocated by the first backward only. */
static void acts_ensure_bwd(qwen3_model *m)
{
    q3_acts *a = &m->a;
    if (a->dx)
        return;
    size_t N = a->capN, C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD;
    size_t KD = (size_t)m->KD, r = (size_t)m->lora_rank;
    a->dx = FALLOC(N * C);
    a->dh = FALLOC(N * C);
    a->dn = FALLOC(N * C);
    a->dq = FALLOC(N * QD);
    a->dy = FALLOC(N * QD);
    a->dqr = FALLOC(N * QD);
    a->dk = FALLOC(N * KD);
    a->dv = FALLOC(N * KD);
    a->dkr = FALLOC(N * KD);
    a->dg = FALLOC(N * H);
    a->du = FALLOC(N * H);
    a->ds = FALLOC(N * H);
    a->dxa = r ? FALLOC(N * r) : NULL;
    a->dxr = FALLOC(a->capR * C);
    a->dnf = FALLOC(a->capR * C);
}

/* ---- forward ---------------------------------------------------------------------- */

/* out (N, OUT) = inp (N, IN) W^T [+ scale (inp A^T) B^T] for linear j of
 * layer l, W read through the view v (FP8: the simulated W8A8 GEMM); xa (N,
 * r) receives inp A^T (required when the view applies LoRA there). */
static void lin_fwd(const qwen3_model *m, const q3_view *v, int l, int j, float *out,
                    const float *inp, int N, float *xa)
{
    int o, i;
    lin_shape(m, j, &o, &i);
    if (v->q8)
        op_fp8_linear_fwd(out, inp, &v->q8[l * NLIN + j], N, i, o);
    else
        op_linear_fwd(out, inp, v->lw[l].w[j], N, i, o);
    const lora_adapter *ad = v->lora && m->ad ? &m->ad[l * NLIN + j] : NULL;
    if (ad && ad->A) {
        int r = m->lora_rank;
        op_linear_fwd(xa, inp, ad->A, N, i, r);
        op_gemm(false, true, N, o, r, m->lora_scale, xa, ad->B, 1.0f, out);
    }
}

/* dinp (N, IN) += dout W [+ LoRA path]; dW, dA, dB accumulate where trainable. */
static void lin_bwd(qwen3_model *m, int l, int j, float *dinp, const float *dout,
                    const float *inp, int N)
{
    int o, i;
    lin_shape(m, j, &o, &i);
    op_linear_bwd(dinp, m->lg[l].w[j], dout, inp, m->tv.lw[l].w[j], N, i, o);
    const lora_adapter *ad = m->ad ? &m->ad[l * NLIN + j] : NULL;
    if (ad && ad->A) {
        int r = m->lora_rank;
        const float *xa = m->a.xa + ((size_t)l * NLIN + j) * m->a.capN * r;
        float *dxa = m->a.dxa; // (N, r)
        op_gemm(false, false, N, r, o, m->lora_scale, dout, ad->B, 0.0f, dxa);
        op_gemm(true, false, o, r, N, m->lora_scale, dout, xa, 1.0f, ad->dB);
        op_linear_bwd(dinp, ad->dA, dxa, inp, ad->A, N, i, r);
    }
}

static float *xa_slot(const qwen3_model *m, const q3_acts *a, size_t ls, int j)
{
    return a->xa ? a->xa + (ls * NLIN + (size_t)j) * a->capN * m->lora_rank : NULL;
}

static void add_to(float *y, const float *x, size_t n)
{
#pragma omp parallel for if (n > 65536)
    for (size_t e = 0; e < n; e++)
        y[e] += x[e];
}

static void rope_grow(qwen3_model *m, int npos)
{
    if (npos > m->rope.max_pos) { /* beyond max_position_embeddings: the table grows */
        op_rope_table_free(&m->rope);
        op_rope_table_init(&m->rope, npos, m->HD, m->cfg.rope_theta);
    }
}

/* keep: store every layer's activations for qwen3_backward (a = m->a). The
 * weights and the bf16 rounding points come from v; rounding is applied in
 * place to the saved linear inputs (n1, y, n2, s, nf), which serve nothing
 * but those linears, so the backward sees the rounded values. */
static int forward(qwen3_model *m, q3_acts *a, const q3_view *v, const int32_t *tokens,
                   const uint8_t *keymask, int B, int T, const int32_t *rows, int n_rows,
                   float *logits, bool keep)
{
    a->valid = false;
    if (B <= 0 || T <= 0) {
        fprintf(stderr, "qwen3_forward: empty batch (B=%d, T=%d)\n", B, T);
        return DLLM_EXIT_INPUT;
    }
    int N = B * T, R = rows ? n_rows : N;
    if (R < 0) {
        fprintf(stderr, "qwen3_forward: bad row count %d\n", n_rows);
        return DLLM_EXIT_INPUT;
    }
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0 || tokens[n] >= m->V) {
            fprintf(stderr, "qwen3_forward: token %d at (%d, %d) outside the vocabulary [0, %d)\n",
                    tokens[n], n / T, n % T, m->V);
            return DLLM_EXIT_INPUT;
        }
    for (int r = 0; rows && r < R; r++)
        if (rows[r] < 0 || rows[r] >= N) {
            fprintf(stderr, "qwen3_forward: row %d outside [0, %d)\n", rows[r], N);
            return DLLM_EXIT_INPUT;
        }
    rope_grow(m, T);
    acts_ensure(m, a, B, T, R, keep ? m->L : 1);
    a->B = B;
    a->T = T;
    a->N = N;
    a->R = R;
    memcpy(a->tokens, tokens, (size_t)N * sizeof(int32_t));
    for (int b = 0; b < B; b++) { /* positions: index among the row's real tokens */
        int real = 0;
        for (int t = 0; t < T; t++) {
            int n = b * T + t;
            a->keymask[n] = keymask ? (keymask[n] != 0) : 1;
            a->pos[n] = a->keymask[n] ? real++ : 0;
        }
    }
    for (int r = 0; r < R; r++)
        a->rows[r] = rows ? rows[r] : r;

    size_t C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD, KD = (size_t)m->KD;
    size_t sN = a->capN;
    float eps = m->cfg.rms_norm_eps;
    bool rl = v->round_lin;
    op_embedding_fwd(a->resid, a->tokens, v->embed, N, m->C);
    for (int l = 0; l < m->L; l++) {
        const q3_layer *w = &v->lw[l];
        size_t ls = keep ? (size_t)l : 0;
        size_t rx = keep ? (size_t)l : (size_t)l % 2, rn = keep ? rx + 1 : (size_t)(l + 1) % 2;
        float *x = a->resid + rx * sN * C, *xn = a->resid + rn * sN * C;
        float *n1 = a->n1 + ls * sN * C, *rstd1 = a->rstd1 + ls * sN;
        float *qr = a->qr + ls * sN * QD, *rstdq = a->rstdq + ls * sN * m->NH;
        float *kr = a->kr + ls * sN * KD, *rstdk = a->rstdk + ls * sN * m->NKV;
        float *q = a->q + ls * sN * QD, *k = a->k + ls * sN * KD, *vv = a->v + ls * sN * KD;
        float *att = a->att + ls * a->capAtt, *y = a->y + ls * sN * QD;
        float *h = a->h + ls * sN * C, *n2 = a->n2 + ls * sN * C, *rstd2 = a->rstd2 + ls * sN;
        float *g = a->g + ls * sN * H, *u = a->u + ls * sN * H, *s = a->s + ls * sN * H;

        // attention sub-block
        op_rmsnorm_fwd(n1, rstd1, x, w->ln1, N, m->C, eps);
        if (rl)
            op_round_bf16(n1, (size_t)N * C);
        lin_fwd(m, v, l, LIN_Q, qr, n1, N, xa_slot(m, a, ls, LIN_Q));
        lin_fwd(m, v, l, LIN_K, kr, n1, N, xa_slot(m, a, ls, LIN_K));
        lin_fwd(m, v, l, LIN_V, vv, n1, N, xa_slot(m, a, ls, LIN_V));
        op_rmsnorm_fwd(q, rstdq, qr, w->q_norm, N * m->NH, m->HD, eps);
        op_rmsnorm_fwd(k, rstdk, kr, w->k_norm, N * m->NKV, m->HD, eps);
        op_rope_fwd(q, q, a->pos, &m->rope, N, m->NH, m->HD);
        op_rope_fwd(k, k, a->pos, &m->rope, N, m->NKV, m->HD);
        op_attention_fwd(y, att, q, k, vv, a->keymask, B, T, m->NH, m->NKV, m->HD, true);
        if (rl)
            op_round_bf16(y, (size_t)N * QD);
        lin_fwd(m, v, l, LIN_O, h, y, N, xa_slot(m, a, ls, LIN_O));
        add_to(h, x, (size_t)N * C);
        // MLP sub-block
        op_rmsnorm_fwd(n2, rstd2, h, w->ln2, N, m->C, eps);
        if (rl)
            op_round_bf16(n2, (size_t)N * C);
        lin_fwd(m, v, l, LIN_GATE, g, n2, N, xa_slot(m, a, ls, LIN_GATE));
        lin_fwd(m, v, l, LIN_UP, u, n2, N, xa_slot(m, a, ls, LIN_UP));
        op_swiglu_fwd(s, g, u, (size_t)N * H);
        if (rl)
            op_round_bf16(s, (size_t)N * H);
        lin_fwd(m, v, l, LIN_DOWN, xn, s, N, xa_slot(m, a, ls, LIN_DOWN));
        add_to(xn, h, (size_t)N * C);
    }
    const float *xL = a->resid + (keep ? (size_t)m->L : (size_t)m->L % 2) * sN * C;
    for (int r = 0; r < R; r++)
        memcpy(a->xr + r * C, xL + (size_t)a->rows[r] * C, C * sizeof(float));
    op_rmsnorm_fwd(a->nf, a->rstdf, a->xr, v->norm, R, m->C, eps);
    if (v->round_head)
        op_round_bf16(a->nf, (size_t)R * C);
    op_linear_fwd(logits, a->nf, v->head, R, m->C, m->V);
    a->valid = keep;
    return 0;
}

int qwen3_forward(qwen3_model *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                  const int32_t *rows, int n_rows, float *logits)
{
    return forward(m, &m->a, &m->tv, tokens, keymask, B, T, rows, n_rows, logits, true);
}

int qwen3_forward_nograd(qwen3_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                         int T, const int32_t *rows, int n_rows, float *logits)
{
    return forward(m, &m->a, &m->tv, tokens, keymask, B, T, rows, n_rows, logits, false);
}

int qwen3_forward_rollout(qwen3_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                          int T, const int32_t *rows, int n_rows, float *logits)
{
    const q3_view *v = m->prec.rollout == LLADA_ROLLOUT_TRAINER ? &m->tv : &m->rv;
    return forward(m, &m->ra, v, tokens, keymask, B, T, rows, n_rows, logits, false);
}

/* ---- precision -------------------------------------------------------------------- */

llada_precision qwen3_get_precision(const qwen3_model *m) { return m->prec; }

void qwen3_decode_at_rollout(qwen3_model *m, bool on) { m->decode_rollout = on; }

int qwen3_rollout_sync(qwen3_model *m, const llada_precision *p, double *seconds, dllm_err *err)
{
    double t0 = dllm_now();
    if ((unsigned)p->rollout > LLADA_ROLLOUT_FP8 || (unsigned)p->fp8_format > FP8_E5M2 ||
        (p->fp8_scaling != FP8_SCALE_BLOCK && p->fp8_scaling != FP8_SCALE_CHANNEL &&
         p->fp8_scaling != FP8_SCALE_TENSOR))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "qwen3_rollout_sync: bad precision (rollout %d, fp8 format %d, "
                            "scaling %d)", (int)p->rollout, (int)p->fp8_format,
                            (int)p->fp8_scaling);
    /* the trainer's copy (the activations kept for backward belong to the old one) */
    if (p->trainer_bf16 != m->prec.trainer_bf16)
        m->a.valid = false;
    if (p->trainer_bf16) {
        if (!m->tv.buf)
            view_free(m, &m->tv);
        view_bf16_copy(m, &m->tv, false, false);
        m->tv.round_lin = m->tv.round_head = true;
        m->tv.lora = true;
    } else if (m->tv.buf) {
        view_master(m, &m->tv);
    }
    /* the rollout copy, rebuilt in place when its kind is unchanged */
    if (p->rollout != m->prec.rollout || p->fp8_format != m->prec.fp8_format ||
        p->fp8_scaling != m->prec.fp8_scaling || p->fp8_pow2_scale != m->prec.fp8_pow2_scale)
        view_free(m, &m->rv);
    int rc = 0;
    if (p->rollout == LLADA_ROLLOUT_BF16) {
        view_bf16_copy(m, &m->rv, true, false);
        m->rv.round_lin = m->rv.round_head = true;
        m->rv.lora = false;
    } else if (p->rollout == LLADA_ROLLOUT_FP8) {
        rc = view_fp8(m, &m->rv, p, err);
        m->rv.round_lin = false; /* the FP8 GEMM quantises its own inputs */
        m->rv.round_head = true;
        m->rv.lora = false;
    }
    m->prec = *p;
    if (rc) { /* a half-built copy must not be used: fall back to the trainer */
        view_free(m, &m->rv);
        m->prec.rollout = LLADA_ROLLOUT_TRAINER;
        return rc;
    }
    if (seconds)
        *seconds = dllm_now() - t0;
    return 0;
}

int qwen3_rollout_linear(qwen3_model *m, int layer, const char *name, const float *inp, int N,
                         float *out)
{
    int bit = qwen3_lora_target_bit(name), j = 0;
    if (!bit || layer < 0 || layer >= m->L || N <= 0)
        return DLLM_EXIT_INPUT;
    while (!((bit >> j) & 1))
        j++;
    const q3_view *v = m->prec.rollout == LLADA_ROLLOUT_TRAINER ? &m->tv : &m->rv;
    int o, i;
    lin_shape(m, j, &o, &i);
    float *x = dllm_malloc((size_t)N * i * sizeof(float)); // (N, in)
    memcpy(x, inp, (size_t)N * i * sizeof(float));
    if (v->round_lin)
        op_round_bf16(x, (size_t)N * i);
    float *xa = v->lora && m->lora_rank ? dllm_malloc((size_t)N * m->lora_rank * sizeof(float))
                                        : NULL; // (N, r)
    lin_fwd(m, v, layer, j, out, x, N, xa);
    free(xa);
    free(x);
    return 0;
}

/* ---- backward --------------------------------------------------------------------- */

void qwen3_backward(qwen3_model *m, const float *dlogits)
{
    q3_acts *a = &m->a;
    if (!a->valid) {
        fprintf(stderr, "qwen3_backward: no forward pass to differentiate\n");
        abort();
    }
    ensure_grads(m);
    acts_ensure_bwd(m);
    int N = a->N, R = a->R, B = a->B, T = a->T;
    size_t C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD, KD = (size_t)m->KD;
    size_t sN = a->capN;

    // head and final norm on the gathered rows, then scatter into dx = dL/dx_L
    memset(a->dnf, 0, (size_t)R * C * sizeof(float));
    memset(a->dxr, 0, (size_t)R * C * sizeof(float));
    /* straight-through under a bf16 trainer: the rounded weights, fp32 gradients */
    op_linear_bwd(a->dnf, m->d_head, dlogits, a->nf, m->tv.head, R, m->C, m->V);
    op_rmsnorm_bwd(a->dxr, m->d_norm, a->dnf, a->xr, m->tv.norm, a->rstdf, R, m->C);
    memset(a->dx, 0, (size_t)N * C * sizeof(float));
    for (int r = 0; r < R; r++) {
        float *d = a->dx + (size_t)a->rows[r] * C;
        const float *src = a->dxr + r * C;
        for (size_t c = 0; c < C; c++)
            d[c] += src[c];
    }

    for (int l = m->L - 1; l >= 0; l--) {
        const q3_layer *w = &m->tv.lw[l];
        const q3_layer *gw = &m->lg[l];
        const float *x = a->resid + l * sN * C;
        const float *n1 = a->n1 + l * sN * C, *rstd1 = a->rstd1 + l * sN;
        const float *qr = a->qr + l * sN * QD, *rstdq = a->rstdq + l * sN * m->NH;
        const float *kr = a->kr + l * sN * KD, *rstdk = a->rstdk + l * sN * m->NKV;
        const float *q = a->q + l * sN * QD, *k = a->k + l * sN * KD, *v = a->v + l * sN * KD;
        const float *att = a->att + l * a->capAtt, *y = a->y + l * sN * QD;
        const float *h = a->h + l * sN * C, *n2 = a->n2 + l * sN * C;
        const float *rstd2 = a->rstd2 + l * sN;
        const float *g = a->g + l * sN * H, *u = a->u + l * sN * H, *s = a->s + l * sN * H;

        // MLP: x_{l+1} = h + down(silu(gate n2) * up n2)
        memcpy(a->dh, a->dx, (size_t)N * C * sizeof(float));
        memset(a->ds, 0, (size_t)N * H * sizeof(float));
        lin_bwd(m, l, LIN_DOWN, a->ds, a->dx, s, N);
        memset(a->dg, 0, (size_t)N * H * sizeof(float));
        memset(a->du, 0, (size_t)N * H * sizeof(float));
        op_swiglu_bwd(a->dg, a->du, a->ds, g, u, (size_t)N * H);
        memset(a->dn, 0, (size_t)N * C * sizeof(float));
        lin_bwd(m, l, LIN_GATE, a->dn, a->dg, n2, N);
        lin_bwd(m, l, LIN_UP, a->dn, a->du, n2, N);
        op_rmsnorm_bwd(a->dh, gw->ln2, a->dn, h, w->ln2, rstd2, N, m->C);

        // attention: h = x + o_proj(y)
        memcpy(a->dx, a->dh, (size_t)N * C * sizeof(float));
        memset(a->dy, 0, (size_t)N * QD * sizeof(float));
        lin_bwd(m, l, LIN_O, a->dy, a->dh, y, N);
        memset(a->dq, 0, (size_t)N * QD * sizeof(float));
        memset(a->dk, 0, (size_t)N * KD * sizeof(float));
        memset(a->dv, 0, (size_t)N * KD * sizeof(float));
        op_attention_bwd(a->dq, a->dk, a->dv, a->dy, att, q, k, v, B, T, m->NH, m->NKV, m->HD);
        op_rope_bwd(a->dq, a->dq, a->pos, &m->rope, N, m->NH, m->HD); /* in place */
        op_rope_bwd(a->dk, a->dk, a->pos, &m->rope, N, m->NKV, m->HD);
        memset(a->dqr, 0, (size_t)N * QD * sizeof(float));
        memset(a->dkr, 0, (size_t)N * KD * sizeof(float));
        op_rmsnorm_bwd(a->dqr, gw->q_norm, a->dq, qr, w->q_norm, rstdq, N * m->NH, m->HD);
        op_rmsnorm_bwd(a->dkr, gw->k_norm, a->dk, kr, w->k_norm, rstdk, N * m->NKV, m->HD);
        memset(a->dn, 0, (size_t)N * C * sizeof(float));
        lin_bwd(m, l, LIN_Q, a->dn, a->dqr, n1, N);
        lin_bwd(m, l, LIN_K, a->dn, a->dkr, n1, N);
        lin_bwd(m, l, LIN_V, a->dn, a->dv, n1, N);
        op_rmsnorm_bwd(a->dx, gw->ln1, a->dn, x, w->ln1, rstd1, N, m->C);
    }
    op_embedding_bwd(m->d_embed, a->dx, a->tokens, N, m->C);
}

/* ---- exact sequence log-probabilities -------------------------------------------------- */

int qwen3_seq_logprob(qwen3_model *m, const int32_t *prompt, int P, const int32_t *completion,
                      int L, double temperature, double *seq_logp, double *token_logp,
                      dllm_err *err)
{
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
    int rc = forward(m, &m->a, &m->tv, seq, NULL, 1, T, rows, L, logits, false);
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

struct qwen3_kv_cache {
    int B, max_len, len, L, NKV, HD;
    float *k, *v;     // (L, B, max_len, NKV*HD)
    uint8_t *mask;    // (B, max_len)
    int32_t *npos;    // (B) real tokens so far = the next RoPE position
    /* scratch for one extend of B*T rows (grown on demand) */
    size_t capN;
    int32_t *tok, *pos;            // (N)
    float *x, *n, *h;              // (N, C)
    float *qr, *q, *y;             // (N, QD)
    float *kr, *kk, *vv;           // (N, KD)
    float *g, *u, *s;              // (N, H)
    float *xa;                     // (N, r)
    float *xr, *nf;                // (B, C)
};

qwen3_kv_cache *qwen3_cache_new(const qwen3_model *m, int B, int max_len)
{
    qwen3_kv_cache *c = dllm_calloc(1, sizeof *c);
    c->B = B > 0 ? B : 1;
    c->max_len = max_len > 0 ? max_len : 1;
    c->L = m->L;
    c->NKV = m->NKV;
    c->HD = m->HD;
    size_t n = (size_t)m->L * c->B * c->max_len * m->KD;
    c->k = FALLOC(n);
    c->v = FALLOC(n);
    c->mask = dllm_calloc((size_t)c->B * c->max_len, 1);
    c->npos = dllm_calloc((size_t)c->B, sizeof(int32_t));
    return c;
}

static void cache_scratch_free(qwen3_kv_cache *c)
{
    void *bufs[] = {c->tok, c->pos, c->x, c->n, c->h, c->qr, c->q, c->y, c->kr, c->kk,
                    c->vv, c->g, c->u, c->s, c->xa, c->xr, c->nf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

void qwen3_cache_free(qwen3_kv_cache *c)
{
    if (!c)
        return;
    cache_scratch_free(c);
    free(c->k);
    free(c->v);
    free(c->mask);
    free(c->npos);
    free(c);
}

int qwen3_cache_len(const qwen3_kv_cache *c) { return c->len; }

static void cache_scratch(const qwen3_model *m, qwen3_kv_cache *c, size_t N)
{
    if (N <= c->capN)
        return;
    cache_scratch_free(c);
    size_t C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD, KD = (size_t)m->KD;
    c->capN = N;
    c->tok = dllm_malloc(N * sizeof(int32_t));
    c->pos = dllm_malloc(N * sizeof(int32_t));
    c->x = FALLOC(N * C);
    c->n = FALLOC(N * C);
    c->qr = FALLOC(N * QD);
    c->q = FALLOC(N * QD);
    c->kr = FALLOC(N * KD);
    c->kk = FALLOC(N * KD);
    c->vv = FALLOC(N * KD);
    c->y = FALLOC(N * QD);
    c->h = FALLOC(N * C);
    c->g = FALLOC(N * H);
    c->u = FALLOC(N * H);
    c->s = FALLOC(N * H);
    c->xa = FALLOC(N * (size_t)(m->lora_rank > 0 ? m->lora_rank : 1));
    c->xr = FALLOC((size_t)c->B * C);
    c->nf = FALLOC((size_t)c->B * C);
}

/* y (B, T, NH, HD) for the T new queries q (B, T, NH, HD) of layer l at slots
 * len .. len+T-1, over the cached keys (their K/V already written). */
static void cached_attention(const qwen3_model *m, const qwen3_kv_cache *c, int l, float *y,
                             const float *q, int T)
{
    int B = c->B, NH = m->NH, HD = m->HD, KD = m->KD, group = m->NH / m->NKV;
    size_t lstride = (size_t)B * c->max_len * KD;
    const float *kl = c->k + l * lstride, *vl = c->v + l * lstride;
    float scale = 1.0f / sqrtf((float)HD);
    long rows = (long)B * T * NH;
#pragma omp parallel if (rows * (c->len + T) * HD > 65536)
    {
        float *p = dllm_malloc((size_t)(c->len + T) * sizeof(float));
#pragma omp for schedule(dynamic, 8)
        for (long r = 0; r < rows; r++) {
            int h = (int)(r % NH), t = (int)((r / NH) % T), b = (int)(r / ((long)NH * T));
            int kh = h / group, send = c->len + t + 1; /* causal: slots [0, send) */
            const float *qr = q + r * HD;
            float *o = y + r * HD;
            const uint8_t *km = c->mask + (size_t)b * c->max_len;
            float maxv = -INFINITY;
            int nvis = 0;
            for (int s = 0; s < send; s++) {
                if (!km[s]) {
                    p[s] = -INFINITY;
                    continue;
                }
                const float *kr = kl + ((size_t)b * c->max_len + s) * KD + (size_t)kh * HD;
                float dot = 0.0f;
                for (int i = 0; i < HD; i++)
                    dot += qr[i] * kr[i];
                dot *= scale;
                p[s] = dot;
                maxv = dot > maxv ? dot : maxv;
                nvis++;
            }
            memset(o, 0, (size_t)HD * sizeof(float));
            if (nvis == 0)
                continue;
            float sum = 0.0f;
            for (int s = 0; s < send; s++) {
                float e = p[s] == -INFINITY ? 0.0f : expf(p[s] - maxv);
                p[s] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
            for (int s = 0; s < send; s++) {
                if (p[s] == 0.0f)
                    continue;
                float ps = p[s] * inv;
                const float *vr = vl + ((size_t)b * c->max_len + s) * KD + (size_t)kh * HD;
                for (int i = 0; i < HD; i++)
                    o[i] += ps * vr[i];
            }
        }
        free(p);
    }
}

int qwen3_extend(qwen3_model *m, qwen3_kv_cache *c, const int32_t *tokens,
                 const uint8_t *keymask, int T, float *logits, dllm_err *err)
{
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
    cache_scratch(m, c, (size_t)N);
    size_t C = (size_t)m->C, H = (size_t)m->H, KD = (size_t)m->KD;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int n = b * T + t;
            uint8_t real = keymask ? keymask[n] != 0 : 1;
            c->mask[(size_t)b * c->max_len + c->len + t] = real;
            c->pos[n] = real ? c->npos[b]++ : 0;
        }
    int maxpos = 0;
    for (int b = 0; b < B; b++)
        maxpos = c->npos[b] > maxpos ? c->npos[b] : maxpos;
    rope_grow(m, maxpos);
    memcpy(c->tok, tokens, (size_t)N * sizeof(int32_t));

    float eps = m->cfg.rms_norm_eps;
    size_t lstride = (size_t)B * c->max_len * KD;
    const q3_view *v =
        m->decode_rollout && m->prec.rollout != LLADA_ROLLOUT_TRAINER ? &m->rv : &m->tv;
    bool rl = v->round_lin;
    op_embedding_fwd(c->x, c->tok, v->embed, N, m->C);
    for (int l = 0; l < m->L; l++) {
        const q3_layer *w = &v->lw[l];
        op_rmsnorm_fwd(c->n, NULL, c->x, w->ln1, N, m->C, eps);
        if (rl)
            op_round_bf16(c->n, (size_t)N * C);
        lin_fwd(m, v, l, LIN_Q, c->qr, c->n, N, c->xa);
        lin_fwd(m, v, l, LIN_K, c->kr, c->n, N, c->xa);
        lin_fwd(m, v, l, LIN_V, c->vv, c->n, N, c->xa);
        op_rmsnorm_fwd(c->q, NULL, c->qr, w->q_norm, N * m->NH, m->HD, eps);
        op_rmsnorm_fwd(c->kk, NULL, c->kr, w->k_norm, N * m->NKV, m->HD, eps);
        op_rope_fwd(c->q, c->q, c->pos, &m->rope, N, m->NH, m->HD);
        op_rope_fwd(c->kk, c->kk, c->pos, &m->rope, N, m->NKV, m->HD);
        for (int b = 0; b < B; b++) { /* append to the cache */
            size_t dst = l * lstride + ((size_t)b * c->max_len + c->len) * KD;
            memcpy(c->k + dst, c->kk + (size_t)b * T * KD, (size_t)T * KD * sizeof(float));
            memcpy(c->v + dst, c->vv + (size_t)b * T * KD, (size_t)T * KD * sizeof(float));
        }
        cached_attention(m, c, l, c->y, c->q, T);
        if (rl)
            op_round_bf16(c->y, (size_t)N * m->QD);
        lin_fwd(m, v, l, LIN_O, c->h, c->y, N, c->xa);
        add_to(c->h, c->x, (size_t)N * C);
        op_rmsnorm_fwd(c->n, NULL, c->h, w->ln2, N, m->C, eps);
        if (rl)
            op_round_bf16(c->n, (size_t)N * C);
        lin_fwd(m, v, l, LIN_GATE, c->g, c->n, N, c->xa);
        lin_fwd(m, v, l, LIN_UP, c->u, c->n, N, c->xa);
        op_swiglu_fwd(c->s, c->g, c->u, (size_t)N * H);
        if (rl)
            op_round_bf16(c->s, (size_t)N * H);
        lin_fwd(m, v, l, LIN_DOWN, c->x, c->s, N, c->xa);
        add_to(c->x, c->h, (size_t)N * C);
    }
    c->len += T;
    if (logits) {
        for (int b = 0; b < B; b++)
            memcpy(c->xr + b * C, c->x + ((size_t)b * T + T - 1) * C, C * sizeof(float));
        op_rmsnorm_fwd(c->nf, NULL, c->xr, v->norm, B, m->C, eps);
        if (v->round_head)
            op_round_bf16(c->nf, (size_t)B * C);
        op_linear_fwd(logits, c->nf, v->head, B, m->C, m->V);
    }
    return 0;
}

int qwen3_prefill(qwen3_model *m, qwen3_kv_cache *c, const int32_t *prompts,
                  const uint8_t *prompt_mask, int P, float *logits, dllm_err *err)
{
    return qwen3_extend(m, c, prompts, prompt_mask, P, logits, err);
}

int qwen3_decode_step(qwen3_model *m, qwen3_kv_cache *c, const int32_t *tokens, float *logits,
                      dllm_err *err)
{
    return qwen3_extend(m, c, tokens, NULL, 1, logits, err);
}

/* ---- checkpoints ------------------------------------------------------------------ */

int qwen3_load(qwen3_model **out, const char *dir, dllm_err *err)
{
    *out = NULL;
    dllm_model_config cfg;
    int rc = dllm_config_load(&cfg, dir, err);
    if (rc)
        return rc;
    char where[4096];
    snprintf(where, sizeof where, "%s/config.json", dir);
    if ((rc = check_config(&cfg, where, err)))
        return rc;
    qwen3_model *m = model_alloc(&cfg);
    /* A tied checkpoint that still carries lm_head.weight: it is the
     * embedding, which is what is read. */
    if ((rc = param_io_read(m->plist, m->np, dir, err))) {
        qwen3_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int qwen3_save(const qwen3_model *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
               dllm_err *err)
{
    /* under LoRA each block linear's adapter is merged into what is written */
    param_lora *lora = m->lora_rank ? dllm_calloc((size_t)m->np, sizeof *lora) : NULL;
    for (int i = 0; lora && i < m->np; i++)
        for (int l = 0; l < m->L; l++)
            for (int k = 0; k < NLIN; k++) {
                const lora_adapter *ad = &m->ad[l * NLIN + k];
                if (m->lw[l].w[k] == m->plist[i].data && ad->A)
                    lora[i] = (param_lora){ad->A, ad->B, ad->in, ad->out};
            }
    int rc = param_io_write_dir(m->plist, m->np, lora, m->lora_rank, m->lora_scale, &m->cfg, dir,
                                dtype, max_shard_bytes, err);
    free(lora);
    return rc;
}

int qwen3_lora_load(qwen3_model *m, const char *path, dllm_err *err)
{
    if (!m->lora_rank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: LoRA is not enabled on the model", path);
    return param_io_read(m->llist, m->nl, path, err);
}

int qwen3_lora_save(const qwen3_model *m, const char *path, dllm_err *err)
{
    if (!m->lora_rank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: LoRA is not enabled on the model", path);
    return param_io_write_file(m->llist, m->nl, path, err);
}
