/* transformer_device.c: the transformer core on a device backend
 * (dllm_tf_to_device, transformer.h).
 *
 * What lives where once a model is on a device:
 *   host    the weights as loaded (the trainable vector until the model trains here; the frozen
 *           base under LoRA), LoRA, and the host trainer's state when the update runs
 *           on the host;
 *   device  the trainer view (fp32, or bf16: packed bf16 linears, the rest rounded;
 *           LoRA applied at run time from uploaded A/B copies, as on the host; built
 *           on first use after each sync), the
 *           rollout copy (bf16 packed, FP8 W8A8 or INT8 W8A7, LoRA merged; none under rollout
 *           "trainer"), the RoPE table, the activations of the forwards without
 *           backward, one fp32 staging matrix and a chunk of logits rows; when it trains
 *           here (transformer_device_train.c) the gradients, the AdamW moments and the
 *           trainable vector itself (the trainer view's copy, or the LoRA copy).
 * dllm_tf_rollout_sync rebuilds the device copies from the master weights: each
 * layer linear is merged on the host into one host matrix, uploaded into the one
 * device staging matrix and packed (bf16) or quantised (FP8) there by the backend,
 * so no second full fp32 copy exists on the device beyond the fp32 trainer view; a
 * full fine-tune training here packs from its trainer view on the device instead.
 * The forwards over host inputs are the host's code (transformer_fwd.c, fwd_place): the
 * host builds token ids, key mask, RoPE positions and the hidden rows the logits read
 * (small int arrays) in this file's staging, uploads them, and downloads the logits of
 * the requested rows a chunk of rows at a time (tf_device_chunk). */
#include "dllm/transformer_device_impl.h"
#include "kernels/cuda_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t max_linear(const dllm_tf *m)
{
    size_t mx = 0;
    for (int j = 0; j < DLLM_NLIN; j++)
        mx = tf_slot_numel(m, j) > mx ? tf_slot_numel(m, j) : mx;
    return mx;
}

static void *dalloc(tf_device *d, size_t bytes) { return d->be->ops->alloc(d->be, bytes); }
static void dfree(tf_device *d, void *p)
{
    if (p)
        d->be->ops->free(d->be, p);
}

const op_rope_table *tf_rope_on(dllm_tf *m, dllm_backend *be)
{
    if (!m->dev || be != m->dev->be)
        return &m->rope;
    tf_device *d = m->dev;
    if (d->rope.max_pos != m->rope.max_pos || d->rope.half != m->rope.half) {
        dfree(d, d->rope.cos);
        dfree(d, d->rope.sin);
        size_t bytes = (size_t)m->rope.max_pos * m->rope.half * sizeof(float);
        d->rope = (op_rope_table){m->rope.max_pos, m->rope.half, dalloc(d, bytes),
                                  dalloc(d, bytes)};
        be->ops->upload(be, d->rope.cos, m->rope.cos, bytes);
        be->ops->upload(be, d->rope.sin, m->rope.sin, bytes);
    }
    return &d->rope;
}

/* ---- device views --------------------------------------------------------------------- */

void tf_device_view_free(const dllm_tf *m, tf_view *v)
{
    tf_device *d = m->dev;
    dfree(d, v->buf);
    for (int k = 0; k < m->L * DLLM_NLIN; k++) {
        if (v->b16)
            dfree(d, v->b16[k].w);
        if (v->q8) {
            dfree(d, v->q8[k].q);
            dfree(d, v->q8[k].scale);
        }
        if (v->qi) {
            dfree(d, v->qi[k].q);
            dfree(d, v->qi[k].scale);
        }
    }
    free(v->b16);
    free(v->q8);
    free(v->qi);
    dfree(d, v->head16.w);
    free(v->lw);
    memset(v, 0, sizeof *v);
}

typedef enum { LIN_F32, LIN_BF16, LIN_FP8, LIN_INT8 } lin_fmt;

/* The host matrix linear j of layer l is built from: the base weight, or (merge) the
 * weight with its adapter merged, in d->hstage. */
static const float *lin_source(dllm_tf *m, int l, int j, bool merge)
{
    const tf_lora *ad = m->ad ? &m->ad[l * DLLM_NLIN + j] : NULL;
    if (!merge || !ad || !ad->A)
        return m->lw[l].t[j];
    tf_merged_weight(m, l, j, m->dev->hstage);
    return m->dev->hstage;
}

