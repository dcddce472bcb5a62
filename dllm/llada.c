/* llada.c: the LLaDA masked-diffusion transformer in fp32 on the CPU
 * (METHOD.md §1), forward and backward, built from the op table.
 *
 *   x_0 = wte[tokens]                                          (N, C), N = B*T
 *   block l:  n1 = attn_norm(x_l)
 *             q, k = RoPE(q_proj n1), RoPE(k_proj n1);  v = v_proj n1
 *             y = softmax(q k^T / sqrt(HD) + keymask) v    (bidirectional, GQA)
 *             h = x_l + attn_out y
 *             n2 = ff_norm(h);  s = silu(ff_proj n2) * up_proj n2
 *             x_{l+1} = h + ff_out s
 *   logits[r] = head(ln_f(x_L[rows[r]]))                       only the requested rows
 *
 * Gradient convention (as kernels/ops.h): parameter gradients accumulate (+=)
 * across llada_backward calls until llada_zero_grad; activation gradients
 * are scratch, zeroed here before each op that accumulates into them.
 *
 * LoRA on a block linear: out = x W^T + (alpha/r) (x A^T) B^T, A (r, in),
 * B (out, r). With LoRA on, base weights are frozen (no dW is computed) and
 * only A, B are trainable. The head (top-level ff_out) never carries LoRA.
 *
 * Memory: parameters in one allocation carved into named pointers in HF
 * order; gradients mirror it (allocated on first use); activations for
 * backward are sized for B*T and grown on demand.
 *
 * Precision (llada.h): a forward reads its weights through a weight_view --
 * the fp32 master weights, the trainer's bf16 copy, or the rollout copy (bf16,
 * or FP8 block linears plus bf16 embeddings/norms/head) -- which also says
 * where activations are rounded to bf16. The rollout forward has activation
 * buffers of its own. The backward reads the trainer view's weights (the
 * rounded ones under a bf16 trainer: straight-through). */
#include "dllm/llada.h"
#include "dllm/param_io.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The seven block linears, in the bit order of the LORA_* enum. */
enum { LIN_Q, LIN_K, LIN_V, LIN_O, LIN_GATE, LIN_UP, LIN_DOWN, NLIN };
static const char *const lin_names[NLIN] = {"q_proj", "k_proj", "v_proj", "attn_out",
                                            "ff_proj", "up_proj", "ff_out"};

typedef struct {
    float *attn_norm; // (C)
    float *w[NLIN];   // q (NH*HD, C), k, v (NKV*HD, C), attn_out (C, NH*HD),
                      // ff_proj, up_proj (H, C), ff_out (C, H)
    float *ff_norm;   // (C)
} llada_layer;

typedef struct {
    float *A, *B;   // (r, in), (out, r)
    float *dA, *dB; // same shapes
    int in, out;
} lora_adapter;

/* Activations kept for backward, and backward scratch. */
typedef struct {
    int B, T, N, R;          /* sizes of the last forward */
    bool have_mask, valid;   /* valid: a forward ran since the last change */
    size_t capN, capAtt, capR; /* allocated for */
    int capL;                  /* layers with kept activations: L, or 1 (no grad) */
    int32_t *tokens;  // (N)
    uint8_t *keymask; // (N)
    int32_t *pos;     // (N) canvas index t of row b*T + t
    int32_t *rows;    // (R)
    float *resid;     // (L+1, N, C) residual stream entering layer l; [L] = final
    float *n1;        // (L, N, C)
    float *rstd1;     // (L, N)
    float *q;         // (L, N, NH*HD) after RoPE
    float *k;         // (L, N, NKV*HD) after RoPE
    float *v;         // (L, N, NKV*HD)
    float *att;       // (L, B, NH, T, T) softmax probabilities
    float *y;         // (L, N, NH*HD) attention output before attn_out
    float *h;         // (L, N, C) residual after attention
    float *n2;        // (L, N, C)
    float *rstd2;     // (L, N)
    float *g, *u, *s; // (L, N, H) gate, up, silu(gate) * up
    float *xa;        // (L, NLIN, N, r) LoRA x A^T (only with LoRA)
    float *xr;        // (R, C) final residual rows
    float *nf;        // (R, C) ln_f(xr)
    float *rstdf;     // (R)
    /* backward scratch */
    float *dx, *dh, *dn;  // (N, C)
    float *dq, *dy;       // (N, NH*HD)
    float *dk, *dv;       // (N, NKV*HD)
    float *dg, *du, *ds;  // (N, H)
    float *dxa;           // (N, r)
    float *dxr, *dnf;     // (R, C)
} llada_acts;

