/* transformer_bwd.c: the backward of the transformer core (transformer.h), one code for
 * the host and a device: the kept forward's activations (recomputed a segment at a time
 * under recomputation) differentiated through the trainer view's weights into the
 * gradients of whichever backend trains (tf_bwd_target). Conventions as in
 * transformer_fwd.c: parameter gradients accumulate until dllm_optim_zero_grad, activation
 * gradients are scratch. */
#include "dllm/transformer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dinp (N, in) += dout W [+ LoRA path]; dW, dA, dB accumulate where trainable. */
static void lin_bwd(dllm_tf *m, const tf_bwd_target *t, int l, int j, float *dinp,
                    const float *dout, const float *inp, int N)
{
    int o, i;
    tf_lin_shape(m, j, &o, &i);
    dllm_backend *be = t->be;
    tf_acts *a = t->a;
    const tf_lora *ad = t->ad ? &t->ad[l * DLLM_NLIN + j] : NULL;
    if (t->w->b16 && t->w->round_lin && ad && ad->A) { /* the calls below, in one */
        int r = m->lora_rank;
        size_t ls = a->rk ? (size_t)(l % a->rk) : (size_t)l;
        be->ops->bf16_lora_bwd(be, dinp, ad->dA, ad->dB, a->dxa, dout, inp,
                               a->xa + (ls * DLLM_NLIN + j) * a->capN * r,
                               &t->w->b16[(size_t)l * DLLM_NLIN + j], ad->A, ad->B,
                               m->lora_scale, N, i, o, r);
        return;
    }
    if (t->w->b16) /* packed bf16 base linears (a bf16 trainer on a device): frozen, dX only */
        be->ops->bf16_linear_bwd_x(be, dinp, dout, &t->w->b16[(size_t)l * DLLM_NLIN + j], N, i,
                                   o);
    else
        be->ops->linear_bwd(be, dinp, t->lg[l].t[j], dout, inp, t->w->lw[l].t[j], N, i, o);
    if (ad && ad->A) {
        int r = m->lora_rank;
        size_t ls = a->rk ? (size_t)(l % a->rk) : (size_t)l; /* its activation slot */
        const float *xa = a->xa + (ls * DLLM_NLIN + j) * a->capN * r;
        float *dxa = a->dxa; // (N, r)
        if (t->w->round_lin) { /* lin_lora_fwd's bf16 operands */
            be->ops->gemm_bf16(be, false, false, N, r, o, m->lora_scale, dout, ad->B, 0.0f, dxa);
            be->ops->gemm_bf16(be, true, false, o, r, N, m->lora_scale, dout, xa, 1.0f, ad->dB);
            be->ops->gemm_bf16(be, false, false, N, i, r, 1.0f, dxa, ad->A, 1.0f, dinp);
            be->ops->gemm_bf16(be, true, false, r, i, N, 1.0f, dxa, inp, 1.0f, ad->dA);
        } else {
            be->ops->gemm(be, false, false, N, r, o, m->lora_scale, dout, ad->B, 0.0f, dxa);
            be->ops->gemm(be, true, false, o, r, N, m->lora_scale, dout, xa, 1.0f, ad->dB);
            be->ops->linear_bwd(be, dinp, ad->dA, dxa, inp, ad->A, N, i, r);
        }
    }
}


/* dbias += column sums of dout (N, OC) where the bias exists and is trainable. */
static void bias_bwd(const tf_bwd_target *t, int l, int slot, const float *dout, int N, int OC)
{
    if (t->lg[l].t[slot])
        t->be->ops->bias_bwd(t->be, t->lg[l].t[slot], dout, N, OC);
}

/* The kept forward's set, checked: a backward of nothing stops, naming why. */
static tf_acts *kept_acts(dllm_tf *m, const char *what, tf_kept need)
{
    tf_acts *a = &m->a;
    if (a->kept == TF_KEPT_NONE || (need == TF_KEPT_LOGITS && a->kept != need)) {
        fprintf(stderr, "%s backward: no %s to differentiate%s\n", m->arch->name, what,
                a->lost ? " (a forward without backward ran after it: on a device that trains "
                          "they take turns in one region of its memory)" : "");
        abort();
    }
    return a;
}

