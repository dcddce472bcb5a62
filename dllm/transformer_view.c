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

/* v's fp32 buffer, in be's memory (or reserved address space: a shape-only model's). */
static void view_buf_free(const dllm_tf *m, tf_view *v, dllm_backend *be)
{
    (void)m;
    if (v->buf_mapped)
        munmap(v->buf, v->nbuf * sizeof(float));
    else if (v->buf)
        be->ops->free(be, v->buf);
    v->buf = NULL, v->nbuf = 0, v->buf_mapped = false;
}

void tf_view_free_on(const dllm_tf *m, tf_view *v, dllm_backend *be)
{
    view_buf_free(m, v, be);
    for (int k = 0; k < m->L * DLLM_NLIN; k++) {
        if (v->q8)
            be->ops->free_weight(be, (dllm_lin_weight){.f8 = &v->q8[k]});
        if (v->q4)
            be->ops->free_weight(be, (dllm_lin_weight){.f4 = &v->q4[k]});
        if (v->qi)
            be->ops->free_weight(be, (dllm_lin_weight){.i8 = &v->qi[k]});
        if (v->b16)
            be->ops->free_weight(be, (dllm_lin_weight){.b16 = &v->b16[k]});
    }
    free(v->q8);
    free(v->q4);
    free(v->qi);
    free(v->b16);
    be->ops->free_weight(be, (dllm_lin_weight){.b16 = &v->head16});
    free(v->lw);
    memset(v, 0, sizeof *v);
}

void tf_view_free(const dllm_tf *m, tf_view *v) { tf_view_free_on(m, v, v->be ? v->be : m->be); }

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

/* The host matrix linear j of layer l is built from: the base weight, or (merge) the
 * weight with its adapter merged, in *hst (allocated, as large as the largest linear, by
 * the first merge that needs it). */
static const float *lin_source(const dllm_tf *m, int l, int j, bool merge, float **hst)
{
    const tf_lora *ad = m->ad ? &m->ad[l * DLLM_NLIN + j] : NULL;
    if (!merge || !ad || !ad->A)
        return m->lw[l].t[j];
    if (!*hst)
        *hst = dllm_malloc(tf_max_linear(m) * sizeof(float));
    tf_merged_weight(m, l, j, *hst);
    return *hst;
}

size_t tf_max_linear(const dllm_tf *m)
{
    size_t mx = 0;
    for (int j = 0; j < DLLM_NLIN; j++)
        mx = tf_slot_numel(m, j) > mx ? tf_slot_numel(m, j) : mx;
    return mx;
}