/* The weights one forward reads, and where it rounds to bf16. */
typedef struct {
    float *buf;        // owned copy (NULL: the master weights)
    const float *wte;  // (V, C)
    const float *ln_f; // (C)
    const float *head; // (V, C)
    llada_layer *lw;   // (L); w[j] == NULL where q8 replaces them
    fp8_matrix *q8;    // (L, NLIN) FP8 block linears, or NULL
    bool round_lin;    // bf16 at the block linears' inputs
    bool round_head;   // bf16 at the head's input
    bool lora;         // apply the LoRA adapters at run time (the trainer only:
                       // the rollout copies have them merged)
    size_t nbuf;       // floats in buf
} weight_view;

struct llada_model {
    dllm_model_config cfg;
    int C, L, NH, NKV, HD, H, V, QD, KD; /* QD = NH*HD, KD = NKV*HD, V = embedding_size */

    float *params;  // (n_params) HF order
    float *grads;   // (n_params), NULL under LoRA or before first use
    size_t n_params;
    float *wte;        // (V, C)
    llada_layer *lw;   // (L)
    float *ln_f;       // (C)
    float *head;       // (V, C)
    float *d_wte, *d_ln_f, *d_head; /* gradients, NULL when frozen */
    llada_layer *lg;   // (L) gradient pointers, NULL when frozen
    llada_param *plist;
    int np;

    int lora_rank, lora_mask;
    float lora_alpha, lora_scale; /* scale = alpha / rank */
    float *lora_params, *lora_grads;
    size_t n_lora;
    lora_adapter *ad; // (L, NLIN); A == NULL where not targeted
    llada_param *llist;
    int nl;

    op_rope_table rope;
    llada_acts a;

    llada_precision prec; /* last applied by llada_rollout_sync */
    weight_view tv;       /* trainer: master weights or their bf16 copy */
    weight_view rv;       /* rollout copy (unused under rollout "trainer") */
    llada_acts ra;        /* activations of the rollout forward */
};

int llada_lora_target_bit(const char *name)
{
    for (int j = 0; j < NLIN; j++)
        if (name && strcmp(name, lin_names[j]) == 0)
            return 1 << j;
    return 0;
}

/* ---- parameters ------------------------------------------------------------------- */

static void lin_shape(const llada_model *m, int j, int *out, int *in)
{
    switch (j) {
    case LIN_Q: *out = m->QD; *in = m->C; break;
    case LIN_K: case LIN_V: *out = m->KD; *in = m->C; break;
    case LIN_O: *out = m->C; *in = m->QD; break;
    case LIN_GATE: case LIN_UP: *out = m->H; *in = m->C; break;
    default: *out = m->C; *in = m->H; break;
    }
}

static void add_param(llada_param *p, int *np, const char *name, int ndim, int64_t d0,
                      int64_t d1)
{
    llada_param *q = &p[(*np)++];
    snprintf(q->name, sizeof q->name, "%s", name);
    q->ndim = ndim;
    q->shape[0] = d0;
    q->shape[1] = ndim == 2 ? d1 : 0;
    q->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
}

/* Checks the sizes the model relies on; 0 if usable. */
static int check_config(const dllm_model_config *c, const char *where, dllm_err *err)
{
    if (c->d_model <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
        c->mlp_hidden <= 0 || c->vocab_size <= 0 || c->embedding_size < c->vocab_size)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: non-positive or inconsistent model sizes",
                            where);
    if (c->head_dim <= 0 || c->head_dim % 2 || c->n_heads % c->n_kv_heads)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: head_dim %d must be even and n_heads %d a multiple of "
                            "n_kv_heads %d", where, c->head_dim, c->n_heads, c->n_kv_heads);
    if (c->weight_tying)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: weight_tying true is not supported (LLaDA has an untied head)",
                            where);
    return 0;
}

/* ---- weight views (precision) ------------------------------------------------------ */

static void view_free(const llada_model *m, weight_view *v)
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
static void view_master(llada_model *m, weight_view *v)
{
    view_free(m, v);
    v->lw = dllm_malloc((size_t)m->L * sizeof *v->lw);
    memcpy(v->lw, m->lw, (size_t)m->L * sizeof *v->lw);
    v->wte = m->wte;
    v->ln_f = m->ln_f;
    v->head = m->head;
    v->lora = true;
}

/* dst (out, in) = W + (alpha/r) B A for linear j of layer l (W alone without
 * an adapter there): the weight the rollout copy is built from. */
static void merged_weight(const llada_model *m, int l, int j, float *dst)
{
    int o, i;
    lin_shape(m, j, &o, &i);
    memcpy(dst, m->lw[l].w[j], (size_t)o * i * sizeof(float));
    const lora_adapter *ad = m->ad ? &m->ad[l * NLIN + j] : NULL;
    if (ad && ad->A)
        op_gemm(false, false, o, i, m->lora_rank, m->lora_scale, ad->B, ad->A, 1.0f, dst);
}

