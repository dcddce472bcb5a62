/* transformer_fwd.c: the forward of the transformer core (transformer.h), every op
 * through the model's backend; its backward is transformer_bwd.c's.
 *
 *   x_0 = embed[tokens]                                         (N, C), N = B*T
 *   layer l:  n1 = attn_norm(x_l)
 *             q = RoPE([q_norm](q_proj n1 [+ q_bias])), k likewise, v = v_proj n1 [+ v_bias]
 *             y = softmax(q k^T / sqrt(HD) [+ causal] + keymask) v    (GQA)
 *             h = x_l + o_proj y
 *             n2 = mlp_norm(h);  s = silu(gate_proj n2) * up_proj n2
 *             x_{l+1} = h + down_proj s
 *   logits[r] = head(final_norm(x_L[hrow(r)]))     only the requested rows;
 *             hrow(r) = rows[r], or with shifted logits the position before it
 *             in its sequence (the first position reads itself)
 * (the bracketed parts as the descriptor says, dllm/arch.h).
 *
 * Gradient convention (as kernels/ops.h): parameter gradients accumulate (+=)
 * across dllm_tf_backward calls until dllm_optim_zero_grad; activation gradients
 * are scratch, zeroed here before each op that accumulates into them. Tied:
 * the head's gradient and the embedding's land in the one embedding gradient.
 *
 * LoRA on a layer linear: out = x W^T + (alpha/r) (x A^T) B^T, A (r, in),
 * B (out, r). With LoRA on, base weights are frozen (no dW is computed) and
 * only A, B are trainable. The head never carries LoRA. A view that rounds its
 * linears' inputs to bf16 (the bf16 trainer) multiplies the LoRA path on bf16
 * operands too (the backend's gemm_bf16: A, B, x A^T and, backward, dout and
 * dxa rounded as read, fp32 sums), as torch.autocast(bfloat16) runs a PEFT
 * adapter over fp32 masters; fp32 views keep fp32 products.
 *
 * Precision: a forward reads its weights through a view (transformer_view.c)
 * that also says where linear inputs are rounded to bf16 and in which format
 * the linears multiply (fp32, packed bf16, FP8, NVFP4); rounding is applied
 * in place to the saved linear inputs (n1, y, n2, s, nf), which serve nothing
 * but those linears, so the backward sees the rounded values. The backward
 * reads the trainer view's weights (the rounded ones under a bf16 trainer:
 * straight-through). */
#include "dllm/transformer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS (m->be->ops)

/* ---- activations ------------------------------------------------------------------ */

/* Buffers in the memory of the activations' backend (none set: the host's). */
static dllm_backend *acts_be(const tf_acts *a)
{
    return a->be ? a->be : dllm_backend_cpu();
}

/* The forward buffers (in the region when the set has one) and the backward scratch. */
#define ACTS_FWD(X)                                                                            \
    X(tokens) X(keymask) X(pos) X(rows) X(hrows) X(resid) X(n1) X(rstd1) X(qr) X(rstdq) X(q)   \
    X(kr) X(rstdk) X(k) X(v) X(att) X(y) X(h) X(n2) X(rstd2) X(g) X(u) X(s) X(xa) X(xr) X(nf)  \
    X(rstdf)
#define ACTS_BWD(X)                                                                            \
    X(dx) X(dn) X(dq) X(dy) X(dqr) X(dk) X(dv) X(dkr) X(dg) X(du) X(ds) X(dxa) X(dxr)    \
    X(dnf)

/* Region offsets are 256-byte aligned, as the device allocator's pointers are. */
enum { REGION_ALIGN = 256 };

/* A forward buffer of `bytes` (+4, as every activation buffer): from the backend, or
 * placed in the region (measure: only counted). */