/* v = the weights in device memory: every tensor but the layer linears uploaded as fp32
 * (bf16-rounded there when `round`); the layer linears fp32 in the same buffer (LIN_F32),
 * or packed bf16 / quantised FP8 on the device from the base (or merged) weights through
 * the staging matrix; the head packed as bf16 too when `head16`. With `from` (an fp32
 * view on this device, LoRA off: the trainer view that trains here and is the master),
 * every tensor is copied or packed from it on the device instead: nothing crosses. Reuses
 * v's buffers when their sizes are unchanged (the sync after every optimizer step). */
/* head32: the view keeps an fp32 head beside head16 (a backward reads it); a rollout
 * copy's forwards read only head16, which is built without one. */
static int dview_build(dllm_tf *m, tf_view *v, bool round, lin_fmt lin, bool merge,
                       bool head16, bool head32, const dllm_precision *p, const tf_view *from)
{
    tf_device *d = m->dev;
    dllm_backend *be = d->be;
    size_t n = m->n_params;
    for (int l = 0; lin != LIN_F32 && l < m->L; l++)
        for (int j = 0; j < DLLM_NLIN; j++)
            n -= tf_slot_numel(m, j);
    head32 = head32 || !head16;
    if (!m->tied && !head32)
        n -= (size_t)m->V * m->C;
    if (!v->buf || v->nbuf != n) {
        dfree(d, v->buf);
        v->buf = dalloc(d, n * sizeof(float));
        v->nbuf = n;
    }
    if (!v->lw)
        v->lw = dllm_calloc((size_t)m->L, sizeof *v->lw);
    v->be = be;
    float *dst = v->buf;
#define UP(field, src, dsrc, cnt)                                                                \
    do {                                                                                         \
        if (from)                                                                                \
            be->ops->copy(be, dst, (dsrc), (size_t)(cnt) * sizeof(float));                       \
        else                                                                                     \
            be->ops->upload(be, dst, (src), (size_t)(cnt) * sizeof(float));                      \
        field = dst;                                                                             \
        dst += (size_t)(cnt);                                                                    \
    } while (0)
    UP(v->embed, m->embed, from->embed, (size_t)m->V * m->C);
    for (int l = 0; l < m->L; l++)
        for (int t = 0; t < DLLM_NT; t++) {
            if (!m->lw[l].t[t] || (t < DLLM_NLIN && lin != LIN_F32))
                v->lw[l].t[t] = NULL;
            else if (t < DLLM_NLIN)
                UP(v->lw[l].t[t], lin_source(m, l, t, merge), from->lw[l].t[t],
                   tf_slot_numel(m, t));
            else
                UP(v->lw[l].t[t], m->lw[l].t[t], from->lw[l].t[t], tf_slot_numel(m, t));
        }
    UP(v->final_norm, m->final_norm, from->final_norm, m->C);
    if (m->tied)
        v->head = v->embed;
    else if (head32)
        UP(v->head, m->head, from->head, (size_t)m->V * m->C);
    else
        v->head = NULL;
#undef UP
    if (round)
        be->ops->round_bf16(be, v->buf, n);

    size_t nlin = (size_t)m->L * DLLM_NLIN;
    if (lin == LIN_BF16 && !v->b16)
        v->b16 = dllm_calloc(nlin, sizeof *v->b16);
    if (lin == LIN_FP8 && !v->q8)
        v->q8 = dllm_calloc(nlin, sizeof *v->q8);
    if (lin == LIN_INT8 && !v->qi)
        v->qi = dllm_calloc(nlin, sizeof *v->qi);
    /* FP8 activations are quantised to match the weights' granularity (as on the host) */
    fp8_scaling act = p->fp8_scaling == FP8_SCALE_BLOCK     ? FP8_SCALE_GROUP
                      : p->fp8_scaling == FP8_SCALE_CHANNEL ? FP8_SCALE_CHANNEL
                                                            : FP8_SCALE_TENSOR;
    for (int l = 0; lin != LIN_F32 && l < m->L; l++)
        for (int j = 0; j < DLLM_NLIN; j++) {
            int o, i;
            tf_lin_shape(m, j, &o, &i);
            size_t cnt = (size_t)o * i;
            if (lin == LIN_INT8) { /* from the host's weights (never `from`: tf_device_sync) */
                dllm_err e;
                if (dllm_backend_int8_weight(be, &v->qi[l * DLLM_NLIN + j],
                                             lin_source(m, l, j, merge), o, i, p->int8_scaling,
                                             &e)) {
                    fprintf(stderr, "dllm-rl: %s\n", e.msg); /* shapes are the model's own */
                    exit(1);
                }
                continue;
            }
            const float *w = from ? from->lw[l].t[j] : d->stage;
            if (!from)
                be->ops->upload(be, d->stage, lin_source(m, l, j, merge), cnt * sizeof(float));
            if (lin == LIN_BF16) {
                bf16_matrix *b = &v->b16[l * DLLM_NLIN + j];
                if (!b->w)
                    b->w = dalloc(d, cnt * sizeof(uint16_t));
                b->rows = o, b->cols = i;
                be->ops->to_bf16(be, b->w, w, cnt);
            } else {
                dllm_backend_fp8_weight(be, &v->q8[l * DLLM_NLIN + j], w, o, i, p->fp8_format,
                                        p->fp8_scaling, p->fp8_pow2_scale, act,
                                        p->rollout == DLLM_ROLLOUT_FP8);
            }
        }
    if (head16) { /* to_bf16 rounds as round_bf16 does: from v->head or its source */
        size_t C = (size_t)m->C, V = (size_t)m->V;
        if (!v->head16.w)
            v->head16.w = dalloc(d, V * C * sizeof(uint16_t));
        v->head16.rows = m->V, v->head16.cols = m->C;
        if (v->head || from)
            be->ops->to_bf16(be, v->head16.w, v->head ? v->head : from->head, V * C);
        else /* from the host's head through the staging matrix, a stripe of rows at a time */
            for (size_t r0 = 0, rs = max_linear(m) / C; r0 < V; r0 += rs) {
                size_t nr = V - r0 < rs ? V - r0 : rs;
                be->ops->upload(be, d->stage, m->head + r0 * C, nr * C * sizeof(float));
                be->ops->to_bf16(be, v->head16.w + r0 * C, d->stage, nr * C);
            }
    }
    return 0;
}