/* v = a bf16-rounded copy of the weights, LoRA merged when `merge`, without
 * the block linears when `skip_lin` (FP8 replaces them). Reuses v's buffer
 * when the size allows (the sync after every optimizer step). */
static void view_bf16_copy(llada_model *m, weight_view *v, bool merge, bool skip_lin)
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
    TAKE(v->wte, m->wte, (size_t)m->V * m->C);
    for (int l = 0; l < m->L; l++) {
        TAKE(v->lw[l].attn_norm, m->lw[l].attn_norm, m->C);
        TAKE(v->lw[l].ff_norm, m->lw[l].ff_norm, m->C);
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
    TAKE(v->ln_f, m->ln_f, m->C);
    TAKE(v->head, m->head, (size_t)m->V * m->C);
#undef TAKE
    op_round_bf16(v->buf, n);
}

/* v = the FP8 rollout copy: block linears quantised from the merged weights,
 * the rest rounded to bf16. */
static int view_fp8(llada_model *m, weight_view *v, const llada_precision *p, dllm_err *err)
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

/* Allocates a model with uninitialised weights (gradients come on demand). */
static llada_model *model_alloc(const dllm_model_config *cfg)
{
    llada_model *m = dllm_calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->C = cfg->d_model;
    m->L = cfg->n_layers;
    m->NH = cfg->n_heads;
    m->NKV = cfg->n_kv_heads;
    m->HD = cfg->head_dim;
    m->H = cfg->mlp_hidden;
    m->V = cfg->embedding_size;
    m->QD = m->NH * m->HD;
    m->KD = m->NKV * m->HD;

    /* the parameter table in HF order */
    m->plist = dllm_calloc((size_t)9 * m->L + 3, sizeof *m->plist);
    char nm[96];
    add_param(m->plist, &m->np, "model.transformer.wte.weight", 2, m->V, m->C);
    for (int l = 0; l < m->L; l++) {
        snprintf(nm, sizeof nm, "model.transformer.blocks.%d.attn_norm.weight", l);
        add_param(m->plist, &m->np, nm, 1, m->C, 0);
        for (int j = 0; j < NLIN; j++) {
            int o, i;
            lin_shape(m, j, &o, &i);
            snprintf(nm, sizeof nm, "model.transformer.blocks.%d.%s.weight", l, lin_names[j]);
            add_param(m->plist, &m->np, nm, 2, o, i);
            if (j == LIN_O) { /* ff_norm sits between attn_out and ff_proj in HF order */
                snprintf(nm, sizeof nm, "model.transformer.blocks.%d.ff_norm.weight", l);
                add_param(m->plist, &m->np, nm, 1, m->C, 0);
            }
        }
    }
    add_param(m->plist, &m->np, "model.transformer.ln_f.weight", 1, m->C, 0);
    add_param(m->plist, &m->np, "model.transformer.ff_out.weight", 2, m->V, m->C);

    for (int i = 0; i < m->np; i++)
        m->n_params += m->plist[i].numel;
    m->params = dllm_malloc(m->n_params * sizeof(float));
    m->lw = dllm_calloc((size_t)m->L, sizeof *m->lw);
    m->lg = dllm_calloc((size_t)m->L, sizeof *m->lg);

    /* carve: walk the table in the same order as it was built */
    size_t off = 0;
    int k = 0;
    for (int i = 0; i < m->np; i++) {
        m->plist[i].data = m->params + off;
        off += m->plist[i].numel;
    }
    m->wte = m->plist[k++].data;
    for (int l = 0; l < m->L; l++) {
        m->lw[l].attn_norm = m->plist[k++].data;
        for (int j = 0; j < NLIN; j++) {
            m->lw[l].w[j] = m->plist[k++].data;
            if (j == LIN_O)
                m->lw[l].ff_norm = m->plist[k++].data;
        }
    }
    m->ln_f = m->plist[k++].data;
    m->head = m->plist[k++].data;

    op_rope_table_init(&m->rope, cfg->max_seq_len > 0 ? cfg->max_seq_len : 1, m->HD,
                       cfg->rope_theta);
    m->prec = (llada_precision){.trainer_bf16 = false, .rollout = LLADA_ROLLOUT_TRAINER,
                                .fp8_format = FP8_E4M3, .fp8_scaling = FP8_SCALE_BLOCK};
    view_master(m, &m->tv);
    return m;
}

