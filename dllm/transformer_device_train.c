/* transformer_device_train.c: training on the device (dllm_tf_device_train,
 * transformer.h) -- the training state in device memory: the trainable copy, its
 * gradients and AdamW moments, and the backward's target over them (the forwards and
 * the backward themselves are transformer_fwd.c's, one code for the host and a device).
 *
 * The trainable vector on the device is the copy the trainer view reads: the uploaded
 * LoRA parameters (the host's layout), or under full fine-tuning the fp32 trainer view
 * itself (embedding, layers slot by slot, final norm, head: not the HF order; segments()
 * maps one onto the other), or under a bf16 trainer's full fine-tuning fp32 masters in
 * that layout beside the rounded copy the forward reads (made again from them after
 * every write, on the device), as the host's bf16 trainer holds them. Gradients and
 * AdamW moments take the same layout, so the optimizer step is one elementwise call and
 * the global norm one reduction. While the model trains here (and its trainer copy is
 * built) that copy is the trainable vector: nothing comes down per step. The host's copy
 * is refreshed only when the host reads it (dllm_optim_trainable, leaving the device, a
 * LoRA change; tf_device_pull), the rollout copy is built on the device from the fp32
 * copy (full fine-tuning; under LoRA from the host's frozen base with the adapters,
 * n_lora floats, pulled first), and checkpoints stream the state a bounded chunk at a
 * time (dllm_optim_state_read, dllm_tf_save).
 * The loss's dlogits are built on the device (dllm_tf_device_forward_logp /
 * dllm_tf_device_backward_logp: the kept forward's head rows keep their targets and
 * log-sum-exps there, only their log-probs come down and dLoss/dlogp per row goes up;
 * the backward makes the logits again a chunk of rows at a time), or, through
 * dllm_tf_backward, uploaded from the host a chunk at a time. Under a bf16 trainer with
 * LoRA the base linears stay packed bf16 (frozen: the backward needs only dX through
 * them, the backend's bf16_linear_bwd_x); its full fine-tuning computes with fp32 linears
 * over the rounded weights, as the host's does (every weight gradient). */
#include "dllm/transformer_device_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

bool tf_device_training(const dllm_tf *m) { return m->dev && m->dev->train; }
bool dllm_tf_device_trains(const dllm_tf *m) { return tf_device_training(m); }

/* The device copy the optimizer updates (the trainer view must be built): the LoRA copy,
 * or the fp32 trainer view, or a bf16 trainer's masters beside its rounded copy. */
static float *dev_trainable(dllm_tf *m)
{
    tf_device *d = m->dev;
    return m->lora_rank ? d->lora : tf_device_fp32(d)->buf;
}

/* The trainable vector's tensors as (host offset, device offset, count) triples; returns
 * their count. seg holds 3 + L * DLLM_NT triples. */
static int segments(dllm_tf *m, size_t (*seg)[3])
{
    tf_device *d = m->dev;
    if (m->lora_rank) {
        seg[0][0] = 0, seg[0][1] = 0, seg[0][2] = m->n_lora;
        return 1;
    }
    const tf_view *v = tf_device_fp32(d);
    int n = 0;
#define SEG(h, dv, cnt)                                                                          \
    do {                                                                                         \
        seg[n][0] = (size_t)((h) - m->params), seg[n][1] = (size_t)((dv) - v->buf);              \
        seg[n][2] = (size_t)(cnt);                                                               \
        n++;                                                                                     \
    } while (0)
    SEG(m->embed, v->embed, (size_t)m->V * m->C);
    for (int l = 0; l < m->L; l++)
        for (int t = 0; t < DLLM_NT; t++)
            if (m->lw[l].t[t])
                SEG(m->lw[l].t[t], v->lw[l].t[t], tf_slot_numel(m, t));
    SEG(m->final_norm, v->final_norm, m->C);
    if (!m->tied)
        SEG(m->head, v->head, (size_t)m->V * m->C);
#undef SEG
    return n;
}