static bool region_measure;
static void *acts_alloc(tf_acts *a, size_t bytes)
{
    if (!a->region)
        return acts_be(a)->ops->alloc(acts_be(a), bytes + 4);
    size_t off = a->rused;
    a->rused += (bytes + 4 + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
    return region_measure ? NULL : a->region->base + off;
}
#define ACTS_F(n) ((float *)acts_alloc(a, (size_t)(n) * sizeof(float)))

static void bwd_free(tf_acts *a)
{
    dllm_backend *mem = acts_be(a);
#define FREE_(f) mem->ops->free(mem, a->f), a->f = NULL;
    ACTS_BWD(FREE_)
#undef FREE_
    a->bwdN = a->bwdR = 0;
}

/* a as new, keeping its backend, region and backward scratch (keep_bwd) or not. */
static void acts_reset(tf_acts *a, bool keep_bwd)
{
    tf_acts k = *a;
    memset(a, 0, sizeof *a);
    a->be = k.be;
    a->region = k.region;
    if (keep_bwd) {
#define KEEP_(f) a->f = k.f;
        ACTS_BWD(KEEP_)
#undef KEEP_
        a->bwdN = k.bwdN, a->bwdR = k.bwdR;
    }
}

void tf_acts_free(tf_acts *a)
{
    dllm_backend *mem = acts_be(a);
    if (a->region && a->region->owner == a)
        a->region->owner = NULL;
    if (!a->region) {
#define FREE_(f) mem->ops->free(mem, a->f);
        ACTS_FWD(FREE_)
#undef FREE_
    }
    bwd_free(a);
    acts_reset(a, false);
}

/* r at least need bytes (growing moves it: its owner loses its buffers). */
static void region_grow(tf_region *r, dllm_backend *be, size_t need)
{
    if (need <= r->cap)
        return;
    if (r->owner)
        acts_reset(r->owner, true);
    r->owner = NULL;
    if (r->base)
        be->ops->free(be, r->base);
    r->base = be->ops->alloc(be, need);
    r->cap = need;
}

static void acts_lay_out(dllm_tf *m, tf_acts *a);

void tf_acts_set_region(dllm_tf *m, tf_acts *a, tf_region *r)
{
    tf_acts held = *a;
    tf_acts_free(a);
    a->region = r;
    if (r && held.tokens && !held.region) { /* the region fits what a held */
        a->capN = held.capN, a->capAtt = held.capAtt, a->capR = held.capR;
        a->capL = held.capL, a->capX = held.capX;
        region_measure = true;
        acts_lay_out(m, a);
        region_measure = false;
        region_grow(r, acts_be(a), a->rused);
        acts_reset(a, false);
    }
}

void tf_region_free(tf_region *r, dllm_backend *be)
{
    if (r->owner)
        acts_reset(r->owner, true);
    if (r->base)
        be->ops->free(be, r->base);
    *r = (tf_region){0};
}

/* a lays its forward buffers out in its region (need bytes): the previous owner loses
 * them, and the region grows when it is too small. */
static void region_take(tf_acts *a, size_t need)
{
    tf_region *r = a->region;
    if (r->owner && r->owner != a) {
        acts_reset(r->owner, true);
        r->owner->lost = true;
    }
    r->owner = NULL;
    region_grow(r, acts_be(a), need);
    r->owner = a;
}

/* The recomputation segment length of a kept forward (0: none), at most L. */
static int recompute_k(const dllm_tf *m) { return m->recompute < m->L ? m->recompute : 0; }

/* The residual-stream slot of x_l (l in [0, L]) under recomputation K: the segments'
 * inputs x_0, x_K, ... and x_L first (ceil(L/K) + 1 slots), then the inputs inside a
 * segment (K - 1 slots, reused by every segment). K = 0: slot l. */
size_t tf_acts_xslot(const dllm_tf *m, int K, int l)
{
    if (!K)
        return (size_t)l;
    int nck = (m->L + K - 1) / K + 1;
    return l % K == 0 || l == m->L ? (size_t)((l + K - 1) / K) : (size_t)(nck + l % K - 1);
}

/* The forward buffers at a's caps, in this order (the region's layout). */
static void acts_lay_out(dllm_tf *m, tf_acts *a)
{
    size_t capN = a->capN, capR = a->capR;
    size_t L = (size_t)a->capL, C = (size_t)m->C, H = (size_t)m->H;
    size_t QD = (size_t)m->QD, KD = (size_t)m->KD, r = (size_t)m->lora_rank;
    bool qkn = m->arch->qk_norm;
    a->tokens = acts_alloc(a, capN * sizeof(int32_t));
    a->keymask = acts_alloc(a, capN);
    a->pos = acts_alloc(a, capN * sizeof(int32_t));
    a->rows = acts_alloc(a, (capR + 1) * sizeof(int32_t));
    a->hrows = acts_alloc(a, (capR + 1) * sizeof(int32_t));
    a->resid = ACTS_F((size_t)a->capX * capN * C);
    a->n1 = ACTS_F(L * capN * C);
    a->rstd1 = ACTS_F(L * capN);
    a->qr = qkn ? ACTS_F(L * capN * QD) : NULL;
    a->rstdq = qkn ? ACTS_F(L * capN * m->NH) : NULL;
    a->q = ACTS_F(L * capN * QD);
    a->kr = qkn ? ACTS_F(L * capN * KD) : NULL;
    a->rstdk = qkn ? ACTS_F(L * capN * m->NKV) : NULL;
    a->k = ACTS_F(L * capN * KD);
    a->v = ACTS_F(L * capN * KD);
    a->att = ACTS_F(L * a->capAtt);
    a->y = ACTS_F(L * capN * QD);
    a->h = ACTS_F(L * capN * C);
    a->n2 = ACTS_F(L * capN * C);
    a->rstd2 = ACTS_F(L * capN);
    a->g = ACTS_F(L * capN * H);
    a->u = ACTS_F(L * capN * H);
    a->s = ACTS_F(L * capN * H);
    a->xa = r ? ACTS_F(L * DLLM_NLIN * capN * r) : NULL;
    a->xr = ACTS_F(capR * C);
    a->nf = ACTS_F(capR * C);
    a->rstdf = ACTS_F(capR);
}

/* Sizes the buffers for B*T rows, R head rows, `layers` slots of layer activations (L
 * for training, K under recomputation, 1 for a forward without backward) and `xslots`
 * residual-stream slots (L + 1; ceil(L/K) + K; 2, alternating, without backward). In a
 * region: laid out again whenever another set used it since. */
static void acts_ensure_slots(dllm_tf *m, tf_acts *a, int B, int T, int R, int layers,
                              int xslots)
{
    dllm_backend *be = a->be ? a->be : m->be;
    size_t N = (size_t)B * T, natt = be->ops->attn_state_floats(be, B, T, m->NH);
    if (a->tokens && N <= a->capN && natt <= a->capAtt && (size_t)R <= a->capR &&
        layers <= a->capL && xslots <= a->capX && (!a->region || a->region->owner == a))
        return;
    bool fits = a->tokens != NULL; /* the caps only grow: the larger of old and new */
    size_t capN = fits && a->capN > N ? a->capN : N;
    size_t capAtt = fits && a->capAtt > natt ? a->capAtt : natt;
    size_t capR = fits && a->capR > (size_t)R ? a->capR : (size_t)R;
    int capL = fits && a->capL > layers ? a->capL : layers;
    int capX = fits && a->capX > xslots ? a->capX : xslots;
    if (a->region) {
        if (a->region->owner == a)
            a->region->owner = NULL;
        acts_reset(a, true); /* the backward scratch stays (tf_acts_ensure_bwd resizes it) */
    } else {
        tf_acts_free(a);
    }
    a->capN = capN;
    a->capAtt = capAtt;
    a->capR = capR;
    a->capL = capL;
    a->capX = capX;
    if (a->region) {
        a->rused = 0;
        region_measure = true;
        acts_lay_out(m, a);
        region_measure = false;
        region_take(a, a->rused);
        a->rused = 0;
    }
    acts_lay_out(m, a);
}

void tf_acts_ensure(dllm_tf *m, tf_acts *a, int B, int T, int R, int layers)
{
    acts_ensure_slots(m, a, B, T, R, layers, layers + 1);
}

void tf_acts_ensure_fwd(dllm_tf *m, tf_acts *a, int B, int T, int R, bool keep)
{
    int K = keep ? recompute_k(m) : 0;
    if (!keep)
        acts_ensure_slots(m, a, B, T, R, 1, 2);
    else if (!K)
        acts_ensure_slots(m, a, B, T, R, m->L, m->L + 1);
    else
        acts_ensure_slots(m, a, B, T, R, K, (m->L + K - 1) / K + K);
}

int dllm_tf_set_recompute(dllm_tf *m, int every)
{
    if (every < 0) {
        fprintf(stderr, "%s: recomputation every %d layers: expected 0 (none) or K >= 1\n",
                m->arch->name, every);
        return DLLM_EXIT_INPUT;
    }
    m->recompute = every;
    /* a kept forward's slots follow the setting: rebuilt at the new size */
    tf_acts_free(&m->a); /* keeps its backend: the host's, or a device's that trains */
    return 0;
}

/* Backward scratch, allocated by the first backward (in a's memory: the backend's own
 * buffers, never in a region), again when the forward's rows outgrew it. */
#define BWD_F(n) ((float *)acts_be(a)->ops->alloc(acts_be(a), (size_t)(n) * sizeof(float) + 4))
void tf_acts_ensure_bwd(dllm_tf *m, tf_acts *a)
{
    if (a->dx && a->bwdN >= a->capN && a->bwdR >= a->capR)
        return;
    bwd_free(a);
    a->bwdN = a->capN, a->bwdR = a->capR;
    size_t N = a->capN, C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD;
    size_t KD = (size_t)m->KD, r = (size_t)m->lora_rank;
    bool qkn = m->arch->qk_norm; /* dqr, dkr: the gradients before q_norm and k_norm */
    a->dx = BWD_F(N * C);
    a->dn = BWD_F(N * C);
    a->dq = BWD_F(N * QD);
    a->dy = BWD_F(N * QD);
    a->dqr = qkn ? BWD_F(N * QD) : NULL;
    a->dk = BWD_F(N * KD);
    a->dv = BWD_F(N * KD);
    a->dkr = qkn ? BWD_F(N * KD) : NULL;
    a->dg = BWD_F(N * H);
    a->du = BWD_F(N * H);
    a->ds = BWD_F(N * H);
    a->dxa = r ? BWD_F(N * r) : NULL;
    a->dxr = BWD_F(a->capR * C);
    a->dnf = BWD_F(a->capR * C);
}

size_t dllm_tf_activation_floats(const dllm_tf *m)
{
    const tf_acts *a = &m->a;
    size_t L = (size_t)a->capL, C = (size_t)m->C, H = (size_t)m->H, N = a->capN;
    size_t qkn = m->arch->qk_norm ? (size_t)(m->QD + m->KD + m->NH + m->NKV) : 0;
    return (size_t)a->capX * N * C +
           L * (N * (4 * C + 2 * m->QD + 2 * m->KD + 3 * H + 2 + qkn) + a->capAtt) +
           (a->xa ? L * DLLM_NLIN * N * (size_t)m->lora_rank : 0) + a->capR * (2 * C + 1);
}

/* ---- linears ---------------------------------------------------------------------- */

/* Linear j of layer l's LoRA adapter as view v applies it at run time, or NULL. */
static const tf_lora *lin_lora(const dllm_tf *m, const tf_view *v, int l, int j)
{
    const tf_lora *ads = v->be == m->be ? m->ad : v->ad; /* a device view: its copies only */
    const tf_lora *ad = v->lora && ads ? &ads[l * DLLM_NLIN + j] : NULL;
    return ad && ad->A ? ad : NULL;
}

/* out (N, o) += the LoRA path of linear j, where the view has one. */
static void lin_lora_fwd(const dllm_tf *m, const tf_view *v, int l, int j, float *out,
                         const float *inp, int N, float *xa)
{
    int o, i;
    tf_lin_shape(m, j, &o, &i);
    dllm_backend *be = v->be;
    const tf_lora *ad = lin_lora(m, v, l, j);
    if (ad) {
        int r = m->lora_rank;
        if (v->round_lin) {
            be->ops->gemm_bf16(be, false, true, N, r, i, 1.0f, inp, ad->A, 0.0f, xa);
            be->ops->gemm_bf16(be, false, true, N, o, r, m->lora_scale, xa, ad->B, 1.0f, out);
        } else {
            be->ops->linear_fwd(be, xa, inp, ad->A, N, i, r);
            be->ops->gemm(be, false, true, N, o, r, m->lora_scale, xa, ad->B, 1.0f, out);
        }
    }
}

dllm_lin_weight tf_lin_weight(const tf_view *v, int l, int j)
{
    size_t k = (size_t)l * DLLM_NLIN + (size_t)j;
    dllm_lin_weight w = {0};
    if (v->q8) /* tf_lin_fwd's order of the formats */
        w.f8 = &v->q8[k];
    else if (v->q4)
        w.f4 = &v->q4[k];
    else if (v->qi)
        w.i8 = &v->qi[k];
    else if (v->b16)
        w.b16 = &v->b16[k];
    return w;
}

void tf_lin_fwd(const dllm_tf *m, const tf_view *v, int l, int j, float *out, const float *inp,
                int N, float *xa)
{
    int o, i;
    tf_lin_shape(m, j, &o, &i);
    size_t k = (size_t)l * DLLM_NLIN + (size_t)j;
    dllm_backend *be = v->be;
    if (v->q8)
        be->ops->fp8_linear_fwd(be, out, inp, &v->q8[k], N, i, o);
    else if (v->q4)
        be->ops->nvfp4_linear_fwd(be, out, inp, &v->q4[k], N, i, o);
    else if (v->qi)
        be->ops->int8_linear_fwd(be, out, inp, &v->qi[k], N, i, o);
    else if (v->b16) {
        const tf_lora *ad = v->round_lin ? lin_lora(m, v, l, j) : NULL;
        if (ad) { /* the base and lin_lora_fwd's bf16 products in one call */
            be->ops->bf16_lora_fwd(be, out, xa, inp, NULL, NULL, &v->b16[k], ad->A, ad->B,
                                   m->lora_scale, N, i, o, m->lora_rank);
            return;
        }
        be->ops->bf16_linear_fwd(be, out, inp, &v->b16[k], N, i, o);
    } else
        be->ops->linear_fwd(be, out, inp, v->lw[l].t[j], N, i, o);
    lin_lora_fwd(m, v, l, j, out, inp, N, xa);
}

/* ---- forward ---------------------------------------------------------------------- */

/* linear j [+ its bias], xa slot from io; qa: its input already quantised by the
 * producer (fused_act), or NULL */
static void lin_bias_fwd(dllm_tf *m, const tf_view *v, int l, int j, int bias_slot, float *out,
                         const float *inp, int N, const tf_layer_io *io, const dllm_qact *qa)
{
    const tf_lora *ad = qa && v->round_lin ? lin_lora(m, v, l, j) : NULL;
    if (qa) {
        int o, i;
        tf_lin_shape(m, j, &o, &i);
        dllm_lin_weight w = tf_lin_weight(v, l, j);
        if (ad) /* tf_lin_fwd's LoRA linear over the producer's bf16 copy */
            v->be->ops->bf16_lora_fwd(v->be, out,
                                      io->xa ? io->xa + (size_t)j * io->xa_stride : NULL, inp,
                                      qa, NULL, w.b16, ad->A, ad->B, m->lora_scale, N, i, o,
                                      m->lora_rank);
        else
            v->be->ops->linear_quant_act_fwd(v->be, out, qa, &w, N, i, o);
    } else {
        tf_lin_fwd(m, v, l, j, out, inp, N, io->xa ? io->xa + (size_t)j * io->xa_stride : NULL);
    }
    const float *b = bias_slot ? v->lw[l].t[bias_slot] : NULL;
    if (b) {
        int o, i;
        tf_lin_shape(m, j, &o, &i);
        v->be->ops->bias_fwd(v->be, out, b, N, o);
    }
}

/* out (N, C) = linear j of layer l (no bias) over inp, or over fq (its input quantised by
 * the producer), + res: the residual stream's update. One call where the view's weight is
 * packed and nothing runs between the product and the sum (no run-time LoRA), so that a
 * device adds res in the GEMM's epilogue; each element is the product plus res rounded
 * once, as the linear, then add. A bf16 trainer's LoRA linear is one call too
 * (bf16_lora_fwd: on the host the linear, then add; a device adds in its GEMMs'
 * epilogues, in another order). */
static void lin_res_fwd(dllm_tf *m, const tf_view *v, int l, int j, float *out,
                        const float *res, const float *inp, int N, const tf_layer_io *io,
                        const dllm_qact *fq)
{
    dllm_lin_weight w = tf_lin_weight(v, l, j);
    int o, i;
    tf_lin_shape(m, j, &o, &i);
    const tf_lora *ad = lin_lora(m, v, l, j);
    if ((w.f8 || w.f4 || w.i8 || w.b16) && !ad) {
        v->be->ops->linear_res_fwd(v->be, out, res, fq ? NULL : inp, fq, &w, N, i, o);
        return;
    }
    if (w.b16 && ad && v->round_lin) { /* tf_lin_fwd's LoRA linear, then add */
        v->be->ops->bf16_lora_fwd(v->be, out, io->xa ? io->xa + (size_t)j * io->xa_stride : NULL,
                                  inp, fq, res, w.b16, ad->A, ad->B, m->lora_scale, N, i, o,
                                  m->lora_rank);
        return;
    }
    lin_bias_fwd(m, v, l, j, 0, out, inp, N, io, fq);
    v->be->ops->add(v->be, out, res, (size_t)N * o);
}

/* Whether the producer of the input of the FP8, INT8 or bf16 linears js[0..n) of layer l
 * writes their codes or bf16 copy itself (the backend's fused ops; qa set up for it), on
 * a backend that has the ops and takes these weights: an FP8 or INT8 view without bf16
 * rounding or run-time LoRA between producer and linear, or a packed bf16 view (whose
 * linears, LoRA products included, read the input rounded to bf16: the copy). Otherwise
 * each linear quantises or rounds its fp32 input. */
static bool fused_act(const dllm_tf *m, const tf_view *v, int l, const int *js, int n, int N,
                      dllm_qact *qa)
{
    dllm_backend *be = v->be;
    bool quant = (v->q8 || v->qi) && !v->round_lin && !v->lora;
    bool bf16 = v->b16 && (!v->lora || v->round_lin);
    if (!v->fuse_act || !(quant || bf16) || !dllm_backend_supports(be, DLLM_OP_FUSED_ACT))
        return false;
    dllm_lin_weight ws[3];
    for (int i = 0; i < n; i++)
        ws[i] = tf_lin_weight(v, l, js[i]);
    int o, c;
    tf_lin_shape(m, js[0], &o, &c);
    return be->ops->act_quant_prepare(be, qa, N, c, ws, n);
}

/* The n <= 3 linears js[] [+ their biases] of one input (q/k/v, gate/up): as n calls
 * of lin_bias_fwd, bit for bit. On a backend with the grouped linears (the CPU's) a
 * packed or quantised copy's products go in one call, which rounds or quantises the
 * shared input once instead of n times; fq: the codes a device producer wrote
 * (fused_act), passed to each linear. */
static void lin_group_fwd(dllm_tf *m, const tf_view *v, int l, int n, const int *js,
                          const int *bias_slots, float *const *outs, const float *inp, int N,
                          const tf_layer_io *io, const dllm_qact *fq)
{
    bool packed = v->q8 || v->q4 || v->qi || v->b16;
    if (!packed || !dllm_backend_supports(v->be, DLLM_OP_LINEARS) || fq) {
        for (int g = 0; g < n; g++)
            lin_bias_fwd(m, v, l, js[g], bias_slots[g], outs[g], inp, N, io, fq);
        return;
    }
    dllm_lin_weight ws[3] = {{0}}; /* initialised for the compilers that cannot see n <= 3 */
    int ocs[3] = {0}, i = 0;
    for (int g = 0; g < n; g++) {
        tf_lin_shape(m, js[g], &ocs[g], &i);
        ws[g] = tf_lin_weight(v, l, js[g]);
    }
    v->be->ops->linears_fwd(v->be, n, outs, inp, ws, N, i, ocs);
    for (int g = 0; g < n; g++) {
        lin_lora_fwd(m, v, l, js[g], outs[g], inp, N,
                     io->xa ? io->xa + (size_t)js[g] * io->xa_stride : NULL);
        const float *b = bias_slots[g] ? v->lw[l].t[bias_slots[g]] : NULL;
        if (b)
            v->be->ops->bias_fwd(v->be, outs[g], b, N, ocs[g]);
    }
}

/* The RMSNorm (by weight w, of x (N, C) into out, rstd) feeding linears js of layer l: where
 * its producer is fused (fused_act) it writes the codes or bf16 copy those linears read,
 * returned (and out only beside a bf16 copy, for the backward: a code's fp32 output would be
 * read by nothing); else out, rounded to bf16 where the view rounds the linears' inputs
 * and they do not round as they read. */
static const dllm_qact *norm_fwd(const dllm_tf *m, const tf_view *v, int l, const int *js, int n,
                                 int N, float *out, float *rstd, const float *x, const float *w,
                                 dllm_qact *qa)
{
    dllm_backend *be = v->be;
    float eps = m->cfg.rms_norm_eps;
    const dllm_qact *fq = NULL;
    if (fused_act(m, v, l, js, n, N, qa)) {
        be->ops->rmsnorm_quant_fwd(be, qa->kind == DLLM_QACT_BF16 ? out : NULL, rstd, qa, x, w,
                                   N, m->C, eps);
        fq = qa;
    } else {
        be->ops->rmsnorm_fwd(be, out, rstd, x, w, N, m->C, eps);
    }
    if (v->round_lin && !v->lin_rounds)
        be->ops->round_bf16(be, out, (size_t)N * m->C);
    return fq;
}

/* The attention half of layer l at view v's numerics over N rows at RoPE positions pos:
 * io->y from io->x. */
static void layer_attn_fwd(dllm_tf *m, const tf_view *v, int l, int N, const int32_t *pos,
                           tf_layer_io *io, tf_attn_fn attn, void *ctx)
{
    const tf_layer *w = &v->lw[l];
    dllm_backend *be = v->be;
    const op_rope_table *rope = &m->rope;
    float eps = m->cfg.rms_norm_eps;
    static const int QKV[] = {DLLM_LIN_Q, DLLM_LIN_K, DLLM_LIN_V};
    dllm_qact qa;
    const dllm_qact *fq = /* the codes the norm wrote, if it did */
        norm_fwd(m, v, l, QKV, 3, N, io->n1, io->rstd1, io->x, w->t[DLLM_T_ATTN_NORM], &qa);
    static const int qkv_bias[3] = {DLLM_T_Q_BIAS, DLLM_T_K_BIAS, DLLM_T_V_BIAS};
    lin_group_fwd(m, v, l, 3, QKV, qkv_bias, (float *const[]){io->qr, io->kr, io->v}, io->n1, N,
                  io, fq);
    if (m->arch->qk_norm) {
        be->ops->rmsnorm_fwd(be, io->q, io->rstdq, io->qr, w->t[DLLM_T_Q_NORM], N * m->NH, m->HD,
                         eps);
        be->ops->rmsnorm_fwd(be, io->k, io->rstdk, io->kr, w->t[DLLM_T_K_NORM], N * m->NKV,
                         m->HD, eps);
    }
    if (!io->rope_pos) { /* else the attention rotates q and k as it reads them */
        be->ops->rope_fwd(be, io->q, io->q, pos, rope, N, m->NH, m->HD);
        be->ops->rope_fwd(be, io->k, io->k, pos, rope, N, m->NKV, m->HD);
    }
    attn(m, l, io, ctx);
    if (v->round_lin)
        be->ops->round_bf16(be, io->y, (size_t)N * m->QD);
}

/* The rest of layer l over N rows, every op row by row: io->xn = h + MLP(h) with
 * h = x + o_proj y, from io->x and io->y. */
static void layer_tail_fwd(dllm_tf *m, const tf_view *v, int l, int N, tf_layer_io *io)
{
    const tf_layer *w = &v->lw[l];
    dllm_backend *be = v->be;
    size_t H = (size_t)m->H;
    static const int GU[] = {DLLM_LIN_GATE, DLLM_LIN_UP}, DN[] = {DLLM_LIN_DOWN};
    dllm_qact qa;
    const dllm_qact *fq; /* the codes the last producer wrote, if it did */
    lin_res_fwd(m, v, l, DLLM_LIN_O, io->h, io->x, io->y, N, io, NULL);
    fq = norm_fwd(m, v, l, GU, 2, N, io->n2, io->rstd2, io->h, w->t[DLLM_T_MLP_NORM], &qa);
    static const int no_bias[2] = {0, 0};
    lin_group_fwd(m, v, l, 2, GU, no_bias, (float *const[]){io->g, io->u}, io->n2, N, io, fq);
    fq = NULL;
    if (fused_act(m, v, l, DN, 1, N, &qa)) {
        /* (its fp32 output beside a bf16 copy only, as norm_fwd's) */
        be->ops->swiglu_quant_fwd(be, qa.kind == DLLM_QACT_BF16 ? io->s : NULL, &qa, io->g,
                                  io->u, N, (int)H);
        fq = &qa;
    } else {
        be->ops->swiglu_fwd(be, io->s, io->g, io->u, (size_t)N * H);
    }
    if (v->round_lin && !v->lin_rounds)
        be->ops->round_bf16(be, io->s, (size_t)N * H);
    lin_res_fwd(m, v, l, DLLM_LIN_DOWN, io->xn, io->h, io->s, N, io, fq);
}

/* One layer at view v's numerics over N rows at RoPE positions pos. */
static void layer_fwd(dllm_tf *m, const tf_view *v, int l, int N, const int32_t *pos,
                      tf_layer_io *io, tf_attn_fn attn, void *ctx)
{
    layer_attn_fwd(m, v, l, N, pos, io, attn, ctx);
    layer_tail_fwd(m, v, l, N, io);
}

/* The last layer when only the R head rows of x_L are read (a forward without backward):
 * every row's keys and values, as the head rows attend to them all, then the rest of the
 * layer over the head rows alone, gathered (a->hrows) from x and y; x_L's head rows, in
 * order, land in a->xr, where the head reads them. The same ops as layer_fwd over fewer
 * rows: the same values wherever a product is row by row (tf_head_rows_at). */
static void layer_fwd_head_rows(dllm_tf *m, const tf_view *v, int l, tf_acts *a,
                                tf_layer_io *io, tf_attn_fn attn, void *ctx)
{
    dllm_backend *be = v->be;
    layer_attn_fwd(m, v, l, a->N, a->pos, io, attn, ctx);
    /* read by nothing after the attention without a backward: q takes the rows of y, and
     * nf, the head's input, those of x until the head runs */
    be->ops->embedding_fwd(be, io->q, a->hrows, io->y, a->R, m->QD);
    be->ops->embedding_fwd(be, a->nf, a->hrows, io->x, a->R, m->C);
    io->y = io->q;
    io->x = a->nf;
    io->xn = a->xr;
    layer_tail_fwd(m, v, l, a->R, io);
}

void tf_head_fwd(dllm_tf *m, const tf_view *v, const float *xr, float *nf, float *rstdf, int R,
                 float *logits)
{
    dllm_backend *be = v->be;
    be->ops->rmsnorm_fwd(be, nf, rstdf, xr, v->final_norm, R, m->C, m->cfg.rms_norm_eps);
    if (v->round_head)
        be->ops->round_bf16(be, nf, (size_t)R * m->C);
    tf_head_logits(m, v, nf, R, logits);
}

void tf_head_logits(dllm_tf *m, const tf_view *v, const float *nf, int R, float *logits)
{
    dllm_backend *be = v->be;
    if (v->head16.w) /* (the op may fill the matrix's fp32 fallback cache) */
        be->ops->bf16_linear_fwd(be, logits, nf, (bf16_matrix *)&v->head16, R, m->C, m->V);
    else
        be->ops->linear_fwd(be, logits, nf, v->head, R, m->C, m->V);
}

/* Full-sequence attention over the batch of the activations ctx. */
void tf_batch_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx)
{
    (void)l;
    const tf_acts *a = ctx;
    dllm_backend *be = a->be ? a->be : m->be;
    const uint8_t *mask = a->have_mask ? a->keymask : NULL;
    if (io->rope_pos)
        be->ops->rope_attention_fwd(be, io->y, io->att, io->q, io->k, io->v, io->rope_pos,
                                    &m->rope, mask, a->B, a->T, m->NH, m->NKV, m->HD,
                                    m->arch->causal);
    else
        be->ops->attention_fwd(be, io->y, io->att, io->q, io->k, io->v, mask, a->B, a->T,
                               m->NH, m->NKV, m->HD, m->arch->causal);
}