llada_model *llada_create(const dllm_model_config *cfg, uint64_t seed)
{
    dllm_err err;
    if (check_config(cfg, "llada_create", &err)) {
        fprintf(stderr, "%s\n", err.msg);
        abort(); /* presets and callers validate configs; reaching here is a bug */
    }
    llada_model *m = model_alloc(cfg);
    /* Norm weights 1, everything else N(0, 0.02). One stream per (tensor,
     * chunk) so the result does not depend on the thread count. */
    enum { CHUNK = 1 << 16 };
    for (int i = 0; i < m->np; i++) {
        llada_param *p = &m->plist[i];
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

static void acts_free(llada_acts *a)
{
    void *bufs[] = {a->tokens, a->keymask, a->pos, a->rows, a->resid, a->n1, a->rstd1,
                    a->q, a->k, a->v, a->att, a->y, a->h, a->n2, a->rstd2, a->g, a->u,
                    a->s, a->xa, a->xr, a->nf, a->rstdf, a->dx, a->dh, a->dn, a->dq,
                    a->dy, a->dk, a->dv, a->dg, a->du, a->ds, a->dxa, a->dxr, a->dnf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(a, 0, sizeof *a);
}

static void lora_free(llada_model *m)
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

void llada_free(llada_model *m)
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

const dllm_model_config *llada_config(const llada_model *m) { return &m->cfg; }

int llada_params(llada_model *m, const llada_param **out)
{
    *out = m->plist;
    return m->np;
}

int llada_lora_params(llada_model *m, const llada_param **out)
{
    *out = m->llist;
    return m->nl;
}

int llada_lora_info(const llada_model *m, float *alpha, int *mask)
{
    if (alpha)
        *alpha = m->lora_alpha;
    if (mask)
        *mask = m->lora_mask;
    return m->lora_rank;
}

/* Points every base gradient pointer at grads (NULL: frozen). */
static void set_base_grads(llada_model *m, float *grads)
{
    size_t off = 0;
    for (int i = 0; i < m->np; i++) {
        m->plist[i].grad = grads ? grads + off : NULL;
        off += m->plist[i].numel;
    }
    int k = 0;
    m->d_wte = m->plist[k++].grad;
    for (int l = 0; l < m->L; l++) {
        m->lg[l].attn_norm = m->plist[k++].grad;
        for (int j = 0; j < NLIN; j++) {
            m->lg[l].w[j] = m->plist[k++].grad;
            if (j == LIN_O)
                m->lg[l].ff_norm = m->plist[k++].grad;
        }
    }
    m->d_ln_f = m->plist[k++].grad;
    m->d_head = m->plist[k++].grad;
}

void llada_lora_enable(llada_model *m, int rank, float alpha, int mask, uint64_t seed)
{
    lora_free(m);
    acts_free(&m->a); /* the LoRA activations change size */
    acts_free(&m->ra);
    mask &= LORA_ALL;
    free(m->grads); /* frozen under LoRA; reallocated on demand without it */
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
            snprintf(nm, sizeof nm,
                     "base_model.model.model.transformer.blocks.%d.%s.lora_A.weight", l,
                     lin_names[j]);
            add_param(m->llist, &m->nl, nm, 2, rank, i);
            snprintf(nm, sizeof nm,
                     "base_model.model.model.transformer.blocks.%d.%s.lora_B.weight", l,
                     lin_names[j]);
            add_param(m->llist, &m->nl, nm, 2, o, rank);
        }
    for (int i = 0; i < m->nl; i++)
        m->n_lora += m->llist[i].numel;
    m->lora_params = dllm_calloc(m->n_lora, sizeof(float)); /* B = 0 */
    m->lora_grads = dllm_calloc(m->n_lora, sizeof(float));
    size_t off = 0;
    int k = 0;
    for (int i = 0; i < m->nl; i++) {
        m->llist[i].data = m->lora_params + off;
        m->llist[i].grad = m->lora_grads + off;
        off += m->llist[i].numel;
    }
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

float *llada_trainable(llada_model *m, size_t *n)
{
    if (m->lora_rank) {
        *n = m->n_lora;
        return m->lora_params;
    }
    *n = m->n_params;
    return m->params;
}

/* The base gradients exist only once needed: a model that is only run or
 * saved never pays for them (8B parameters would double the memory). */
static void ensure_grads(llada_model *m)
{
    if (!m->lora_rank && !m->grads) {
        m->grads = dllm_calloc(m->n_params, sizeof(float));
        set_base_grads(m, m->grads);
    }
}

float *llada_grads(llada_model *m)
{
    ensure_grads(m);
    return m->lora_rank ? m->lora_grads : m->grads;
}

void llada_zero_grad(llada_model *m)
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
 * activations (L for training, 1 for a forward without backward, whose
 * residual stream alternates between two slots). */
static void acts_ensure(const llada_model *m, llada_acts *a, int B, int T, int R, int layers)
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
    a->q = FALLOC(L * capN * QD);
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
    a->dx = FALLOC(capN * C);
    a->dh = FALLOC(capN * C);
    a->dn = FALLOC(capN * C);
    a->dq = FALLOC(capN * QD);
    a->dy = FALLOC(capN * QD);
    a->dk = FALLOC(capN * KD);
    a->dv = FALLOC(capN * KD);
    a->dg = FALLOC(capN * H);
    a->du = FALLOC(capN * H);
    a->ds = FALLOC(capN * H);
    a->dxa = r ? FALLOC(capN * r) : NULL;
    a->dxr = FALLOC(capR * C);
    a->dnf = FALLOC(capR * C);
}

size_t llada_activation_floats(const llada_model *m)
{
    const llada_acts *a = &m->a;
    size_t L = (size_t)a->capL, C = (size_t)m->C, H = (size_t)m->H, N = a->capN;
    return (L + 1) * N * C + L * (N * (4 * C + 2 * m->QD + 2 * m->KD + 3 * H + 2) + a->capAtt) +
           (a->xa ? L * NLIN * N * (size_t)m->lora_rank : 0) + a->capR * (2 * C + 1);
}

/* ---- forward ---------------------------------------------------------------------- */

/* out (N, OC) = inp (N, IC) W^T [+ scale (inp A^T) B^T] for linear j of
 * layer l, W read through the view v (FP8: the simulated W8A8 GEMM); xa (N,
 * r) of activation slot ls of a keeps inp A^T. */
static void lin_fwd(const llada_model *m, llada_acts *a, const weight_view *v, int l, int ls,
                    int j, float *out, const float *inp, int N)
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
        float *xa = a->xa + ((size_t)ls * NLIN + j) * a->capN * r;
        op_linear_fwd(xa, inp, ad->A, N, i, r);
        op_gemm(false, true, N, o, r, m->lora_scale, xa, ad->B, 1.0f, out);
    }
}