/* The LoRA parameters uploaded, and A/B pointers into the copy. */
static void lora_upload(dllm_tf *m)
{
    tf_device *d = m->dev;
    if (d->n_lora != m->n_lora) {
        dfree(d, d->lora);
        free(d->ad);
        d->lora = NULL, d->ad = NULL, d->n_lora = 0;
    }
    if (!m->lora_rank)
        return;
    if (!d->lora) {
        d->lora = dalloc(d, m->n_lora * sizeof(float));
        d->n_lora = m->n_lora;
        d->ad = dllm_calloc((size_t)m->L * DLLM_NLIN, sizeof *d->ad);
    }
    d->be->ops->upload(d->be, d->lora, m->lora_params, m->n_lora * sizeof(float));
    for (int k = 0; k < m->L * DLLM_NLIN; k++) {
        const tf_lora *h = &m->ad[k];
        d->ad[k] = (tf_lora){NULL, NULL, NULL, NULL, h->in, h->out};
        if (h->A) {
            d->ad[k].A = d->lora + (h->A - m->lora_params);
            d->ad[k].B = d->lora + (h->B - m->lora_params);
        }
    }
}

/* The trainer view on the device, at the host trainer's numerics, with the adapters. */
static void device_trainer(dllm_tf *m)
{
    tf_device *d = m->dev;
    const dllm_precision *p = &m->prec;
    lora_upload(m);
    bool tb = p->trainer_bf16;
    if ((d->tv.b16 != NULL) != tb) /* built or not: its buffers have the other layout */
        tf_device_view_free(m, &d->tv);
    dview_build(m, &d->tv, tb, tb ? LIN_BF16 : LIN_F32, false, tb, true, p, NULL);
    d->tv.round_lin = d->tv.round_head = tb;
    /* packed bf16 base linears (bf16_linear_fwd, bf16_lora_fwd; backward bf16_lora_bwd,
     * bf16_linear_bwd_x) round their inputs as read: the same values without a pass */
    d->tv.lin_rounds = tb;
    /* and their inputs' producers write the bf16 copies they read (the same bits) */
    d->tv.fuse_act = tb && !d->no_fuse_act;
    d->tv.lora = true;
    d->tv.ad = d->ad;
}

void tf_device_host_written(dllm_tf *m)
{
    tf_device *d = m->dev;
    if (!d)
        return;
    if (d->train) /* the kept forward ran here, on the old values */
        m->a.kept = TF_KEPT_NONE;
    d->tv.be = NULL;
}

void tf_device_host_access(dllm_tf *m)
{
    tf_device_pull(m);
    tf_device_host_written(m);
}

/* The view a device forward reads; the trainer view built first where it is not.
 * Building it on first use keeps the fp32 (or bf16) trainer copy off a device that only
 * runs the rollout copy (generate, score, bench rollout at a low precision). */
