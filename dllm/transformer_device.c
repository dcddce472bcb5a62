/* transformer_device.c: the transformer core on a device backend
 * (dllm_tf_to_device, transformer.h).
 *
 * The model's state is one (dllm_tf): on a device its views, RoPE table, activations and
 * training state are the same fields in the device's memory (m->dev), built here from the
 * host's masters and moved back by tf_device_pull. What lives where:
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
 * (small int arrays) in the model's staging (m->io), uploads them, and downloads the logits of
 * the requested rows a chunk of rows at a time (tf_device_chunk). */
#include "dllm/transformer_impl.h"
#include "kernels/cuda_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dalloc(dllm_tf *m, size_t bytes) { return m->dev->ops->alloc(m->dev, bytes); }
static void dfree(dllm_tf *m, void *p)
{
    if (p)
        m->dev->ops->free(m->dev, p);
}

/* The RoPE table where the model runs: computed on the host, moved up onto the device (and
 * computed again on the host when the model comes back). */
static void rope_up(dllm_tf *m)
{
    op_rope_table h = m->rope;
    size_t bytes = (size_t)h.max_pos * h.half * sizeof(float);
    m->rope.cos = dalloc(m, bytes);
    m->rope.sin = dalloc(m, bytes);
    m->dev->ops->upload(m->dev, m->rope.cos, h.cos, bytes);
    m->dev->ops->upload(m->dev, m->rope.sin, h.sin, bytes);
    op_rope_table_free(&h);
}

void tf_rope_grow(dllm_tf *m, int npos)
{
    if (npos <= m->rope.max_pos) /* longer than max_sequence_length: the table grows */
        return;
    if (m->dev) {
        dfree(m, m->rope.cos);
        dfree(m, m->rope.sin);
    } else {
        op_rope_table_free(&m->rope);
    }
    op_rope_table_init(&m->rope, npos, m->HD, m->cfg.rope_theta);
    if (m->dev)
        rope_up(m);
}

/* ---- device views --------------------------------------------------------------------- */

/* A view on this device (tf_view_build): from the host's weights through the staging
 * matrices, or (from) copied and packed from an fp32 view already here. */
static int dview_build(dllm_tf *m, tf_view *v, bool round, tf_lin_fmt lin, bool merge,
                       bool head16, bool head32, const dllm_precision *p, const tf_view *from,
                       dllm_err *err)
{
    tf_view_spec s = {.be = m->dev, .round = round, .lin = lin, .merge = merge,
                      .head16 = head16, .head32 = head32, .from = from, .stage = m->io.stage,
                      .hstage = m->io.hstage};
    return tf_view_build(m, v, &s, p, err);
}

/* The LoRA parameters uploaded, and A/B pointers into the copy. */
static void lora_upload(dllm_tf *m)
{
    if (m->n_dlora != m->n_lora) {
        dfree(m, m->dlora);
        free(m->dad);
        m->dlora = NULL, m->dad = NULL, m->n_dlora = 0;
    }
    if (!m->lora_rank)
        return;
    if (!m->dlora) {
        m->dlora = dalloc(m, m->n_lora * sizeof(float));
        m->n_dlora = m->n_lora;
        m->dad = dllm_calloc((size_t)m->L * DLLM_NLIN, sizeof *m->dad);
    }
    m->dev->ops->upload(m->dev, m->dlora, m->lora_params, m->n_lora * sizeof(float));
    for (int k = 0; k < m->L * DLLM_NLIN; k++) {
        const tf_lora *h = &m->ad[k];
        tf_lora *a = &m->dad[k];
        *a = (tf_lora){NULL, NULL, a->dA, a->dB, h->in, h->out}; /* gradients kept */
        if (h->A) {
            a->A = m->dlora + (h->A - m->lora_params);
            a->B = m->dlora + (h->B - m->lora_params);
        }
    }
}

/* Whether the trainer view is a bf16 trainer's rounded copy of fp32 masters kept beside it
 * (m->mv): a full fine-tune training here, whose update steps fp32 weights and needs every
 * linear's weight gradient, neither of which packed bf16 linears have. The host's bf16
 * trainer holds the same pair (its masters and their rounded copy). */
static bool with_masters(const dllm_tf *m)
{
    return m->prec.trainer_bf16 && !m->lora_rank && tf_device_training(m);
}

void tf_device_trainer_follow(dllm_tf *m)
{
    if (!m->mv.be)
        return;
    dllm_err e; /* fp32 linears: nothing packed, nothing fails */
    dview_build(m, &m->tv, true, TF_LIN_F32, false, false, true, &m->prec, &m->mv, &e);
    m->a.kept = TF_KEPT_NONE; /* kept for the old values */
}