/* The pieces of elements [off, off + n) of the trainable vector, into seg (3 + L *
 * DLLM_NT rows): each piece's offset from off (host order), its offset in the device
 * layout, and its length; returns their count. */
static int range_pieces(dllm_tf *m, size_t off, size_t n, size_t (*seg)[3])
{
    int ns = segments(m, seg), k = 0;
    for (int i = 0; i < ns; i++) { /* k <= i: written over what was read */
        size_t lo = seg[i][0] > off ? seg[i][0] : off;
        size_t hi = seg[i][0] + seg[i][2] < off + n ? seg[i][0] + seg[i][2] : off + n;
        if (lo >= hi)
            continue;
        size_t at = seg[i][1] + (lo - seg[i][0]);
        seg[k][0] = lo - off, seg[k][1] = at, seg[k][2] = hi - lo;
        k++;
    }
    return k;
}

/* Moves the elements [off, off + n) of the trainable vector between a host buffer of n
 * floats (host order) and device memory in the device layout. */
static void transfer_range(dllm_tf *m, float *host, float *dev, size_t off, size_t n, bool up)
{
    dllm_backend *be = m->dev->be;
    size_t(*seg)[3] = dllm_malloc((3 + (size_t)m->L * DLLM_NT) * sizeof *seg);
    int np = range_pieces(m, off, n, seg);
    for (int i = 0; i < np; i++) {
        size_t bytes = seg[i][2] * sizeof(float);
        if (up)
            be->ops->upload(be, dev + seg[i][1], host + seg[i][0], bytes);
        else
            be->ops->download(be, host + seg[i][0], dev + seg[i][1], bytes);
    }
    free(seg);
}

/* A bf16 trainer's rounded copy follows elements [off, off + n) of its masters (the rest
 * is unchanged: a state write a chunk at a time rounds each element once). */
static void follow_range(dllm_tf *m, size_t off, size_t n)
{
    tf_device *d = m->dev;
    if (!d->mv.be)
        return;
    dllm_backend *be = d->be;
    size_t(*seg)[3] = dllm_malloc((3 + (size_t)m->L * DLLM_NT) * sizeof *seg);
    int np = range_pieces(m, off, n, seg);
    for (int i = 0; i < np; i++) { /* the same offset in both views */
        be->ops->copy(be, d->tv.buf + seg[i][1], d->mv.buf + seg[i][1], seg[i][2] * sizeof(float));
        be->ops->round_bf16(be, d->tv.buf + seg[i][1], seg[i][2]);
    }
    free(seg);
}

static void transfer(dllm_tf *m, float *host, float *dev, bool up)
{
    transfer_range(m, host, dev, 0, m->dev->n_train, up);
}

/* The device's copy was updated: a full fine-tune's host masters give their pages back
 * to the system (they read as zeros until a pull writes them again): while it trains
 * here the host holds no copy of the model. LoRA's host base is frozen and read by the
 * rollout copy's merge: kept. */
static void host_copy_stale(dllm_tf *m)
{
    if (m->lora_rank)
        return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)m->params + pg - 1) & ~(pg - 1);
    uintptr_t b = (uintptr_t)(m->params + m->n_params) & ~(pg - 1);
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
}

void tf_device_pull(dllm_tf *m)
{
    if (dllm_tf_device_ahead(m))
        transfer(m, m->lora_rank ? m->lora_params : m->params, dev_trainable(m), false);
}

bool dllm_tf_device_ahead(const dllm_tf *m)
{
    return m->dev && m->dev->train && m->dev->tv.be;
}

/* The AdamW moments carried between the updating backends (up: the host's onto the
 * device where the model starts training there; down: the device's home where it stops),
 * from one trainable layout into the other, so the next step continues the optimizer's
 * trajectory as if it had not moved. None to carry: nothing happens. */
