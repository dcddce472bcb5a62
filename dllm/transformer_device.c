/* transformer_device.c: the transformer core on a device backend
 * (dllm_tf_to_device, transformer.h).
 *
 * What lives where once a model is on a device:
 *   host    the weights as loaded (the trainable vector until the model trains here; the frozen
 *           base under LoRA) and LoRA: no trainer copy, no activations, no optimizer
 *           state (the first kept forward starts the training here);
 *   device  the trainer view (fp32, or bf16: packed bf16 linears, the rest rounded;
 *           LoRA applied at run time from uploaded A/B copies, as on the host; built
 *           on first use after each sync), the
 *           rollout copy (bf16 packed, FP8 W8A8 or INT8 W8A7, LoRA merged; none under rollout
 *           "trainer"), the RoPE table, the activations of the forwards without
 *           backward, one fp32 staging matrix and a chunk of logits rows; when it trains
 *           here (transformer_device_train.c) the gradients, the AdamW moments and the
 *           trainable vector itself (the trainer view's copy, the LoRA copy, or a bf16
 *           trainer's fp32 masters, its trainer view then their rounded copy with fp32
 *           linears).
 * dllm_tf_rollout_sync rebuilds the device copies from the master weights by the host's
 * view builder (tf_view_build, transformer_view.c): each layer linear is merged on the host
 * into one host matrix, uploaded into the one device staging matrix and packed (bf16) or
 * quantised (FP8; INT8 by the CPU's quantiser) by the backend's pack_weight,
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

/* A view on this device (tf_view_build): from the host's weights through the staging
 * matrices, or (from) copied and packed from an fp32 view already here. */