/* Layer l's buffers in a: activation slot ls, input x in residual slot rx, output in rn. */
static tf_layer_io layer_io(const dllm_tf *m, tf_acts *a, size_t ls, size_t rx, size_t rn)
{
    size_t C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD, KD = (size_t)m->KD;
    size_t sN = a->capN; /* per-layer stride of the activation arrays */
    bool qkn = m->arch->qk_norm;
    tf_layer_io io = {
        .x = a->resid + rx * sN * C, .xn = a->resid + rn * sN * C,
        .n1 = a->n1 + ls * sN * C, .rstd1 = a->rstd1 + ls * sN,
        .q = a->q + ls * sN * QD, .k = a->k + ls * sN * KD, .v = a->v + ls * sN * KD,
        .att = a->att + ls * a->capAtt, .y = a->y + ls * sN * QD,
        .h = a->h + ls * sN * C, .n2 = a->n2 + ls * sN * C, .rstd2 = a->rstd2 + ls * sN,
        .g = a->g + ls * sN * H, .u = a->u + ls * sN * H, .s = a->s + ls * sN * H,
        .xa = a->xa ? a->xa + ls * DLLM_NLIN * sN * (size_t)m->lora_rank : NULL,
        .xa_stride = sN * (size_t)m->lora_rank,
    };
    io.qr = qkn ? a->qr + ls * sN * QD : io.q;
    io.kr = qkn ? a->kr + ls * sN * KD : io.k;
    io.rstdq = qkn ? a->rstdq + ls * sN * m->NH : NULL;
    io.rstdk = qkn ? a->rstdk + ls * sN * m->NKV : NULL;
    return io;
}