static void moments_carry(dllm_tf *m, bool up)
{
    tf_device *d = m->dev;
    dllm_backend *from = up ? dllm_backend_cpu() : d->be, *to = up ? d->be : dllm_backend_cpu();
    size_t n = m->lora_rank ? m->n_lora : m->n_params;
    /* the full fine-tune's device layout is the fp32 trainer view's (segments()) */
    const tf_view *f32 = tf_device_fp32(d);
    bool mapped = d->n_train == n && (m->lora_rank || (f32->buf && !f32->b16));
    if (!m->adam_m || m->adam_be != from || !mapped)
        return;
    float *om = m->adam_m, *ov = m->adam_v;
    m->adam_m = m->adam_v = NULL, m->adam_be = NULL;
    tf_moments(m, to, n);
    transfer(m, up ? om : m->adam_m, up ? m->adam_m : om, up);
    transfer(m, up ? ov : m->adam_v, up ? m->adam_v : ov, up);
    from->ops->free(from, om);
    from->ops->free(from, ov);
}

void tf_device_train_free(dllm_tf *m)
{
    tf_device *d = m->dev;
    dllm_backend *be = d->be;
    void *bufs[] = {d->g, d->dlog, d->ktgt, d->klp, d->klse, d->kg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    d->klp = d->klse = d->kg = NULL;
    d->ktgt = NULL;
    d->k_cap = 0;
    if (d->mv.be) { /* a bf16 trainer's trainer view packed again at its next use (the
                       host's weights are current: pulled before this is called) */
        tf_view_free_on(m, &d->mv, be);
        tf_view_free_on(m, &d->tv, be);
    }
    if (d->train) { /* the kept activations and the moments are the host's again */
        tf_acts_set_region(m, &m->a, NULL);
        tf_acts_set_region(m, &m->ra, NULL);
        tf_region_free(&d->region, be);
        m->a.be = NULL;
        moments_carry(m, false);
        if (m->adam_be == be) /* not carried: the layout changed (a LoRA change) */
            tf_moments_free(m);
    }
    free(d->glw);
    free(d->gad);
    d->g = d->dlog = NULL;
    d->glw = NULL, d->gad = NULL;
    d->g_embed = d->g_final_norm = d->g_head = NULL;
    d->n_train = 0, d->dlog_rows = 0;
    d->train = false;
}

int dllm_tf_device_train(dllm_tf *m, dllm_err *err)
{
    tf_device *d = m->dev;
    if (!d)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "training on the device: the model is not on a device backend");
    if (d->train)
        return 0;
    /* from here the trainer view is built for training: a bf16 trainer's full fine-tune
     * holds fp32 masters beside the rounded copy instead of packed bf16 linears (the host
     * is current: the device was not ahead) */
    d->train = true;
    if (m->prec.trainer_bf16 && !m->lora_rank)
        tf_view_free_on(m, &d->tv, d->be);
    const tf_view *v = tf_device_masters(m);
    dllm_backend *be = d->be;
    d->n_train = m->lora_rank ? m->n_lora : v->nbuf;
    if (!m->lora_rank && v->nbuf != m->n_params) {
        d->n_train = 0;
        d->train = false;
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "training on the device: the trainer view holds %zu floats, the "
                            "model %zu", v->nbuf, m->n_params);
    }
    size_t bytes = d->n_train * sizeof(float);
    d->g = be->ops->alloc(be, bytes);
    moments_carry(m, true); /* the host's (if any) continue here */
    tf_moments(m, be, d->n_train);
    d->glw = dllm_calloc((size_t)m->L, sizeof *d->glw);
    d->gad = m->lora_rank ? dllm_calloc((size_t)m->L * DLLM_NLIN, sizeof *d->gad) : NULL;
    tf_acts_free(&m->a); /* the kept forward's, in device memory from now on (its backward
                            scratch is allocated by the first backward) */
    m->a.be = be;
    /* the kept forward and the forwards without backward never need their activations
     * at once: one region, as large as the larger of the two, instead of both */
    tf_acts_set_region(m, &m->a, &d->region);
    tf_acts_set_region(m, &m->ra, &d->region);
    return 0;
}