int tf_view_build(dllm_tf *m, tf_view *v, const tf_view_spec *s, const dllm_precision *p,
                  dllm_err *err)
{
    dllm_backend *be = s->be;
    bool host = be == m->be; /* the view in host memory: host matrices are read in place */
    bool values = !(host && m->shape_only); /* a shape-only model has none to copy */
    size_t n = m->n_params;
    for (int l = 0; s->lin != TF_LIN_F32 && l < m->L; l++)
        for (int j = 0; j < DLLM_NLIN; j++)
            n -= tf_slot_numel(m, j);
    bool head32 = s->head32 || !s->head16;
    if (!m->tied && !head32)
        n -= (size_t)m->V * m->C;
    if (!v->buf || v->nbuf != n) {
        view_buf_free(m, v, be);
        if (!values) { /* address space like the parameters (an 8B model's copy is 32 GB) */
            v->buf = mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (v->buf == MAP_FAILED) {
                fprintf(stderr, "dllm-rl: out of address space for a %zu-float shape copy\n", n);
                exit(1);
            }
            v->buf_mapped = true;
        } else {
            v->buf = be->ops->alloc(be, n * sizeof(float));
        }
        v->nbuf = n;
    }
    if (!v->lw)
        v->lw = dllm_calloc((size_t)m->L, sizeof *v->lw);
    v->be = be;
    float *hst = s->hstage;
    float *dst = v->buf;
    /* every tensor but the packed linears: copied on be from `from`, or from the host */
#define PUT(field, hsrc, dsrc, cnt)                                                              \
    do {                                                                                         \
        size_t b_ = (size_t)(cnt) * sizeof(float);                                               \
        if (s->from)                                                                             \
            be->ops->copy(be, dst, (dsrc), b_);                                                  \
        else if (values)                                                                         \
            be->ops->upload(be, dst, (hsrc), b_);                                                \
        field = dst;                                                                             \
        dst += (size_t)(cnt);                                                                    \
    } while (0)
    PUT(v->embed, m->embed, s->from->embed, (size_t)m->V * m->C);
    for (int l = 0; l < m->L; l++)
        for (int t = 0; t < DLLM_NT; t++) {
            if (!m->lw[l].t[t] || (t < DLLM_NLIN && s->lin != TF_LIN_F32))
                v->lw[l].t[t] = NULL;
            else if (t < DLLM_NLIN)
                PUT(v->lw[l].t[t], lin_source(m, l, t, s->merge, &hst), s->from->lw[l].t[t],
                    tf_slot_numel(m, t));
            else
                PUT(v->lw[l].t[t], m->lw[l].t[t], s->from->lw[l].t[t], tf_slot_numel(m, t));
        }
    PUT(v->final_norm, m->final_norm, s->from->final_norm, m->C);
    if (m->tied)
        v->head = v->embed;
    else if (head32)
        PUT(v->head, m->head, s->from->head, (size_t)m->V * m->C);
    else
        v->head = NULL;
#undef PUT
    if (s->round && values)
        be->ops->round_bf16(be, v->buf, n);

    /* the layer linears packed by the backend, in its layout */
    size_t nlin = (size_t)m->L * DLLM_NLIN;
    if (s->lin == TF_LIN_BF16 && !v->b16)
        v->b16 = dllm_calloc(nlin, sizeof *v->b16);
    if (s->lin == TF_LIN_FP8 && !v->q8)
        v->q8 = dllm_calloc(nlin, sizeof *v->q8);
    if (s->lin == TF_LIN_NVFP4 && !v->q4)
        v->q4 = dllm_calloc(nlin, sizeof *v->q4);
    if (s->lin == TF_LIN_INT8 && !v->qi)
        v->qi = dllm_calloc(nlin, sizeof *v->qi);
    dllm_pack_args a = {
        .f8_format = p->fp8_format, .f8_scaling = p->fp8_scaling,
        /* FP8 activations are quantised to match the weights' granularity */
        .f8_act = p->fp8_scaling == FP8_SCALE_BLOCK     ? FP8_SCALE_GROUP
                  : p->fp8_scaling == FP8_SCALE_CHANNEL ? FP8_SCALE_CHANNEL
                                                        : FP8_SCALE_TENSOR,
        .f8_pow2 = p->fp8_pow2_scale, .f8_fast = p->rollout == DLLM_ROLLOUT_FP8,
        .i8_scaling = p->int8_scaling, .f4_scaling = p->nvfp4_scaling};
    int rc = 0;
    for (int l = 0; s->lin != TF_LIN_F32 && l < m->L && !rc; l++)
        for (int j = 0; j < DLLM_NLIN && !rc; j++) {
            int o, i;
            tf_lin_shape(m, j, &o, &i);
            const float *hsrc = s->from ? NULL : lin_source(m, l, j, s->merge, &hst);
            const float *src = s->from ? s->from->lw[l].t[j] : host ? hsrc : NULL;
            rc = be->ops->pack_weight(be, tf_lin_weight(v, l, j), src, hsrc, s->stage, o, i,
                                      &a, err);
        }
    if (!rc && s->head16) { /* the head's bf16 bits round as round_bf16 does */
        size_t C = (size_t)m->C, V = (size_t)m->V;
        if (v->head || s->from) {
            const float *h = v->head ? v->head : s->from->head;
            rc = be->ops->pack_weight(be, (dllm_lin_weight){.b16 = &v->head16}, h,
                                      host ? h : NULL, s->stage, m->V, m->C, &a, err);
        } else { /* no fp32 head in the view (a device rollout copy's): the host's, a stripe
                    of rows at a time through the stage, into to_bf16's plain rows */
            if (!v->head16.w)
                v->head16.w = be->ops->alloc(be, V * C * sizeof(uint16_t));
            v->head16.rows = m->V, v->head16.cols = m->C;
            for (size_t r0 = 0, rs = tf_max_linear(m) / C; r0 < V; r0 += rs) {
                size_t nr = V - r0 < rs ? V - r0 : rs;
                be->ops->upload(be, s->stage, m->head + r0 * C, nr * C * sizeof(float));
                be->ops->to_bf16(be, v->head16.w + r0 * C, s->stage, nr * C);
            }
        }
    }
    if (hst != s->hstage)
        free(hst);
    return rc;
}