/* The trainer view on the device, at the host trainer's numerics, with the adapters. */
static void device_trainer(dllm_tf *m)
{
    const dllm_precision *p = &m->prec;
    lora_upload(m);
    bool tb = p->trainer_bf16, masters = with_masters(m), packed = tb && !masters;
    if ((m->tv.b16 != NULL) != packed) /* built or not: its buffers have the other layout */
        tf_view_free_on(m, &m->tv, m->dev);
    dllm_err e; /* fp32 or bf16 linears: every backend packs them */
    if (masters) { /* the masters from the host's, the rounded copy from them */
        dview_build(m, &m->mv, false, TF_LIN_F32, false, false, true, p, NULL, &e);
        tf_device_trainer_follow(m);
    } else {
        tf_view_free_on(m, &m->mv, m->dev);
        dview_build(m, &m->tv, tb, packed ? TF_LIN_BF16 : TF_LIN_F32, false, packed, true, p,
                    NULL, &e);
    }
    m->tv.round_lin = m->tv.round_head = tb;
    /* packed bf16 base linears (bf16_linear_fwd, bf16_lora_fwd; backward bf16_lora_bwd,
     * bf16_linear_bwd_x) round their inputs as read: the same values without a pass */
    m->tv.lin_rounds = packed;
    /* and their inputs' producers write the bf16 copies they read (the same bits) */
    m->tv.fuse_act = packed && !m->no_fuse_act;
    m->tv.lora = true;
    m->tv.ad = m->dad;
}

const tf_view *tf_device_masters(dllm_tf *m)
{
    tf_device_view(m, false);
    return tf_device_fp32(m);
}

void tf_device_host_written(dllm_tf *m)
{
    if (!m->dev)
        return;
    if (tf_device_training(m)) /* the kept forward ran here, on the old values */
        m->a.kept = TF_KEPT_NONE;
    m->tv.be = NULL;
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
    bool tv = !rollout || m->prec.rollout == DLLM_ROLLOUT_TRAINER;
    if (tv && !m->tv.be)
        device_trainer(m);
    return tv ? &m->tv : &m->rv;
}

int tf_device_sync(dllm_tf *m, dllm_err *err)
{
    dllm_backend *be = m->dev;
    const dllm_precision *p = &m->prec;
    /* a trainer view that trains here keeps its copy (where the trainable vector lives)
     * unless its layout changes; otherwise it is rebuilt from the host's, pulled first */
    bool masters = with_masters(m);
    bool keep = tf_device_training(m) && m->tv.be && m->n_dlora == m->n_lora &&
                (m->tv.b16 != NULL) == (p->trainer_bf16 && !masters) &&
                (m->mv.be != NULL) == masters;
    if (!keep) {
        tf_device_pull(m);
        m->tv.be = NULL; /* rebuilt into its buffers by the next forward that reads it */
    }
    if (m->n_dlora != m->n_lora) { /* LoRA changed: the activations' LoRA buffers with it */
        tf_acts_free(&m->ra);
        m->io.xl[0] = m->io.xl[1] = NULL;
        tf_device_train_free(m); /* its adapters' layout changed */
    }
    if (!keep)
        lora_upload(m);
    /* the rollout copy (dropped by dllm_tf_rollout_sync where its kind changed) */
    dllm_rollout_kind k = p->rollout;
    if (k == DLLM_ROLLOUT_TRAINER)
        return 0;
    if (k == DLLM_ROLLOUT_NVFP4 ||
        (!dllm_rollout_is_fp8(k) && k != DLLM_ROLLOUT_BF16 && k != DLLM_ROLLOUT_INT8)) {
        tf_view_free_on(m, &m->rv, be);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout precision %s: the %s backend has no linear for it "
                            "(use bf16, fp8 or int8)", dllm_rollout_name(k), be->name);
    }
    char why[256];
    if (k == DLLM_ROLLOUT_INT8 && be == dllm_backend_cuda() &&
        !dllm_cuda_int8_available(why, sizeof why)) {
        tf_view_free_on(m, &m->rv, be);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision int8: %s (int8 runs on "
                            "the CPU; on this device use bf16)", why);
    }
    if (dllm_rollout_is_fp8(k) && be == dllm_backend_cuda() &&
        !dllm_cuda_fp8_available(why, sizeof why)) {
        tf_view_free_on(m, &m->rv, be);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision %s: %s (on this device "
                            "use int8: INT8 tensor cores, or bf16)", dllm_rollout_name(k), why);
    }
    if (dllm_rollout_is_fp8(k) && p->fp8_scaling == FP8_SCALE_BLOCK &&
        !dllm_backend_fp8_block_ok(be, why, sizeof why)) {
        tf_view_free_on(m, &m->rv, be);
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout.fp8.scaling block on the %s backend: %s (use "
                            "rollout.fp8.scaling: tensor, or a newer CUDA toolkit)",
                            be->name, why);
    }
    /* full fine-tuning here: built from the trainer view on the device (the same fp32
     * values as the host's masters, or newer); LoRA: merged on the host from the frozen
     * base and the adapters, which come down first when they are newer here */
    const tf_view *from = NULL;
    if (tf_device_training(m) && !m->lora_rank && k != DLLM_ROLLOUT_INT8)
        from = tf_device_masters(m);
    else /* INT8 quantises on the host (dq_int8): the host's weights must be current */
        tf_device_pull(m);
    int rc = dview_build(m, &m->rv, true,
                         k == DLLM_ROLLOUT_BF16   ? TF_LIN_BF16
                         : k == DLLM_ROLLOUT_INT8 ? TF_LIN_INT8
                                                  : TF_LIN_FP8,
                         true, k != DLLM_ROLLOUT_FP8_EXACT, false, p, from, err);
    if (rc) {
        tf_view_free_on(m, &m->rv, be);
        return rc;
    }
    /* each of these linears rounds or quantises its own input, as on the host, or its
     * input's producer quantises for it on the device (the same codes) */
    m->rv.fuse_act = !m->no_fuse_act;
    m->rv.round_lin = false;
    m->rv.round_head = true;
    m->rv.lora = false;
    return 0;
}

