/* transformer_view.c: the weight views of the transformer core
 * (dllm/precision.h) -- a forward reads its weights through a tf_view: the
 * fp32 master weights, the trainer's bf16 copy, or the rollout copy (bf16, or
 * FP8 layer linears plus bf16 embedding / norms / biases / head) -- which
 * also says where activations are rounded to bf16. */
#include "dllm/transformer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tf_view_free(const dllm_tf *m, tf_view *v)
{
    free(v->buf);
    if (v->q8) {
        for (int k = 0; k < m->L * DLLM_NLIN; k++)
            fp8_matrix_free(&v->q8[k]);
        free(v->q8);
    }
    free(v->lw);
    memset(v, 0, sizeof *v);
}

/* The fp32 master weights with LoRA at run time: the default trainer. */
void tf_view_master(dllm_tf *m, tf_view *v)
{
    tf_view_free(m, v);
    v->lw = dllm_malloc((size_t)m->L * sizeof *v->lw);
    memcpy(v->lw, m->lw, (size_t)m->L * sizeof *v->lw);
    v->embed = m->embed;
    v->final_norm = m->final_norm;
    v->head = m->head;
    v->lora = true;
}

const tf_view *tf_rollout_view(const dllm_tf *m)
{
    return m->prec.rollout == DLLM_ROLLOUT_TRAINER ? &m->tv : &m->rv;
}

/* dst (out, in) = W + (alpha/r) B A for linear j of layer l (W alone without
 * an adapter there): the weight the rollout copy is built from. */
static void merged_weight(const dllm_tf *m, int l, int j, float *dst)
{
    int o, i;
    tf_lin_shape(m, j, &o, &i);
    memcpy(dst, m->lw[l].t[j], (size_t)o * i * sizeof(float));
    const tf_lora *ad = m->ad ? &m->ad[l * DLLM_NLIN + j] : NULL;
    if (ad && ad->A)
        m->be->ops->gemm(m->be, false, false, o, i, m->lora_rank, m->lora_scale, ad->B, ad->A,
                         1.0f, dst);
}

/* v = a bf16-rounded copy of the weights, LoRA merged when `merge`, without
 * the layer linears when `skip_lin` (FP8 replaces them). Reuses v's buffer
 * when the size allows (the sync after every optimizer step). Tied: the
 * copy's head is its embedding. */
static void view_bf16_copy(dllm_tf *m, tf_view *v, bool merge, bool skip_lin)
{
    size_t n = m->n_params;
    for (int l = 0; skip_lin && l < m->L; l++)
        for (int j = 0; j < DLLM_NLIN; j++)
            n -= tf_slot_numel(m, j);
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
    for (int l = 0; l < m->L; l++)
        for (int t = 0; t < DLLM_NT; t++) {
            size_t cnt = tf_slot_numel(m, t);
            if (!m->lw[l].t[t] || (t < DLLM_NLIN && skip_lin)) {
                v->lw[l].t[t] = NULL;
            } else if (t < DLLM_NLIN && merge) {
                merged_weight(m, l, t, dst);
                v->lw[l].t[t] = dst;
                dst += cnt;
            } else {
                TAKE(v->lw[l].t[t], m->lw[l].t[t], cnt);
            }
        }
    TAKE(v->final_norm, m->final_norm, m->C);
    if (m->tied)
        v->head = v->embed;
    else
        TAKE(v->head, m->head, (size_t)m->V * m->C);
#undef TAKE
    m->be->ops->round_bf16(m->be, v->buf, n);
}

/* v = the FP8 rollout copy: layer linears quantised from the merged weights,
 * the rest rounded to bf16. */