/* Host dlogits (R, V): on a device uploaded a chunk of rows at a time. */
void dllm_tf_backward(dllm_tf *m, const float *dlogits)
{
    bool dev = m->dev && tf_device_training(m);
    tf_acts *a = kept_acts(m, "forward pass", TF_KEPT_ACTS);
    tf_bwd_target t;
    if (dev)
        t = tf_device_bwd_target(m);
    else {
        tf_ensure_grads(m);
        t = (tf_bwd_target){m->be, a, &m->tv, m->lg, m->d_embed, m->d_final_norm, m->d_head,
                            m->ad, &m->rope};
    }
    size_t V = (size_t)m->V;
    int chunk = dev ? m->io.dlog_rows : a->R;
    tf_backward_begin(m, &t);
    for (int r0 = 0; r0 < a->R; r0 += chunk) {
        int n = a->R - r0 < chunk ? a->R - r0 : chunk;
        const float *dl = dlogits + (size_t)r0 * V;
        if (dev) {
            t.be->ops->upload(t.be, m->io.dlog, dl, (size_t)n * V * sizeof(float));
            dl = m->io.dlog;
        }
        tf_backward_head(m, &t, r0, n, dl);
    }
    tf_backward_rest(m, &t);
}

/* dlogits = g (onehot - softmax) a chunk of rows at a time: each chunk's logits made
 * again from the kept head input (the forward's product at the same shape: the same
 * values), the accumulating xent_bwd from zero, the head's backward. */
void dllm_tf_device_backward_logp(dllm_tf *m, const float *g)
{
    if (!m->dev) {
        fprintf(stderr, "%s backward: the model is not on a device\n", m->arch->name);
        abort();
    }
    tf_acts *a = kept_acts(m, "dllm_tf_device_forward_logp", TF_KEPT_LOGITS);
    tf_io *d = &m->io;
    tf_bwd_target t = tf_device_bwd_target(m);
    dllm_backend *be = t.be;
    size_t R = (size_t)a->R, C = (size_t)m->C, V = (size_t)m->V;
    tf_backward_begin(m, &t);
    if (R > 0)
        be->ops->upload(be, d->kg, g, R * sizeof(float));
    for (int r0 = 0; r0 < a->R; r0 += d->lg_rows) {
        int n = a->R - r0 < d->lg_rows ? a->R - r0 : d->lg_rows;
        tf_head_logits(m, t.w, a->nf + r0 * C, n, d->lg);
        be->ops->memset0(be, d->dlog, (size_t)n * V * sizeof(float));
        be->ops->xent_bwd(be, d->dlog, d->kg + r0, d->lg, d->klse + r0, d->ktgt + r0, n, m->V);
        tf_backward_head(m, &t, r0, n, d->dlog);
    }
    tf_backward_rest(m, &t);
}

void tf_backward_begin(dllm_tf *m, const tf_bwd_target *t)
{
    tf_acts *a = t->a;
    tf_acts_ensure_bwd(m, a);
    size_t fC = (size_t)m->C * sizeof(float);
    t->be->ops->memset0(t->be, a->dnf, (size_t)a->R * fC);
    t->be->ops->memset0(t->be, a->dxr, (size_t)a->R * fC);
}

void tf_backward_head(dllm_tf *m, const tf_bwd_target *t, int r0, int n, const float *dlogits)
{
    tf_acts *a = t->a;
    size_t C = (size_t)m->C;
    /* straight-through under a bf16 trainer: the rounded weights, fp32 gradients. A
     * frozen head of a bf16 trainer on a device (packed base linears) gives only its input
     * gradient, through the packed head: BF16 tensor cores, dlogits rounded to bf16 as
     * read, fp32 sums, as autocast's bf16 matmul does (the device's base linears' input
     * gradients do the same); the host keeps the fp32 product. */
    if (!t->d_head && t->w->b16 && t->w->head16.w)
        t->be->ops->bf16_linear_bwd_x(t->be, a->dnf + (size_t)r0 * C, dlogits,
                                      (bf16_matrix *)&t->w->head16, n, m->C, m->V);
    else
        t->be->ops->linear_bwd(t->be, a->dnf + (size_t)r0 * C, t->d_head, dlogits,
                               a->nf + (size_t)r0 * C, t->w->head, n, m->C, m->V);
}