const tf_view *tf_device_view(dllm_tf *m, bool rollout)
{
    tf_device *d = m->dev;
    bool tv = !rollout || m->prec.rollout == DLLM_ROLLOUT_TRAINER;
    if (tv && !d->tv.be)
        device_trainer(m);
    return tv ? &d->tv : &m->rv;
}

int tf_device_sync(dllm_tf *m, dllm_err *err)
{
    tf_device *d = m->dev;
    const dllm_precision *p = &m->prec;
    /* a trainer view that trains here keeps its copy (where the trainable vector lives)
     * unless its layout changes; otherwise it is rebuilt from the host's, pulled first */
    bool keep = d->train && d->tv.be && d->n_lora == m->n_lora &&
                (d->tv.b16 != NULL) == p->trainer_bf16;
    if (!keep) {
        tf_device_pull(m);
        d->tv.be = NULL; /* rebuilt into its buffers by the next forward that reads it */
    }
    if (d->n_lora != m->n_lora) { /* LoRA changed: the activations' LoRA buffers with it */
        tf_acts_free(&m->ra);
        d->xl[0] = d->xl[1] = NULL;
        tf_device_train_free(m); /* its adapters' layout changed */
    }
    if (!keep)
        lora_upload(m);
    /* the rollout copy */
    dllm_rollout_kind k = p->rollout;
    if (m->rv.be && (k != d->rprec.rollout || p->fp8_format != d->rprec.fp8_format ||
                     p->fp8_scaling != d->rprec.fp8_scaling ||
                     p->fp8_pow2_scale != d->rprec.fp8_pow2_scale ||
                     p->int8_scaling != d->rprec.int8_scaling))
        tf_device_view_free(m, &m->rv);
    d->rprec = *p;
    if (k == DLLM_ROLLOUT_TRAINER)
        return 0;
    if (k == DLLM_ROLLOUT_NVFP4 ||
        (!dllm_rollout_is_fp8(k) && k != DLLM_ROLLOUT_BF16 && k != DLLM_ROLLOUT_INT8)) {
        tf_device_view_free(m, &m->rv);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout precision %s: the %s backend has no linear for it "
                            "(use bf16, fp8 or int8)", dllm_rollout_name(k), d->be->name);
    }
    char why[256];
    if (k == DLLM_ROLLOUT_INT8 && d->be == dllm_backend_cuda() &&
        !dllm_cuda_int8_available(why, sizeof why)) {
        tf_device_view_free(m, &m->rv);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision int8: %s (int8 runs on "
                            "the CPU; on this device use bf16)", why);
    }
    if (dllm_rollout_is_fp8(k) && d->be == dllm_backend_cuda() &&
        !dllm_cuda_fp8_available(why, sizeof why)) {
        tf_device_view_free(m, &m->rv);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision %s: %s (on this device "
                            "use int8: INT8 tensor cores, or bf16)", dllm_rollout_name(k), why);
    }
    if (dllm_rollout_is_fp8(k) && p->fp8_scaling == FP8_SCALE_BLOCK &&
        !dllm_backend_fp8_block_ok(d->be, why, sizeof why)) {
        tf_device_view_free(m, &m->rv);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout.fp8.scaling block on the %s backend: %s (use "
                            "rollout.fp8.scaling: tensor, or a newer CUDA toolkit)",
                            d->be->name, why);
    }
    /* full fine-tuning here: built from the trainer view on the device (the same fp32
     * values as the host's masters, or newer); LoRA: merged on the host from the frozen
     * base and the adapters, which come down first when they are newer here */
    const tf_view *from = NULL;
    if (d->train && !m->lora_rank && k != DLLM_ROLLOUT_INT8)
        from = tf_device_view(m, false);
    else /* INT8 quantises on the host (dq_int8): the host's weights must be current */
        tf_device_pull(m);
    if (k == DLLM_ROLLOUT_BF16)
        dview_build(m, &m->rv, true, LIN_BF16, true, true, false, p, from);
    else if (k == DLLM_ROLLOUT_INT8)
        dview_build(m, &m->rv, true, LIN_INT8, true, true, false, p, from);
    else
        dview_build(m, &m->rv, true, LIN_FP8, true, k != DLLM_ROLLOUT_FP8_EXACT, false, p, from);
    /* each of these linears rounds or quantises its own input, as on the host, or its
     * input's producer quantises for it on the device (the same codes) */
    m->rv.fuse_act = !d->no_fuse_act;
    m->rv.round_lin = false;
    m->rv.round_head = true;
    m->rv.lora = false;
    return 0;
}

