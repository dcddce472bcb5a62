/* transformer_view.c: the weight views of the transformer core
 * (dllm/precision.h) -- a forward reads its weights through a tf_view: the
 * fp32 master weights, the trainer's bf16 copy, or the rollout copy (bf16
 * packed linears, or FP8 / NVFP4 / INT8 layer linears, plus bf16 embedding / norms /
 * biases / head) -- which also says where activations are rounded to bf16. */
#include "dllm/transformer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void tf_view_free(const dllm_tf *m, tf_view *v)
{
    if (v->be && v->be->kind != DLLM_BACKEND_CPU) { /* a copy in a device's memory */
        tf_device_view_free(m, v);
        return;
    }
    if (v->buf_mapped)
        munmap(v->buf, v->nbuf * sizeof(float));
    else
        free(v->buf);
    for (int k = 0; k < m->L * DLLM_NLIN; k++) {
        if (v->q8)
            fp8_matrix_free(&v->q8[k]);
        if (v->q4)
            nvfp4_matrix_free(&v->q4[k]);
        if (v->qi)
            int8_matrix_free(&v->qi[k]);
        if (v->b16)
            bf16_matrix_free(&v->b16[k]);
    }
    free(v->q8);
    free(v->q4);
    free(v->qi);
    free(v->b16);
    bf16_matrix_free(&v->head16);
    free(v->lw);
    memset(v, 0, sizeof *v);
}