/* dinp (N, IC) += dout W [+ LoRA path]; dW, dA, dB accumulate where trainable. */
static void lin_bwd(llada_model *m, int l, int j, float *dinp, const float *dout,
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

/* y += x (the residual connections). */
static void add_to(float *y, const float *x, size_t n)
{
#pragma omp parallel for if (n > 65536)
    for (size_t e = 0; e < n; e++)
        y[e] += x[e];
}

/* keep: store every layer's activations for llada_backward (a = m->a). The
 * weights and the bf16 rounding points come from v; rounding is applied in
 * place to the saved linear inputs (n1, y, n2, s, nf), which serve nothing
 * but those linears, so the backward sees the rounded values. */
static int forward(llada_model *m, llada_acts *a, const weight_view *v, const int32_t *tokens,
                   const uint8_t *keymask, int B, int T, const int32_t *rows, int n_rows,
                   float *logits, bool keep)
{
    a->valid = false;
    if (B <= 0 || T <= 0) {
        fprintf(stderr, "llada_forward: empty batch (B=%d, T=%d)\n", B, T);
        return DLLM_EXIT_INPUT;
    }
    int N = B * T, R = rows ? n_rows : N;
    if (R < 0 || (rows && R == 0 && n_rows != 0)) {
        fprintf(stderr, "llada_forward: bad row count %d\n", n_rows);
        return DLLM_EXIT_INPUT;
    }
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0 || tokens[n] >= m->V) {
            fprintf(stderr, "llada_forward: token %d at (%d, %d) outside the vocabulary [0, %d)\n",
                    tokens[n], n / T, n % T, m->V);
            return DLLM_EXIT_INPUT;
        }
    for (int r = 0; rows && r < R; r++)
        if (rows[r] < 0 || rows[r] >= N) {
            fprintf(stderr, "llada_forward: row %d outside [0, %d)\n", rows[r], N);
            return DLLM_EXIT_INPUT;
        }
    if (T > m->rope.max_pos) { /* longer than max_sequence_length: the table grows */
        op_rope_table_free(&m->rope);
        op_rope_table_init(&m->rope, T, m->HD, m->cfg.rope_theta);
    }
    acts_ensure(m, a, B, T, R, keep ? m->L : 1);
    a->B = B;
    a->T = T;
    a->N = N;
    a->R = R;
    a->have_mask = keymask != NULL;
    memcpy(a->tokens, tokens, (size_t)N * sizeof(int32_t));
    if (keymask)
        memcpy(a->keymask, keymask, (size_t)N);
    for (int n = 0; n < N; n++)
        a->pos[n] = n % T;
    for (int r = 0; r < R; r++)
        a->rows[r] = rows ? rows[r] : r;

    size_t C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD, KD = (size_t)m->KD;
    size_t sN = a->capN; /* per-layer stride of the activation arrays */
    float eps = m->cfg.rms_norm_eps;
    bool rl = v->round_lin;
    op_embedding_fwd(a->resid, a->tokens, v->wte, N, m->C);
    for (int l = 0; l < m->L; l++) {
        const llada_layer *w = &v->lw[l];
        int ls = keep ? l : 0; /* activation slot */
        size_t rx = keep ? (size_t)l : (size_t)l % 2, rn = keep ? rx + 1 : (size_t)(l + 1) % 2;
        float *x = a->resid + rx * sN * C, *xn = a->resid + rn * sN * C;
        float *n1 = a->n1 + ls * sN * C, *rstd1 = a->rstd1 + ls * sN;
        float *q = a->q + ls * sN * QD, *k = a->k + ls * sN * KD, *vv = a->v + ls * sN * KD;
        float *att = a->att + ls * a->capAtt, *y = a->y + ls * sN * QD;
        float *h = a->h + ls * sN * C, *n2 = a->n2 + ls * sN * C, *rstd2 = a->rstd2 + ls * sN;
        float *g = a->g + ls * sN * H, *u = a->u + ls * sN * H, *s = a->s + ls * sN * H;

        // attention sub-block
        op_rmsnorm_fwd(n1, rstd1, x, w->attn_norm, N, m->C, eps);
        if (rl)
            op_round_bf16(n1, (size_t)N * C);
        lin_fwd(m, a, v, l, ls, LIN_Q, q, n1, N);
        lin_fwd(m, a, v, l, ls, LIN_K, k, n1, N);
        lin_fwd(m, a, v, l, ls, LIN_V, vv, n1, N);
        op_rope_fwd(q, q, a->pos, &m->rope, N, m->NH, m->HD);
        op_rope_fwd(k, k, a->pos, &m->rope, N, m->NKV, m->HD);
        op_attention_fwd(y, att, q, k, vv, keymask ? a->keymask : NULL, B, T, m->NH, m->NKV,
                         m->HD, false);
        if (rl)
            op_round_bf16(y, (size_t)N * QD);
        lin_fwd(m, a, v, l, ls, LIN_O, h, y, N);
        add_to(h, x, (size_t)N * C);
        // MLP sub-block
        op_rmsnorm_fwd(n2, rstd2, h, w->ff_norm, N, m->C, eps);
        if (rl)
            op_round_bf16(n2, (size_t)N * C);
        lin_fwd(m, a, v, l, ls, LIN_GATE, g, n2, N);
        lin_fwd(m, a, v, l, ls, LIN_UP, u, n2, N);
        op_swiglu_fwd(s, g, u, (size_t)N * H);
        if (rl)
            op_round_bf16(s, (size_t)N * H);
        lin_fwd(m, a, v, l, ls, LIN_DOWN, xn, s, N);
        add_to(xn, h, (size_t)N * C);
    }
    // ln_f and the head only on the requested rows
    const float *xL = a->resid + (keep ? (size_t)m->L : (size_t)m->L % 2) * sN * C;
    for (int r = 0; r < R; r++)
        memcpy(a->xr + r * C, xL + (size_t)a->rows[r] * C, C * sizeof(float));
    op_rmsnorm_fwd(a->nf, a->rstdf, a->xr, v->ln_f, R, m->C, eps);
    if (v->round_head)
        op_round_bf16(a->nf, (size_t)R * C);
    op_linear_fwd(logits, a->nf, v->head, R, m->C, m->V);
    a->valid = keep;
    return 0;
}