const float *tf_layers_fwd(dllm_tf *m, tf_acts *a, const tf_view *v, bool keep, tf_attn_fn attn,
                           void *ctx, bool head_rows)
{
    int N = a->N, K = keep ? recompute_k(m) : 0;
    size_t C = (size_t)m->C, sN = a->capN;
    a->head_in_xr = head_rows && !keep && a->R > 0 && a->R < N;
    a->rk = K;
    a->seg = K ? (m->L - 1) / K * K : -1; /* the slots end with the last segment's layers */
    v->be->ops->embedding_fwd(v->be, a->resid, a->tokens, v->embed, N, m->C);
    for (int l = 0; l < m->L; l++) {
        /* activation slot, input and output residual slots */
        size_t ls = !keep ? 0 : K ? (size_t)(l % K) : (size_t)l;
        size_t rx = keep ? tf_acts_xslot(m, K, l) : (size_t)l % 2;
        size_t rn = keep ? tf_acts_xslot(m, K, l + 1) : (size_t)(l + 1) % 2;
        tf_layer_io io = layer_io(m, a, ls, rx, rn);
        /* q and k are read by nothing after the attention but its backward
         * (rope_attention_bwd): it may rotate them itself */
        if (attn == tf_batch_attention)
            io.rope_pos = a->pos;
        if (a->head_in_xr && l == m->L - 1)
            layer_fwd_head_rows(m, v, l, a, &io, attn, ctx);
        else
            layer_fwd(m, v, l, N, a->pos, &io, attn, ctx);
    }
    if (a->head_in_xr)
        return a->xr;
    return a->resid + (keep ? tf_acts_xslot(m, K, m->L) : (size_t)m->L % 2) * sN * C;
}