void tf_device_fuse_act(dllm_tf *m, bool on)
{
    if (m->dev) {
        m->no_fuse_act = !on;
        m->rv.fuse_act = on;
        m->tv.fuse_act = on && m->tv.b16;
    }
}

void tf_device_free(dllm_tf *m)
{
    if (!m->dev)
        return;
    tf_device_train_free(m);
    tf_view_free_on(m, &m->tv, m->dev);
    tf_view_free_on(m, &m->mv, m->dev);
    tf_view_free_on(m, &m->rv, m->dev);
    tf_acts_free(&m->ra);
    m->ra.be = NULL; /* the host's set again */
    int npos = m->rope.max_pos;
    dfree(m, m->rope.cos);
    dfree(m, m->rope.sin);
    op_rope_table_init(&m->rope, npos, m->HD, m->cfg.rope_theta);
    tf_io *io = &m->io;
    void *dbufs[] = {m->dlora, io->stage, io->lg, io->tgt, io->lp};
    for (size_t i = 0; i < sizeof dbufs / sizeof *dbufs; i++)
        dfree(m, dbufs[i]);
    free(m->dad);
    free(io->hstage);
    free(io->h_tok);
    free(io->h_pos);
    free(io->h_rows);
    free(io->h_mask);
    memset(io, 0, sizeof *io);
    m->dlora = NULL, m->dad = NULL, m->n_dlora = 0;
    m->no_fuse_act = false;
    m->dev = NULL;
    tf_view_master(m, &m->tv); /* the host's trainer view again */
}

/* ---- buffers of the forwards (transformer_fwd.c) --------------------------------------- */

void tf_device_chunk(dllm_tf *m, int n)
{
    tf_io *io = &m->io;
    if (n <= io->lg_cap)
        return;
    dfree(m, io->lg);
    dfree(m, io->tgt);
    dfree(m, io->lp);
    io->lg = dalloc(m, (size_t)n * m->V * sizeof(float));
    io->tgt = dalloc(m, (size_t)n * sizeof(int32_t));
    io->lp = dalloc(m, (size_t)n * sizeof(float));
    io->lg_cap = n;
}

void tf_device_staging(dllm_tf *m, size_t n)
{
    tf_io *io = &m->io;
    if (n <= io->hcap)
        return;
    free(io->h_tok), free(io->h_pos), free(io->h_rows), free(io->h_mask);
    io->h_tok = dllm_malloc(n * sizeof(int32_t));
    io->h_pos = dllm_malloc(n * sizeof(int32_t));
    io->h_rows = dllm_malloc(n * sizeof(int32_t));
    io->h_mask = dllm_malloc(n);
    io->hcap = n;
}

void tf_device_kept_rows(dllm_tf *m, int R)
{
    tf_io *io = &m->io;
    if (R <= io->k_cap)
        return;
    dfree(m, io->ktgt), dfree(m, io->klp), dfree(m, io->klse), dfree(m, io->kg);
    io->ktgt = dalloc(m, (size_t)R * sizeof(int32_t));
    io->klp = dalloc(m, (size_t)R * sizeof(float));
    io->klse = dalloc(m, (size_t)R * sizeof(float));
    io->kg = dalloc(m, (size_t)R * sizeof(float));
    io->k_cap = R;
}

/* ---- placement ------------------------------------------------------------------------ */

int dllm_tf_device_chunk_rows(int V)
{
    size_t rows = LOGITS_CHUNK_BYTES / ((size_t)(V > 0 ? V : 1) * sizeof(float));
    return rows < 1 ? 1 : rows > LOGITS_CHUNK_MAX_ROWS ? LOGITS_CHUNK_MAX_ROWS : (int)rows;
}

dllm_backend *dllm_tf_device(const dllm_tf *m) { return m->dev; }

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
    if (m->dev && m->dev != be) {
        tf_device_pull(m);
        tf_device_free(m);
    }
    if (!m->dev) {
        /* the host's rollout copy, its activations and trainer view are not used from now
         * on (the host keeps the masters); the device's are built there */
        tf_view_free(m, &m->rv);
        tf_view_free(m, &m->tv);
        tf_acts_free(&m->ra);
        m->a.kept = TF_KEPT_NONE; /* a backward differentiates a forward made there */
        m->dev = be;
        rope_up(m);
        size_t mx = tf_max_linear(m);
        m->io.stage = dalloc(m, mx * sizeof(float));
        m->io.hstage = dllm_malloc(mx * sizeof(float));
        m->io.lg_rows = dllm_tf_device_chunk_rows(m->V);
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