int llada_forward(llada_model *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                  const int32_t *rows, int n_rows, float *logits)
{
    return forward(m, &m->a, &m->tv, tokens, keymask, B, T, rows, n_rows, logits, true);
}

int llada_forward_nograd(llada_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                         int T, const int32_t *rows, int n_rows, float *logits)
{
    return forward(m, &m->a, &m->tv, tokens, keymask, B, T, rows, n_rows, logits, false);
}

int llada_forward_rollout(llada_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                          int T, const int32_t *rows, int n_rows, float *logits)
{
    const weight_view *v = m->prec.rollout == LLADA_ROLLOUT_TRAINER ? &m->tv : &m->rv;
    return forward(m, &m->ra, v, tokens, keymask, B, T, rows, n_rows, logits, false);
}

/* ---- precision -------------------------------------------------------------------- */

const char *llada_rollout_name(llada_rollout_kind k)
{
    return k == LLADA_ROLLOUT_BF16 ? "bf16" : k == LLADA_ROLLOUT_FP8 ? "fp8" : "trainer";
}

int llada_precision_parse(llada_precision *p, const char *trainer, const char *rollout,
                          const char *format, const char *scaling, bool pow2_scale,
                          dllm_err *err)
{
    *p = (llada_precision){.trainer_bf16 = false, .rollout = LLADA_ROLLOUT_TRAINER,
                           .fp8_format = FP8_E4M3, .fp8_scaling = FP8_SCALE_BLOCK,
                           .fp8_pow2_scale = pow2_scale};
    if (trainer && *trainer) {
        if (!strcmp(trainer, "bf16"))
            p->trainer_bf16 = true;
        else if (strcmp(trainer, "fp32"))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "trainer precision '%s': expected fp32 or bf16", trainer);
    }
    if (rollout && *rollout) {
        if (!strcmp(rollout, "bf16"))
            p->rollout = LLADA_ROLLOUT_BF16;
        else if (!strcmp(rollout, "fp8"))
            p->rollout = LLADA_ROLLOUT_FP8;
        else if (strcmp(rollout, "trainer"))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "rollout precision '%s': expected trainer, bf16 or fp8", rollout);
    }
    if (format && *format && fp8_format_parse(format, &p->fp8_format, err))
        return dllm_err_prefix(err, "rollout.fp8.format");
    if (scaling && *scaling) {
        if (fp8_scaling_parse(scaling, &p->fp8_scaling, err) ||
            p->fp8_scaling == FP8_SCALE_GROUP)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "rollout.fp8.scaling '%s': expected block, channel or tensor "
                                "(the weights' scaling; activations follow it)", scaling);
    }
    return 0;
}