/* Recomputation: the activations of the segment ending at layer l (its layers from the
 * kept input x_s, the same ops as the forward), into the K slots; the segment's output
 * (x_{l+1}, kept already) goes to scratch. */
void tf_recompute_segment(dllm_tf *m, const tf_bwd_target *t, int l)
{
    tf_acts *a = t->a;
    int K = a->rk, s = l / K * K;
    for (int j = s; j <= l; j++) {
        tf_layer_io io = layer_io(m, a, (size_t)(j % K), tf_acts_xslot(m, K, j), tf_acts_xslot(m, K, j + 1));
        if (j == l)
            io.xn = a->dn; /* free until this layer's backward zeroes it */
        io.rope_pos = a->pos; /* as the kept forward (tf_layers_fwd) */
        layer_fwd(m, t->w, j, a->N, a->pos, &io, tf_batch_attention, a);
    }
    a->seg = s;
}

bool tf_inputs(const dllm_tf *m, int B, int T, int R, const int32_t *tokens,
               const uint8_t *keymask, const int32_t *rows, int32_t *o_tokens, uint8_t *o_mask,
               int32_t *o_pos, int32_t *o_rows, int32_t *o_hrows)
{
    int N = B * T;
    bool count = m->arch->rope_pos == DLLM_ROPE_REAL_COUNT;
    if (o_tokens)
        memcpy(o_tokens, tokens, (size_t)N * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int real = 0;
        for (int t = 0; t < T; t++) {
            int n = b * T + t;
            uint8_t k = keymask ? (keymask[n] != 0) : 1;
            if (o_mask)
                o_mask[n] = k;
            if (o_pos)
                o_pos[n] = !count ? t : k ? real++ : 0;
        }
    }
    for (int r = 0; r < R; r++) {
        int row = rows ? rows[r] : r;
        if (o_rows)
            o_rows[r] = row;
        if (o_hrows)
            o_hrows[r] = m->arch->shift_logits && row % T > 0 ? row - 1 : row;
    }
    return keymask != NULL || count;
}