/* The fp32 master weights with LoRA at run time: the default trainer. */
void tf_view_master(dllm_tf *m, tf_view *v)
{
    tf_view_free(m, v);
    v->lw = dllm_malloc((size_t)m->L * sizeof *v->lw);
    memcpy(v->lw, m->lw, (size_t)m->L * sizeof *v->lw);
    v->be = m->be;
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
void tf_merged_weight(const dllm_tf *m, int l, int j, float *dst)
{
    if (m->shape_only) /* no values to merge; the host GEMM would cost minutes at 8B */
        return;
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
        if (v->buf_mapped)
            munmap(v->buf, v->nbuf * sizeof(float));
        else
            free(v->buf);
        /* a shape-only model's copy is address space like its parameters (an 8B
         * model's is 32 GB): nothing is copied into it, nothing reads its values */
        v->buf_mapped = m->shape_only;
        v->buf = m->shape_only ? mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                               : dllm_malloc(n * sizeof(float));
        if (v->buf == MAP_FAILED) {
            fprintf(stderr, "dllm-rl: out of address space for a %zu-float shape copy\n", n);
            exit(1);
        }
        v->nbuf = n;
    }
    if (!v->lw)
        v->lw = dllm_calloc((size_t)m->L, sizeof *v->lw);
    v->be = m->be;
    float *dst = v->buf;
#define TAKE(field, src, cnt)                                                                    \
    do {                                                                                         \
        if (!m->shape_only)                                                                      \
            memcpy(dst, (src), (size_t)(cnt) * sizeof(float));                                   \
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
                tf_merged_weight(m, l, t, dst);
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
    if (!m->shape_only) /* no values */
        m->be->ops->round_bf16(m->be, v->buf, n);
}

/* v = a rollout copy whose layer linears are packed or quantised (bf16 on a
 * backend with a bf16 linear, fp8, fp8-exact, nvfp4, int8) from the merged weights,
 * the rest rounded to bf16 in fp32; the head packed as bf16 too, except under
 * fp8-exact (the earlier fp8's fp32 head) or where the backend has no bf16
 * linear. */
static int view_packed(dllm_tf *m, tf_view *v, const dllm_precision *p, dllm_err *err)
{
    dllm_rollout_kind k = p->rollout;
    view_bf16_copy(m, v, false, true);
    size_t nlin = (size_t)m->L * DLLM_NLIN;
    if (dllm_rollout_is_fp8(k) && !v->q8)
        v->q8 = dllm_calloc(nlin, sizeof *v->q8);
    if (k == DLLM_ROLLOUT_NVFP4 && !v->q4)
        v->q4 = dllm_calloc(nlin, sizeof *v->q4);
    if (k == DLLM_ROLLOUT_INT8 && !v->qi)
        v->qi = dllm_calloc(nlin, sizeof *v->qi);
    if (k == DLLM_ROLLOUT_BF16 && !v->b16)
        v->b16 = dllm_calloc(nlin, sizeof *v->b16);
    size_t maxw = 0;
    for (int j = 0; j < DLLM_NLIN; j++)
        maxw = tf_slot_numel(m, j) > maxw ? tf_slot_numel(m, j) : maxw;
    float *tmp = dllm_malloc(maxw * sizeof(float));
    /* FP8 activations are quantised to match the weights' granularity */
    fp8_scaling act = p->fp8_scaling == FP8_SCALE_BLOCK     ? FP8_SCALE_GROUP
                      : p->fp8_scaling == FP8_SCALE_CHANNEL ? FP8_SCALE_CHANNEL
                                                            : FP8_SCALE_TENSOR;
    int rc = 0;
    for (int l = 0; l < m->L && !rc; l++)
        for (int j = 0; j < DLLM_NLIN && !rc; j++) {
            int o, i;
            tf_lin_shape(m, j, &o, &i);
            tf_merged_weight(m, l, j, tmp);
            if (v->b16) {
                bf16_matrix_pack(&v->b16[l * DLLM_NLIN + j], tmp, o, i);
            } else if (v->qi) {
                rc = int8_quantise_weight(&v->qi[l * DLLM_NLIN + j], tmp, o, i,
                                          p->int8_scaling, err);
            } else if (v->q4) {
                nvfp4_matrix *q = &v->q4[l * DLLM_NLIN + j];
                rc = nvfp4_quantise_scaled(q, tmp, o, i, p->nvfp4_scaling, err);
                if (!rc)
                    nvfp4_matrix_cache_dequant(q); /* before any threaded use */
            } else {
                fp8_matrix *q = &v->q8[l * DLLM_NLIN + j];
                rc = fp8_quantise_weight(q, tmp, o, i, p->fp8_format, p->fp8_scaling,
                                         p->fp8_pow2_scale, err);
                if (!rc) {
                    q->act_scaling = act;
                    q->fast = k == DLLM_ROLLOUT_FP8;
                    if (!q->fast) /* the fast mode packs its own bf16 codes on first use */
                        fp8_matrix_cache_dequant(q); /* before any threaded use */
                }
            }
        }
    free(tmp);
    if (!rc && k != DLLM_ROLLOUT_FP8_EXACT && dllm_backend_supports(m->be, DLLM_OP_BF16_LINEAR))
        bf16_matrix_pack(&v->head16, v->head, m->V, m->C); /* v->head is rounded already */
    return rc;
}

dllm_precision dllm_tf_get_precision(const dllm_tf *m) { return m->prec; }

void tf_trainer_follow(dllm_tf *m)
{
    /* a bf16 trainer's rounded copy of the weights (LoRA's adapters are read at run time) */
    if (m->prec.trainer_bf16 && m->tv.buf && !m->lora_rank)
        view_bf16_copy(m, &m->tv, false, false);
}

int dllm_tf_rollout_sync(dllm_tf *m, const dllm_precision *p, double *seconds, dllm_err *err)
{
    double t0 = dllm_now();
    int rc = dllm_precision_check(p, "dllm_tf_rollout_sync", err);
    if (rc)
        return rc;
    /* the trainer's copy (the activations kept for backward belong to the old one) */
    if (p->trainer_bf16 != m->prec.trainer_bf16)
        m->a.kept = TF_KEPT_NONE;
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
        p->fp8_scaling != m->prec.fp8_scaling || p->fp8_pow2_scale != m->prec.fp8_pow2_scale ||
        p->int8_scaling != m->prec.int8_scaling || p->nvfp4_scaling != m->prec.nvfp4_scaling)
        tf_view_free(m, &m->rv);
    bool bf16_op = dllm_backend_supports(m->be, DLLM_OP_BF16_LINEAR);
    if (m->dev) {
        /* on a device the rollout copy lives there only (tf_device_sync below) */
    } else if (p->rollout == DLLM_ROLLOUT_INT8 &&
               !dllm_backend_supports(m->be, DLLM_OP_INT8_LINEAR)) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision int8: the %s backend has "
                          "no INT8 linear", m->be->name);
    } else if (p->rollout == DLLM_ROLLOUT_NVFP4 && !dllm_backend_supports(m->be, DLLM_OP_NVFP4_LINEAR)) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "rollout precision nvfp4: the %s backend has "
                          "no NVFP4 linear", m->be->name);
    } else if (p->rollout == DLLM_ROLLOUT_BF16 && !bf16_op) {
        /* the exact simulation: fp32 weights holding bf16 values, fp32 linears */
        view_bf16_copy(m, &m->rv, true, false);
        m->rv.round_lin = m->rv.round_head = true;
        m->rv.lora = false;
    } else if (p->rollout != DLLM_ROLLOUT_TRAINER) {
        rc = view_packed(m, &m->rv, p, err);
        /* each of these linears rounds or quantises its own fp32 input (rounding it
         * in place first would change no bit, and costs a pass per input) */
        m->rv.round_lin = false;
        m->rv.round_head = true;
        m->rv.lora = false;
    }
    m->prec = *p;
    if (!rc && m->dev)
        rc = tf_device_sync(m, err);
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
    if (!bit || layer < 0 || layer >= m->L || N <= 0 || m->dev) /* host copies only */
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