llada_precision llada_get_precision(const llada_model *m) { return m->prec; }

int llada_rollout_sync(llada_model *m, const llada_precision *p, double *seconds, dllm_err *err)
{
    double t0 = dllm_now();
    if ((unsigned)p->rollout > LLADA_ROLLOUT_FP8 || (unsigned)p->fp8_format > FP8_E5M2 ||
        (p->fp8_scaling != FP8_SCALE_BLOCK && p->fp8_scaling != FP8_SCALE_CHANNEL &&
         p->fp8_scaling != FP8_SCALE_TENSOR))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "llada_rollout_sync: bad precision (rollout %d, fp8 format %d, "
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

int llada_rollout_linear(llada_model *m, int layer, const char *name, const float *inp, int N,
                         float *out)
{
    int bit = llada_lora_target_bit(name), j = 0;
    if (!bit || layer < 0 || layer >= m->L || N <= 0)
        return DLLM_EXIT_INPUT;
    while (!((bit >> j) & 1))
        j++;
    const weight_view *v = m->prec.rollout == LLADA_ROLLOUT_TRAINER ? &m->tv : &m->rv;
    int o, i;
    lin_shape(m, j, &o, &i);
    float *x = dllm_malloc((size_t)N * i * sizeof(float)); // (N, in)
    memcpy(x, inp, (size_t)N * i * sizeof(float));
    if (v->round_lin)
        op_round_bf16(x, (size_t)N * i);
    if (v->q8)
        op_fp8_linear_fwd(out, x, &v->q8[layer * NLIN + j], N, i, o);
    else
        op_linear_fwd(out, x, v->lw[layer].w[j], N, i, o);
    const lora_adapter *ad = v->lora && m->ad ? &m->ad[layer * NLIN + j] : NULL;
    if (ad && ad->A) {
        int r = m->lora_rank;
        float *xa = dllm_malloc((size_t)N * r * sizeof(float)); // (N, r)
        op_linear_fwd(xa, x, ad->A, N, i, r);
        op_gemm(false, true, N, o, r, m->lora_scale, xa, ad->B, 1.0f, out);
        free(xa);
    }
    free(x);
    return 0;
}

/* ---- backward --------------------------------------------------------------------- */

void llada_backward(llada_model *m, const float *dlogits)
{
    llada_acts *a = &m->a;
    if (!a->valid) {
        fprintf(stderr, "llada_backward: no forward pass to differentiate\n");
        abort();
    }
    ensure_grads(m);
    int N = a->N, R = a->R, B = a->B, T = a->T;
    size_t C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD, KD = (size_t)m->KD;
    size_t sN = a->capN;

    // head and ln_f on the gathered rows, then scatter into dx = dL/dx_L
    memset(a->dnf, 0, (size_t)R * C * sizeof(float));
    memset(a->dxr, 0, (size_t)R * C * sizeof(float));
    op_linear_bwd(a->dnf, m->d_head, dlogits, a->nf, m->tv.head, R, m->C, m->V);
    op_rmsnorm_bwd(a->dxr, m->d_ln_f, a->dnf, a->xr, m->tv.ln_f, a->rstdf, R, m->C);
    memset(a->dx, 0, (size_t)N * C * sizeof(float));
    for (int r = 0; r < R; r++) {
        float *d = a->dx + (size_t)a->rows[r] * C;
        const float *src = a->dxr + r * C;
        for (size_t c = 0; c < C; c++)
            d[c] += src[c];
    }

    for (int l = m->L - 1; l >= 0; l--) {
        const llada_layer *w = &m->tv.lw[l]; /* straight-through under a bf16 trainer */
        const llada_layer *gw = &m->lg[l];
        const float *x = a->resid + l * sN * C;
        const float *n1 = a->n1 + l * sN * C, *rstd1 = a->rstd1 + l * sN;
        const float *q = a->q + l * sN * QD, *k = a->k + l * sN * KD, *v = a->v + l * sN * KD;
        const float *att = a->att + l * a->capAtt, *y = a->y + l * sN * QD;
        const float *h = a->h + l * sN * C, *n2 = a->n2 + l * sN * C;
        const float *rstd2 = a->rstd2 + l * sN;
        const float *g = a->g + l * sN * H, *u = a->u + l * sN * H, *s = a->s + l * sN * H;

        // MLP: x_{l+1} = h + ff_out(silu(ff_proj n2) * up_proj n2)
        memcpy(a->dh, a->dx, (size_t)N * C * sizeof(float));
        memset(a->ds, 0, (size_t)N * H * sizeof(float));
        lin_bwd(m, l, LIN_DOWN, a->ds, a->dx, s, N);
        memset(a->dg, 0, (size_t)N * H * sizeof(float));
        memset(a->du, 0, (size_t)N * H * sizeof(float));
        op_swiglu_bwd(a->dg, a->du, a->ds, g, u, (size_t)N * H);
        memset(a->dn, 0, (size_t)N * C * sizeof(float));
        lin_bwd(m, l, LIN_GATE, a->dn, a->dg, n2, N);
        lin_bwd(m, l, LIN_UP, a->dn, a->du, n2, N);
        op_rmsnorm_bwd(a->dh, gw->ff_norm, a->dn, h, w->ff_norm, rstd2, N, m->C);

        // attention: h = x + attn_out(y)
        memcpy(a->dx, a->dh, (size_t)N * C * sizeof(float));
        memset(a->dy, 0, (size_t)N * QD * sizeof(float));
        lin_bwd(m, l, LIN_O, a->dy, a->dh, y, N);
        memset(a->dq, 0, (size_t)N * QD * sizeof(float));
        memset(a->dk, 0, (size_t)N * KD * sizeof(float));
        memset(a->dv, 0, (size_t)N * KD * sizeof(float));
        op_attention_bwd(a->dq, a->dk, a->dv, a->dy, att, q, k, v, B, T, m->NH, m->NKV, m->HD);
        op_rope_bwd(a->dq, a->dq, a->pos, &m->rope, N, m->NH, m->HD); /* in place */
        op_rope_bwd(a->dk, a->dk, a->pos, &m->rope, N, m->NKV, m->HD);
        memset(a->dn, 0, (size_t)N * C * sizeof(float));
        lin_bwd(m, l, LIN_Q, a->dn, a->dq, n1, N);
        lin_bwd(m, l, LIN_K, a->dn, a->dk, n1, N);
        lin_bwd(m, l, LIN_V, a->dn, a->dv, n1, N);
        op_rmsnorm_bwd(a->dx, gw->attn_norm, a->dn, x, w->attn_norm, rstd1, N, m->C);
    }
    op_embedding_bwd(m->d_wte, a->dx, a->tokens, N, m->C);
}

/* ---- checkpoints ------------------------------------------------------------------ */

int llada_load(llada_model **out, const char *dir, dllm_err *err)
{
    *out = NULL;
    dllm_model_config cfg;
    int rc = dllm_config_load(&cfg, dir, err);
    if (rc)
        return rc;
    char where[4096];
    snprintf(where, sizeof where, "%s/config.json", dir);
    if (cfg.arch != DLLM_ARCH_LLADA)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: model_type is not llada", where);
    if ((rc = check_config(&cfg, where, err)))
        return rc;
    llada_model *m = model_alloc(&cfg);
    if ((rc = param_io_read(m->plist, m->np, dir, err))) {
        llada_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int llada_save(const llada_model *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
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

int llada_lora_load(llada_model *m, const char *path, dllm_err *err)
{
    if (!m->lora_rank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: LoRA is not enabled on the model", path);
    return param_io_read(m->llist, m->nl, path, err);
}

int llada_lora_save(const llada_model *m, const char *path, dllm_err *err)
{
    if (!m->lora_rank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: LoRA is not enabled on the model", path);
    return param_io_write_file(m->llist, m->nl, path, err);
}