static int view_fp8(dllm_tf *m, tf_view *v, const dllm_precision *p, dllm_err *err)
{
    view_bf16_copy(m, v, false, true);
    if (!v->q8)
        v->q8 = dllm_calloc((size_t)m->L * DLLM_NLIN, sizeof *v->q8);
    size_t maxw = 0;
    for (int j = 0; j < DLLM_NLIN; j++)
        maxw = tf_slot_numel(m, j) > maxw ? tf_slot_numel(m, j) : maxw;
    float *tmp = dllm_malloc(maxw * sizeof(float));
    /* activations are quantised to match the weights' granularity */
    fp8_scaling act = p->fp8_scaling == FP8_SCALE_BLOCK     ? FP8_SCALE_GROUP
                      : p->fp8_scaling == FP8_SCALE_CHANNEL ? FP8_SCALE_CHANNEL
                                                            : FP8_SCALE_TENSOR;
    int rc = 0;
    for (int l = 0; l < m->L && !rc; l++)
        for (int j = 0; j < DLLM_NLIN && !rc; j++) {
            int o, i;
            tf_lin_shape(m, j, &o, &i);
            fp8_matrix *q = &v->q8[l * DLLM_NLIN + j];
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

dllm_precision dllm_tf_get_precision(const dllm_tf *m) { return m->prec; }

int dllm_tf_rollout_sync(dllm_tf *m, const dllm_precision *p, double *seconds, dllm_err *err)
{
    double t0 = dllm_now();
    int rc = dllm_precision_check(p, "dllm_tf_rollout_sync", err);
    if (rc)
        return rc;
    /* the trainer's copy (the activations kept for backward belong to the old one) */
    if (p->trainer_bf16 != m->prec.trainer_bf16)
        m->a.valid = false;
    if (p->trainer_bf16) {
        if (!m->tv.buf)
            tf_view_free(m, &m->tv);
        view_bf16_copy(m, &m->tv, false, false);
        m->tv.round_lin = m->tv.round_head = true;
        m->tv.lora = true;
    } else if (m->tv.buf) {
        tf_view_master(m, &m->tv);
    }
    /* the rollout copy, rebuilt in place when its kind is unchanged */
    if (p->rollout != m->prec.rollout || p->fp8_format != m->prec.fp8_format ||
        p->fp8_scaling != m->prec.fp8_scaling || p->fp8_pow2_scale != m->prec.fp8_pow2_scale)
        tf_view_free(m, &m->rv);
    if (p->rollout == DLLM_ROLLOUT_BF16) {
        view_bf16_copy(m, &m->rv, true, false);
        m->rv.round_lin = m->rv.round_head = true;
        m->rv.lora = false;
    } else if (p->rollout == DLLM_ROLLOUT_FP8) {
        rc = view_fp8(m, &m->rv, p, err);
        m->rv.round_lin = false; /* the FP8 GEMM quantises its own inputs */
        m->rv.round_head = true;
        m->rv.lora = false;
    }
    m->prec = *p;
    if (rc) { /* a half-built copy must not be used: fall back to the trainer */
        tf_view_free(m, &m->rv);
        m->prec.rollout = DLLM_ROLLOUT_TRAINER;
        return rc;
    }
    if (seconds)
        *seconds = dllm_now() - t0;
    return 0;
}

int dllm_tf_rollout_linear(dllm_tf *m, int layer, const char *name, const float *inp, int N,
                           float *out)
{
    int bit = dllm_arch_lora_bit(m->arch, name), j = 0;
    if (!bit || layer < 0 || layer >= m->L || N <= 0)
        return DLLM_EXIT_INPUT;
    while (!((bit >> j) & 1))
        j++;
    const tf_view *v = tf_rollout_view(m);
    int o, i;
    tf_lin_shape(m, j, &o, &i);
    (void)o;
    float *x = dllm_malloc((size_t)N * i * sizeof(float)); // (N, in)
    memcpy(x, inp, (size_t)N * i * sizeof(float));
    if (v->round_lin)
        m->be->ops->round_bf16(m->be, x, (size_t)N * i);
    float *xa = v->lora && m->lora_rank ? dllm_malloc((size_t)N * m->lora_rank * sizeof(float))
                                        : NULL; // (N, r)
    tf_lin_fwd(m, v, layer, j, out, x, N, xa);
    free(xa);
    free(x);
    return 0;
}