static int dview_build(dllm_tf *m, tf_view *v, bool round, tf_lin_fmt lin, bool merge,
                       bool head16, bool head32, const dllm_precision *p, const tf_view *from,
                       dllm_err *err)
{
    tf_device *d = m->dev;
    tf_view_spec s = {.be = d->be, .round = round, .lin = lin, .merge = merge,
                      .head16 = head16, .head32 = head32, .from = from, .stage = d->stage,
                      .hstage = d->hstage};
    return tf_view_build(m, v, &s, p, err);
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

/* Whether the trainer view is a bf16 trainer's rounded copy of fp32 masters kept beside it
 * (d->mv): a full fine-tune training here, whose update steps fp32 weights and needs every
 * linear's weight gradient, neither of which packed bf16 linears have. The host's bf16
 * trainer holds the same pair (its masters and their rounded copy). */
static bool with_masters(const dllm_tf *m)
{
    return m->prec.trainer_bf16 && !m->lora_rank && m->dev->train;
}

void tf_device_trainer_follow(dllm_tf *m)
{
    tf_device *d = m->dev;
    if (!d->mv.be)
        return;
    dllm_err e; /* fp32 linears: nothing packed, nothing fails */
    dview_build(m, &d->tv, true, TF_LIN_F32, false, false, true, &m->prec, &d->mv, &e);
    m->a.kept = TF_KEPT_NONE; /* kept for the old values */
}

/* The trainer view on the device, at the host trainer's numerics, with the adapters. */
static void device_trainer(dllm_tf *m)
{
    tf_device *d = m->dev;
    const dllm_precision *p = &m->prec;
    lora_upload(m);
    bool tb = p->trainer_bf16, masters = with_masters(m), packed = tb && !masters;
    if ((d->tv.b16 != NULL) != packed) /* built or not: its buffers have the other layout */
        tf_view_free_on(m, &d->tv, d->be);
    dllm_err e; /* fp32 or bf16 linears: every backend packs them */
    if (masters) { /* the masters from the host's, the rounded copy from them */
        dview_build(m, &d->mv, false, TF_LIN_F32, false, false, true, p, NULL, &e);
        tf_device_trainer_follow(m);
    } else {
        tf_view_free_on(m, &d->mv, d->be);
        dview_build(m, &d->tv, tb, packed ? TF_LIN_BF16 : TF_LIN_F32, false, packed, true, p,
                    NULL, &e);
    }
    d->tv.round_lin = d->tv.round_head = tb;
    /* packed bf16 base linears (bf16_linear_fwd, bf16_lora_fwd; backward bf16_lora_bwd,
     * bf16_linear_bwd_x) round their inputs as read: the same values without a pass */
    d->tv.lin_rounds = packed;
    /* and their inputs' producers write the bf16 copies they read (the same bits) */
    d->tv.fuse_act = packed && !d->no_fuse_act;
    d->tv.lora = true;
    d->tv.ad = d->ad;
}

const tf_view *tf_device_masters(dllm_tf *m)
{
    tf_device_view(m, false);
    return tf_device_fp32(m->dev);
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
    bool masters = with_masters(m);
    bool keep = d->train && d->tv.be && d->n_lora == m->n_lora &&
                (d->tv.b16 != NULL) == (p->trainer_bf16 && !masters) &&
                (d->mv.be != NULL) == masters;
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
        tf_view_free_on(m, &m->rv, d->be);
    d->rprec = *p;
    if (k == DLLM_ROLLOUT_TRAINER)
        return 0;
    if (k == DLLM_ROLLOUT_NVFP4 ||
        (!dllm_rollout_is_fp8(k) && k != DLLM_ROLLOUT_BF16 && k != DLLM_ROLLOUT_INT8)) {
        tf_view_free_on(m, &m->rv, d->be);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout precision %s: the %s backend has no linear for it "
                            "(use bf16, fp8 or int8)", dllm_rollout_name(k), d->be->name);
    }
    char why[256];
    if (k == DLLM_ROLLOUT_INT8 && d->be == dllm_backend_cuda() &&
        !dllm_cuda_int8_available(why, sizeof why)) {
        tf_view_free_on(m, &m->rv, d->be);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision int8: %s (int8 runs on "
                            "the CPU; on this device use bf16)", why);
    }
    if (dllm_rollout_is_fp8(k) && d->be == dllm_backend_cuda() &&
        !dllm_cuda_fp8_available(why, sizeof why)) {
        tf_view_free_on(m, &m->rv, d->be);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision %s: %s (on this device "
                            "use int8: INT8 tensor cores, or bf16)", dllm_rollout_name(k), why);
    }
    if (dllm_rollout_is_fp8(k) && p->fp8_scaling == FP8_SCALE_BLOCK &&
        !dllm_backend_fp8_block_ok(d->be, why, sizeof why)) {
        tf_view_free_on(m, &m->rv, d->be);
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
        from = tf_device_masters(m);
    else /* INT8 quantises on the host (dq_int8): the host's weights must be current */
        tf_device_pull(m);
    int rc = dview_build(m, &m->rv, true,
                         k == DLLM_ROLLOUT_BF16   ? TF_LIN_BF16
                         : k == DLLM_ROLLOUT_INT8 ? TF_LIN_INT8
                                                  : TF_LIN_FP8,
                         true, k != DLLM_ROLLOUT_FP8_EXACT, false, p, from, err);
    if (rc) {
        tf_view_free_on(m, &m->rv, d->be);
        return rc;
    }
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
    tf_view_free_on(m, &d->tv, d->be);
    tf_view_free_on(m, &d->mv, d->be);
    tf_view_free_on(m, &m->rv, d->be);
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
        size_t mx = tf_max_linear(m);
        d->stage = dalloc(d, mx * sizeof(float));
        d->hstage = dllm_malloc(mx * sizeof(float));
        d->lg_rows = dllm_tf_device_chunk_rows(m->V);
        /* the host's rollout copy, its activations and a bf16 trainer's rounded copy are
         * not used from now on (the host keeps the masters) */
        tf_view_free(m, &m->rv);
        tf_acts_free(&m->ra);
        if (m->tv.buf)
            tf_view_master(m, &m->tv);
        m->a.kept = TF_KEPT_NONE; /* a backward differentiates a forward made there */
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