/* A bf16-rounded host copy of the weights (the layer linears fp32-held bf16 values), LoRA
 * merged when `merge`: a bf16 trainer's copy, or the exact bf16 simulation. */
static void view_bf16_copy(dllm_tf *m, tf_view *v, bool merge)
{
    tf_view_spec s = {.be = m->be, .round = true, .lin = TF_LIN_F32, .merge = merge,
                      .head32 = true};
    dllm_err e;
    tf_view_build(m, v, &s, &m->prec, &e); /* fp32 linears: nothing packed, nothing fails */
}

/* A host rollout copy whose layer linears are packed or quantised (bf16 on a backend with
 * a bf16 linear, fp8, fp8-exact, nvfp4, int8) from the merged weights, the rest rounded
 * to bf16 in fp32; the head packed as bf16 too, except under fp8-exact (the earlier fp8's
 * fp32 head) or where the backend has no bf16 linear. */
static int view_packed(dllm_tf *m, tf_view *v, const dllm_precision *p, dllm_err *err)
{
    dllm_rollout_kind k = p->rollout;
    tf_view_spec s = {
        .be = m->be, .round = true, .merge = true, .head32 = true,
        .lin = dllm_rollout_is_fp8(k)       ? TF_LIN_FP8
               : k == DLLM_ROLLOUT_NVFP4 ? TF_LIN_NVFP4
               : k == DLLM_ROLLOUT_INT8  ? TF_LIN_INT8
                                         : TF_LIN_BF16,
        .head16 = k != DLLM_ROLLOUT_FP8_EXACT && dllm_backend_supports(m->be, DLLM_OP_BF16_LINEAR)};
    return tf_view_build(m, v, &s, p, err);
}

dllm_precision dllm_tf_get_precision(const dllm_tf *m) { return m->prec; }

void tf_trainer_follow(dllm_tf *m)
{
    /* a bf16 trainer's rounded copy of the weights (LoRA's adapters are read at run time);
     * on a device the device's view follows its own writes */
    if (m->prec.trainer_bf16 && m->tv.buf && !m->lora_rank && !m->dev)
        view_bf16_copy(m, &m->tv, false);
}

int dllm_tf_rollout_sync(dllm_tf *m, const dllm_precision *p, double *seconds, dllm_err *err)
{
    double t0 = dllm_now();
    int rc = dllm_precision_check(p, "dllm_tf_rollout_sync", err);
    if (rc)
        return rc;
    /* the trainer's copy (the activations kept for backward belong to the old one); on a
     * device the trainer view is the device's (tf_device_sync below) and the host keeps
     * only its masters */
    if (p->trainer_bf16 != m->prec.trainer_bf16)
        m->a.kept = TF_KEPT_NONE;
    if (m->dev) {
        /* the device's (tf_device_sync below) */
    } else if (p->trainer_bf16) {
        if (!m->tv.buf)
            tf_view_free(m, &m->tv);
        view_bf16_copy(m, &m->tv, false);
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
        view_bf16_copy(m, &m->rv, true);
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