/* Input errors of a forward over tokens [B,T] with R rows (printed; DLLM_EXIT_INPUT). */
static int check_inputs(const dllm_tf *m, const int32_t *tokens, int B, int T,
                        const int32_t *rows, int n_rows)
{
    const char *fn = m->arch->name;
    if (B <= 0 || T <= 0) {
        fprintf(stderr, "%s forward: empty batch (B=%d, T=%d)\n", fn, B, T);
        return DLLM_EXIT_INPUT;
    }
    int N = B * T, R = rows ? n_rows : N;
    if (R < 0) {
        fprintf(stderr, "%s forward: bad row count %d\n", fn, n_rows);
        return DLLM_EXIT_INPUT;
    }
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0 || tokens[n] >= m->V) {
            fprintf(stderr, "%s forward: token %d at (%d, %d) outside the vocabulary [0, %d)\n",
                    fn, tokens[n], n / T, n % T, m->V);
            return DLLM_EXIT_INPUT;
        }
    for (int r = 0; rows && r < R; r++)
        if (rows[r] < 0 || rows[r] >= N) {
            fprintf(stderr, "%s forward: row %d outside [0, %d)\n", fn, rows[r], N);
            return DLLM_EXIT_INPUT;
        }
    return 0;
}

/* ---- forwards over host inputs, wherever the model runs ---------------------------- */