void tf_backward_rest(dllm_tf *m, const tf_bwd_target *t)
{
    tf_acts *a = t->a;
    dllm_backend *be = t->be;
    const dllm_backend_ops *ops = be->ops;
    int N = a->N, R = a->R, B = a->B, T = a->T;
    size_t C = (size_t)m->C, H = (size_t)m->H, QD = (size_t)m->QD, KD = (size_t)m->KD;
    size_t sN = a->capN;
    size_t fC = C * sizeof(float), fH = H * sizeof(float);
    size_t fQ = QD * sizeof(float), fK = KD * sizeof(float);
    bool qkn = m->arch->qk_norm;
    const uint8_t *mask = a->have_mask ? a->keymask : NULL;

    // final norm on the gathered rows (their head gradient in dnf), then scatter into
    // dx = dL/dx_L
    ops->rmsnorm_bwd(be, a->dxr, t->d_final_norm, a->dnf, a->xr, t->w->final_norm, a->rstdf, R,
                     m->C);
    ops->memset0(be, a->dx, (size_t)N * fC);
    /* the scatter-add of the rows by the embedding's backward (each element's sums in
     * row order, as a row-by-row add) */
    ops->embedding_bwd(be, a->dx, a->dxr, a->hrows, R, m->C);

    for (int l = m->L - 1; l >= 0; l--) {
        const tf_layer *w = &t->w->lw[l]; /* straight-through under a bf16 trainer */
        const tf_layer *gw = &t->lg[l];
        int K = a->rk;
        if (K && a->seg != l / K * K) /* the first of its segment's layers met going down */
            tf_recompute_segment(m, t, l);
        size_t ls = K ? (size_t)(l % K) : (size_t)l; /* activation slot */
        const float *x = a->resid + tf_acts_xslot(m, K, l) * sN * C;
        const float *n1 = a->n1 + ls * sN * C, *rstd1 = a->rstd1 + ls * sN;
        /* q and k as the forward's rope_attention_fwd left them (its backward may rotate
         * them in place) */
        float *q = a->q + ls * sN * QD, *k = a->k + ls * sN * KD;
        const float *v = a->v + ls * sN * KD;
        const float *att = a->att + ls * a->capAtt, *y = a->y + ls * sN * QD;
        const float *h = a->h + ls * sN * C, *n2 = a->n2 + ls * sN * C;
        const float *rstd2 = a->rstd2 + ls * sN;
        const float *g = a->g + ls * sN * H, *u = a->u + ls * sN * H, *s = a->s + ls * sN * H;

        /* dx holds dL/dx_{l+1}; each sub-block's norm backward adds its path onto it in
         * place (the residual's identity path needs no copy): first dL/dh, then dL/dx_l */
        // MLP: x_{l+1} = h + down(silu(gate n2) * up n2)
        ops->memset0(be, a->ds, (size_t)N * fH);
        lin_bwd(m, t, l, DLLM_LIN_DOWN, a->ds, a->dx, s, N);
        ops->swiglu_bwd(be, a->dg, a->du, a->ds, g, u, (size_t)N * H);
        ops->memset0(be, a->dn, (size_t)N * fC);
        lin_bwd(m, t, l, DLLM_LIN_GATE, a->dn, a->dg, n2, N);
        lin_bwd(m, t, l, DLLM_LIN_UP, a->dn, a->du, n2, N);
        ops->rmsnorm_bwd(be, a->dx, gw->t[DLLM_T_MLP_NORM], a->dn, h, w->t[DLLM_T_MLP_NORM],
                         rstd2, N, m->C);

        // attention: h = x + o_proj(y)
        ops->memset0(be, a->dy, (size_t)N * fQ);
        lin_bwd(m, t, l, DLLM_LIN_O, a->dy, a->dx, y, N);
        ops->rope_attention_bwd(be, a->dq, a->dk, a->dv, a->dy, y, att, q, k, v, a->pos,
                                t->rope, mask, B, T, m->NH, m->NKV, m->HD, m->arch->causal);
        float *dql = a->dq, *dkl = a->dk; /* gradients at the q/k projections' outputs */
        if (qkn) {
            const float *qr = a->qr + ls * sN * QD, *rstdq = a->rstdq + ls * sN * m->NH;
            const float *kr = a->kr + ls * sN * KD, *rstdk = a->rstdk + ls * sN * m->NKV;
            ops->memset0(be, a->dqr, (size_t)N * fQ);
            ops->memset0(be, a->dkr, (size_t)N * fK);
            ops->rmsnorm_bwd(be, a->dqr, gw->t[DLLM_T_Q_NORM], a->dq, qr, w->t[DLLM_T_Q_NORM],
                             rstdq, N * m->NH, m->HD);
            ops->rmsnorm_bwd(be, a->dkr, gw->t[DLLM_T_K_NORM], a->dk, kr, w->t[DLLM_T_K_NORM],
                             rstdk, N * m->NKV, m->HD);
            dql = a->dqr;
            dkl = a->dkr;
        }
        bias_bwd(t, l, DLLM_T_Q_BIAS, dql, N, m->QD);
        bias_bwd(t, l, DLLM_T_K_BIAS, dkl, N, m->KD);
        bias_bwd(t, l, DLLM_T_V_BIAS, a->dv, N, m->KD);
        ops->memset0(be, a->dn, (size_t)N * fC);
        lin_bwd(m, t, l, DLLM_LIN_Q, a->dn, dql, n1, N);
        lin_bwd(m, t, l, DLLM_LIN_K, a->dn, dkl, n1, N);
        lin_bwd(m, t, l, DLLM_LIN_V, a->dn, a->dv, n1, N);
        ops->rmsnorm_bwd(be, a->dx, gw->t[DLLM_T_ATTN_NORM], a->dn, x, w->t[DLLM_T_ATTN_NORM],
                         rstd1, N, m->C);
    }
    ops->embedding_bwd(be, t->d_embed, a->dx, a->tokens, N, m->C);
}