/* The gradient pointers into g for the current trainer view (its buffers are reused
 * across syncs, but rebuilt after a precision change). */
static void grad_pointers(dllm_tf *m)
{
    tf_device *d = m->dev;
    const tf_view *v = tf_device_fp32(d); /* the gradients' layout: the trainable copy's */
    if (m->lora_rank) {
        for (int k = 0; k < m->L * DLLM_NLIN; k++) {
            const tf_lora *a = &d->ad[k];
            d->gad[k] = (tf_lora){(float *)a->A, (float *)a->B, NULL, NULL, a->in, a->out};
            if (a->A) {
                d->gad[k].dA = d->g + (a->A - d->lora);
                d->gad[k].dB = d->g + (a->B - d->lora);
            }
        }
        return;
    }
    for (int l = 0; l < m->L; l++)
        for (int t = 0; t < DLLM_NT; t++)
            d->glw[l].t[t] = v->lw[l].t[t] ? d->g + (v->lw[l].t[t] - v->buf) : NULL;
    d->g_embed = d->g + (v->embed - v->buf);
    d->g_final_norm = d->g + (v->final_norm - v->buf);
    d->g_head = m->tied ? d->g_embed : d->g + (v->head - v->buf);
}

/* The backward's target on the device, and d->dlog large enough for one chunk of the kept
 * forward's rows (d->lg_rows: the dlogits are made and consumed a chunk at a time). */
tf_bwd_target tf_device_bwd_target(dllm_tf *m)
{
    tf_device *d = m->dev;
    dllm_backend *be = d->be;
    int rows = m->a.R < d->lg_rows ? m->a.R : d->lg_rows;
    if (rows > d->dlog_rows) {
        if (d->dlog)
            be->ops->free(be, d->dlog);
        d->dlog = be->ops->alloc(be, (size_t)rows * m->V * sizeof(float));
        d->dlog_rows = rows;
    }
    grad_pointers(m);
    return (tf_bwd_target){be, &m->a, &d->tv, d->glw, d->g_embed, d->g_final_norm, d->g_head,
                           m->lora_rank ? d->gad : NULL, tf_rope_on(m, be)};
}

bool tf_device_update(dllm_tf *m, tf_update *u, bool step)
{
    if (!tf_device_training(m))
        return false;
    tf_device *d = m->dev;
    if (step)
        tf_device_view(m, false); /* the trainable copy is current */
    *u = (tf_update){d->be, step ? dev_trainable(m) : NULL, d->g, NULL, NULL, d->n_train};
    return true;
}

void tf_device_updated(dllm_tf *m)
{
    if (tf_device_training(m)) {
        host_copy_stale(m); /* until it is read there */
        tf_device_trainer_follow(m);
    }
}

void dllm_tf_device_grads(dllm_tf *m, float *out)
{
    transfer(m, out, m->dev->g, false);
}

static float *state_vector(dllm_tf *m, dllm_state s)
{
    tf_device *d = m->dev;
    tf_device_view(m, false); /* the layout segments() reads, current */
    if (s != DLLM_STATE_PARAMS)
        tf_moments(m, d->be, d->n_train);
    return s == DLLM_STATE_PARAMS ? dev_trainable(m)
           : s == DLLM_STATE_ADAM_M ? m->adam_m
                                       : m->adam_v;
}

void tf_device_state_move(dllm_tf *m, dllm_state s, size_t off, size_t n, float *host,
                          bool up)
{
    transfer_range(m, host, state_vector(m, s), off, n, up);
    if (up && s == DLLM_STATE_PARAMS) {
        host_copy_stale(m);
        m->a.kept = TF_KEPT_NONE; /* kept for the old values */
        follow_range(m, off, n);
    }
}