/* Where a forward runs and what it reads: the host (d NULL), or the device the model is
 * on, every forward (the first kept forward there starts its training there:
 * dllm_tf_device_train). The kept forward's set is m->a wherever it runs; one without
 * backward runs in the device's one set, or on the host in the trainer's or the
 * rollout's. */
typedef struct {
    tf_io *d; /* a device's buffers, or NULL: the host */
    dllm_backend *be;
    tf_acts *a;
    const tf_view *v;
} fwd_at;

const tf_view *tf_fwd_view(dllm_tf *m, bool rollout)
{
    if (m->dev)
        return tf_device_view(m, rollout);
    return rollout ? tf_rollout_view(m) : &m->tv;
}

static fwd_at fwd_place(dllm_tf *m, bool rollout, bool keep)
{
    if (!m->dev)
        return (fwd_at){NULL, m->be, rollout ? &m->ra : &m->a,
                        rollout ? tf_rollout_view(m) : &m->tv};
    if (keep && !tf_device_training(m)) { /* a model on a device trains there */
        dllm_err e;
        if (dllm_tf_device_train(m, &e)) {
            fprintf(stderr, "%s forward: %s\n", m->arch->name, e.msg);
            abort();
        }
    }
    if (keep)
        m->a.kept = TF_KEPT_NONE;
    /* the view first: building or following it may mark the kept forward gone */
    const tf_view *v = tf_device_view(m, rollout);
    return (fwd_at){&m->io, m->dev, keep ? &m->a : &m->ra, v};
}

/* The embedding and the layers over host inputs at f (a device's inputs built on the host,
 * small int arrays, and uploaded); x_L (N, C) in f->a, the head rows' indices in
 * f->a->hrows; under head_rows (no keep, rows fewer than N) x_L's head rows alone, in
 * f->a->xr (tf_layers_fwd). */
static const float *fwd_layers(dllm_tf *m, const fwd_at *f, const int32_t *tokens,
                               const uint8_t *keymask, int B, int T, const int32_t *rows, int R,
                               bool keep, bool head_rows)
{
    tf_io *d = f->d;
    tf_acts *a = f->a;
    int N = B * T;
    tf_rope_grow(m, T);
    if (d) {
        if (a == &m->ra) /* the sampler's x_L goes with the set it lives in */
            d->xl[0] = d->xl[1] = NULL;
        a->be = f->be;
    }
    tf_acts_ensure_fwd(m, a, B, T, R, keep);
    a->B = B, a->T = T, a->N = N, a->R = R;
    int32_t *tok = a->tokens, *pos = a->pos, *hrows = a->hrows;
    uint8_t *mask = a->keymask;
    if (d) {
        tf_device_staging(m, (size_t)(N > R ? N : R));
        tok = d->h_tok, pos = d->h_pos, hrows = d->h_rows, mask = d->h_mask;
    }
    a->have_mask = tf_inputs(m, B, T, R, tokens, keymask, rows, tok, mask, pos,
                             d ? NULL : a->rows, hrows);
    if (d) {
        dllm_backend *be = f->be;
        be->ops->upload(be, a->tokens, tok, (size_t)N * sizeof(int32_t));
        be->ops->upload(be, a->keymask, mask, (size_t)N);
        be->ops->upload(be, a->pos, pos, (size_t)N * sizeof(int32_t));
        be->ops->upload(be, a->hrows, hrows, (size_t)R * sizeof(int32_t));
    }
    a->pos_T = m->arch->rope_pos == DLLM_ROPE_REAL_COUNT ? 0 : T;
    a->pos_N = (size_t)N;
    return tf_layers_fwd(m, a, f->v, keep, tf_batch_attention, a, head_rows && rows);
}

bool tf_head_rows_at(const tf_view *v, bool rollout)
{
    bool per_tensor = v->q4 || (v->q8 && v->q8[0].act_scaling == FP8_SCALE_TENSOR);
    return rollout && !per_tensor;
}

/* Rows of logits the host computes per chunk of target log-probs (a device's chunk is its
 * own: dllm_tf_device_chunk_rows). */
enum { LOGP_CHUNK_ROWS = 64 };

/* The R head rows of x_L gathered into f->a->xr; the rows a chunk of logits takes at f: a
 * device's chunk, or on the host `host` (every row: the logits land in the caller's
 * buffer). */
static int fwd_head_rows(dllm_tf *m, const fwd_at *f, const float *xL, int R, int host)
{
    tf_acts *a = f->a;
    if (!a->head_in_xr) /* (else the last layer left them there) */
        f->be->ops->embedding_fwd(f->be, a->xr, a->hrows, xL, R, m->C); /* the gather */
    if (!f->d)
        return host;
    tf_device_chunk(m, R < f->d->lg_rows ? R : f->d->lg_rows);
    return f->d->lg_rows;
}

/* logits (R, V, host) of the head rows at f, a chunk of rows at a time on a device (no
 * (R, V) tensor there). */
static void fwd_logits(dllm_tf *m, const fwd_at *f, const float *xL, int R, float *logits)
{
    tf_acts *a = f->a;
    size_t C = (size_t)m->C, V = (size_t)m->V;
    int rows = fwd_head_rows(m, f, xL, R, R);
    for (int r0 = 0; r0 < R; r0 += rows) {
        int n = R - r0 < rows ? R - r0 : rows;
        float *lg = f->d ? f->d->lg : logits + (size_t)r0 * V;
        tf_head_fwd(m, f->v, a->xr + r0 * C, a->nf + r0 * C, a->rstdf + r0, n, lg);
        if (f->d)
            f->be->ops->download(f->be, logits + (size_t)r0 * V, lg, (size_t)n * V * sizeof(float));
    }
}