void tf_device_fuse_act(dllm_tf *m, bool on)
{
    if (m->dev) {
        m->dev->no_fuse_act = !on;
        m->rv.fuse_act = on;
        m->dev->tv.fuse_act = on && m->dev->tv.b16;
    }
}

void tf_device_free(dllm_tf *m)
{
    tf_device *d = m->dev;
    if (!d)
        return;
    tf_device_train_free(m);
    tf_device_view_free(m, &d->tv);
    tf_device_view_free(m, &m->rv);
    tf_acts_free(&m->ra);
    m->ra.be = NULL; /* the host's set again */
    dfree(d, d->rope.cos);
    dfree(d, d->rope.sin);
    dfree(d, d->lora);
    dfree(d, d->stage);
    dfree(d, d->lg);
    dfree(d, d->tgt);
    dfree(d, d->lp);
    free(d->ad);
    free(d->hstage);
    free(d->h_tok);
    free(d->h_pos);
    free(d->h_rows);
    free(d->h_mask);
    free(d);
    m->dev = NULL;
}

/* ---- buffers of the forwards (transformer_fwd.c) --------------------------------------- */

void tf_device_chunk(dllm_tf *m, int n)
{
    tf_device *d = m->dev;
    if (n <= d->lg_cap)
        return;
    dfree(d, d->lg);
    dfree(d, d->tgt);
    dfree(d, d->lp);
    d->lg = dalloc(d, (size_t)n * m->V * sizeof(float));
    d->tgt = dalloc(d, (size_t)n * sizeof(int32_t));
    d->lp = dalloc(d, (size_t)n * sizeof(float));
    d->lg_cap = n;
}

void tf_device_staging(tf_device *d, size_t n)
{
    if (n <= d->hcap)
        return;
    free(d->h_tok), free(d->h_pos), free(d->h_rows), free(d->h_mask);
    d->h_tok = dllm_malloc(n * sizeof(int32_t));
    d->h_pos = dllm_malloc(n * sizeof(int32_t));
    d->h_rows = dllm_malloc(n * sizeof(int32_t));
    d->h_mask = dllm_malloc(n);
    d->hcap = n;
}

void tf_device_kept_rows(dllm_tf *m, int R)
{
    tf_device *d = m->dev;
    if (R <= d->k_cap)
        return;
    dfree(d, d->ktgt), dfree(d, d->klp), dfree(d, d->klse), dfree(d, d->kg);
    d->ktgt = dalloc(d, (size_t)R * sizeof(int32_t));
    d->klp = dalloc(d, (size_t)R * sizeof(float));
    d->klse = dalloc(d, (size_t)R * sizeof(float));
    d->kg = dalloc(d, (size_t)R * sizeof(float));
    d->k_cap = R;
}

/* ---- placement ------------------------------------------------------------------------ */

int dllm_tf_device_chunk_rows(int V)
{
    size_t rows = LOGITS_CHUNK_BYTES / ((size_t)(V > 0 ? V : 1) * sizeof(float));
    return rows < 1 ? 1 : rows > LOGITS_CHUNK_MAX_ROWS ? LOGITS_CHUNK_MAX_ROWS : (int)rows;
}

dllm_backend *dllm_tf_device(const dllm_tf *m) { return m->dev ? m->dev->be : NULL; }

int dllm_tf_to_device(dllm_tf *m, dllm_backend *be, dllm_err *err)
{
    if (!be || be->kind == DLLM_BACKEND_CPU) { /* back to the host: its rollout copy again */
        if (!m->dev)
            return 0;
        tf_device_pull(m); /* the masters come home */
        tf_device_free(m);
        dllm_precision p = m->prec;
        return dllm_tf_rollout_sync(m, &p, NULL, err);
    }
    if (m->dev && m->dev->be != be) {
        tf_device_pull(m);
        tf_device_free(m);
    }
    if (!m->dev) {
        tf_device *d = dllm_calloc(1, sizeof *d);
        d->be = be;
        m->dev = d;
        size_t mx = max_linear(m);
        d->stage = dalloc(d, mx * sizeof(float));
        d->hstage = dllm_malloc(mx * sizeof(float));
        d->lg_rows = dllm_tf_device_chunk_rows(m->V);
        /* the host's rollout copy and its activations are not used from now on */
        tf_view_free(m, &m->rv);
        tf_acts_free(&m->ra);
    }
    int rc = tf_device_sync(m, err);
    if (rc) { /* the model stays on the host, its rollout copy rebuilt there */
        tf_device_free(m);
        dllm_precision p = m->prec;
        dllm_err e2;
        dllm_tf_rollout_sync(m, &p, NULL, &e2);
    }
    return rc;
}