/* keep: store every layer's activations for dllm_tf_backward (in m->a). */
static int forward(dllm_tf *m, bool rollout, const int32_t *tokens, const uint8_t *keymask,
                   int B, int T, const int32_t *rows, int n_rows, float *logits, bool keep)
{
    fwd_at f = fwd_place(m, rollout, keep);
    f.a->kept = TF_KEPT_NONE;
    int rc = check_inputs(m, tokens, B, T, rows, n_rows);
    if (rc)
        return rc;
    int R = rows ? n_rows : B * T;
    const float *xL = fwd_layers(m, &f, tokens, keymask, B, T, rows, R, keep,
                                 tf_head_rows_at(f.v, rollout));
    if (R > 0)
        fwd_logits(m, &f, xL, R, logits);
    f.a->kept = keep ? TF_KEPT_ACTS : TF_KEPT_NONE;
    return 0;
}

int dllm_tf_forward(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                    const int32_t *rows, int n_rows, float *logits)
{
    return forward(m, false, tokens, keymask, B, T, rows, n_rows, logits, true);
}

int dllm_tf_forward_nograd(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B,
                           int T, const int32_t *rows, int n_rows, float *logits)
{
    return forward(m, false, tokens, keymask, B, T, rows, n_rows, logits, false);
}

int dllm_tf_forward_rollout(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B,
                            int T, const int32_t *rows, int n_rows, float *logits)
{
    return forward(m, true, tokens, keymask, B, T, rows, n_rows, logits, false);
}

/* ---- log-probs at targets: the head fused with the log-softmax ------------------------ */

static int check_targets(const dllm_tf *m, const char *what, const int32_t *targets, int R)
{
    for (int r = 0; r < R; r++)
        if (targets[r] < 0 || targets[r] >= m->V) {
            fprintf(stderr, "%s %s: target %d outside [0, %d)\n", m->arch->name, what,
                    targets[r], m->V);
            return DLLM_EXIT_INPUT;
        }
    return 0;
}

/* The inputs and targets of a log-prob forward checked (printed; DLLM_EXIT_INPUT); *R: its
 * row count. */
static int check_logp(const dllm_tf *m, const char *what, const int32_t *tokens, int B, int T,
                      const int32_t *rows, int n_rows, const int32_t *targets, int *R)
{
    int rc = check_inputs(m, tokens, B, T, rows, n_rows);
    *R = rows ? n_rows : B * T;
    return rc ? rc : check_targets(m, what, targets, *R);
}

/* The kept forward of the loss gradient's device path: the head rows' log-probs of their
 * targets and log-sum-exps kept on the device, a chunk of rows at a time through the
 * logits chunk (the backward makes each chunk's logits again from the kept head input:
 * R x V floats never live at once); only the log-probs come down. */
int dllm_tf_device_forward_logp(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B,
                                int T, const int32_t *rows, const int32_t *targets, int n_rows,
                                float *logp)
{
    m->a.kept = TF_KEPT_NONE;
    if (!m->dev || !tf_device_training(m)) {
        fprintf(stderr, "%s device log-probs: the model does not train on a device\n",
                m->arch->name);
        return DLLM_EXIT_INPUT;
    }
    int R, rc = check_logp(m, "device log-probs", tokens, B, T, rows, n_rows, targets, &R);
    if (rc)
        return rc;
    fwd_at f = fwd_place(m, false, true);
    tf_io *d = f.d;
    dllm_backend *be = f.be;
    tf_acts *a = f.a;
    const float *xL = fwd_layers(m, &f, tokens, keymask, B, T, rows, R, true, false);
    tf_device_kept_rows(m, R);
    if (R > 0) {
        size_t C = (size_t)m->C;
        int chunk = fwd_head_rows(m, &f, xL, R, 0);
        be->ops->upload(be, d->ktgt, targets, (size_t)R * sizeof(int32_t));
        for (int r0 = 0; r0 < R; r0 += chunk) {
            int n = R - r0 < chunk ? R - r0 : chunk;
            tf_head_fwd(m, f.v, a->xr + r0 * C, a->nf + r0 * C, a->rstdf + r0, n, d->lg);
            be->ops->xent_fwd(be, d->klp + r0, d->klse + r0, d->lg, d->ktgt + r0, n, m->V);
        }
        be->ops->download(be, logp, d->klp, (size_t)R * sizeof(float));
    }
    a->kept = TF_KEPT_LOGITS;
    return 0;
}

int dllm_tf_target_logp(dllm_tf *m, bool rollout, const int32_t *tokens, const uint8_t *keymask,
                        int B, int T, const int32_t *rows, const int32_t *targets, int n_rows,
                        float *logp)
{
    int R, rc = check_logp(m, "target log-probs", tokens, B, T, rows, n_rows, targets, &R);
    if (rc)
        return rc;
    fwd_at f = fwd_place(m, rollout, false);
    tf_io *d = f.d;
    dllm_backend *be = f.be;
    tf_acts *a = f.a;
    a->kept = TF_KEPT_NONE;
    const float *xL = fwd_layers(m, &f, tokens, keymask, B, T, rows, R, false,
                                 tf_head_rows_at(f.v, rollout));
    if (R <= 0)
        return 0;
    size_t C = (size_t)m->C;
    int chunk = fwd_head_rows(m, &f, xL, R, LOGP_CHUNK_ROWS);
    float *lg = d ? d->lg : TF_FALLOC((size_t)(R < chunk ? R : chunk) * m->V); // (chunk, V)
    for (int r0 = 0; r0 < R; r0 += chunk) {
        int n = R - r0 < chunk ? R - r0 : chunk;
        tf_head_fwd(m, f.v, a->xr + r0 * C, a->nf + r0 * C, a->rstdf + r0, n, lg);
        if (!d) {
            be->ops->xent_fwd(be, logp + r0, NULL, lg, targets + r0, n, m->V);
            continue;
        }
        be->ops->upload(be, d->tgt, targets + r0, (size_t)n * sizeof(int32_t));
        be->ops->xent_fwd(be, d->lp, NULL, lg, d->tgt, n, m->V);
        be->ops->download(be, logp + r0, d->lp, (size_t)n * sizeof(float));
    }
    if (!d)
        free(lg);
    return 0;
}
