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
#include "dllm/transformer_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

bool tf_device_training(const dllm_tf *m) { return m->dev && m->grad && m->grad_be == m->dev; }
bool dllm_tf_device_trains(const dllm_tf *m) { return tf_device_training(m); }

/* The device copy the optimizer updates (the trainer view must be built): the LoRA copy,
 * or the fp32 trainer view, or a bf16 trainer's masters beside its rounded copy. */
static float *dev_trainable(dllm_tf *m)
{
    return m->lora_rank ? m->dlora : tf_device_fp32(m)->buf;
}

/* The trainable vector's tensors as (host offset, device offset, count) triples; returns
 * their count. seg holds 3 + L * DLLM_NT triples. */
static int segments(dllm_tf *m, size_t (*seg)[3])
{
    if (m->lora_rank) {
        seg[0][0] = 0, seg[0][1] = 0, seg[0][2] = m->n_lora;
        return 1;
    }
    const tf_view *v = tf_device_fp32(m);
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
    dllm_backend *be = m->dev;
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
    if (!m->mv.be)
        return;
    dllm_backend *be = m->dev;
    size_t(*seg)[3] = dllm_malloc((3 + (size_t)m->L * DLLM_NT) * sizeof *seg);
    int np = range_pieces(m, off, n, seg);
    for (int i = 0; i < np; i++) { /* the same offset in both views */
        be->ops->copy(be, m->tv.buf + seg[i][1], m->mv.buf + seg[i][1], seg[i][2] * sizeof(float));
        be->ops->round_bf16(be, m->tv.buf + seg[i][1], seg[i][2]);
    }
    free(seg);
}

static void transfer(dllm_tf *m, float *host, float *dev, bool up)
{
    transfer_range(m, host, dev, 0, m->n_train, up);
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
    return tf_device_training(m) && m->tv.be;
}

/* The AdamW moments carried between the updating backends (up: the host's onto the
 * device where the model starts training there; down: the device's home where it stops),
 * from one trainable layout into the other, so the next step continues the optimizer's
 * trajectory as if it had not moved. None to carry: nothing happens. */
static void moments_carry(dllm_tf *m, bool up)
{
    dllm_backend *from = up ? dllm_backend_cpu() : m->dev, *to = up ? m->dev : dllm_backend_cpu();
    size_t n = m->lora_rank ? m->n_lora : m->n_params;
    /* the full fine-tune's device layout is the fp32 trainer view's (segments()) */
    const tf_view *f32 = tf_device_fp32(m);
    bool mapped = m->n_train == n && (m->lora_rank || (f32->buf && !f32->b16));
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
    dllm_backend *be = m->dev;
    bool trained = tf_device_training(m);
    void *bufs[] = {m->io.dlog, m->io.ktgt, m->io.klp, m->io.klse, m->io.kg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    m->io.dlog = NULL;
    m->io.klp = m->io.klse = m->io.kg = NULL;
    m->io.ktgt = NULL;
    m->io.k_cap = 0;
    if (m->mv.be) { /* a bf16 trainer's trainer view packed again at its next use (the
                       host's weights are current: pulled before this is called) */
        tf_view_free_on(m, &m->mv, be);
        tf_view_free_on(m, &m->tv, be);
    }
    if (trained) { /* the kept activations and the moments are the host's again */
        tf_acts_set_region(m, &m->a, NULL);
        tf_acts_set_region(m, &m->ra, NULL);
        tf_region_free(&m->region, be);
        m->a.be = NULL;
        moments_carry(m, false);
        if (m->adam_be == be) /* not carried: the layout changed (a LoRA change) */
            tf_moments_free(m);
        tf_grads_free(m); /* the host's are made by their next use */
    }
    m->io.dlog_rows = 0;
}

int dllm_tf_device_train(dllm_tf *m, dllm_err *err)
{
    if (!m->dev)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "training on the device: the model is not on a device backend");
    if (tf_device_training(m))
        return 0;
    /* from here (its gradients are here, the host's dropped) the model trains here, and the
     * trainer view is built for training: a bf16 trainer's full fine-tune holds fp32
     * masters beside the rounded copy instead of packed bf16 linears (the host is current:
     * the device was not ahead) */
    dllm_backend *be = m->dev;
    tf_grads_free(m);
    size_t n = m->lora_rank ? m->n_lora : m->n_params;
    m->grad = be->ops->alloc(be, n * sizeof(float));
    m->grad_be = be;
    m->n_train = n;
    if (m->prec.trainer_bf16 && !m->lora_rank)
        tf_view_free_on(m, &m->tv, m->dev);
    const tf_view *v = tf_device_masters(m);
    if (!m->lora_rank && v->nbuf != m->n_params) {
        tf_grads_free(m);
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "training on the device: the trainer view holds %zu floats, the "
                            "model %zu", v->nbuf, m->n_params);
    }
    moments_carry(m, true); /* the host's (if any) continue here */
    tf_moments(m, be, m->n_train);
    tf_acts_free(&m->a); /* the kept forward's, in device memory from now on (its backward
                            scratch is allocated by the first backward) */
    m->a.be = be;
    /* the kept forward and the forwards without backward never need their activations
     * at once: one region, as large as the larger of the two, instead of both */
    tf_acts_set_region(m, &m->a, &m->region);
    tf_acts_set_region(m, &m->ra, &m->region);
    return 0;
}

/* The gradient pointers into the device's gradients for the current trainer view (its
 * buffers are reused across syncs, but rebuilt after a precision change). */
static void grad_pointers(dllm_tf *m)
{
    const tf_view *v = tf_device_fp32(m); /* the gradients' layout: the trainable copy's */
    if (m->lora_rank) {
        for (int k = 0; k < m->L * DLLM_NLIN; k++) {
            tf_lora *a = &m->dad[k];
            a->dA = a->A ? m->grad + (a->A - m->dlora) : NULL;
            a->dB = a->A ? m->grad + (a->B - m->dlora) : NULL;
        }
        return;
    }
    for (int l = 0; l < m->L; l++)
        for (int t = 0; t < DLLM_NT; t++)
            m->lg[l].t[t] = v->lw[l].t[t] ? m->grad + (v->lw[l].t[t] - v->buf) : NULL;
    m->d_embed = m->grad + (v->embed - v->buf);
    m->d_final_norm = m->grad + (v->final_norm - v->buf);
    m->d_head = m->tied ? m->d_embed : m->grad + (v->head - v->buf);
}

/* The backward's target on the device, and m->io.dlog large enough for one chunk of the kept
 * forward's rows (m->io.lg_rows: the dlogits are made and consumed a chunk at a time). */
tf_bwd_target tf_device_bwd_target(dllm_tf *m)
{
    dllm_backend *be = m->dev;
    int rows = m->a.R < m->io.lg_rows ? m->a.R : m->io.lg_rows;
    if (rows > m->io.dlog_rows) {
        if (m->io.dlog)
            be->ops->free(be, m->io.dlog);
        m->io.dlog = be->ops->alloc(be, (size_t)rows * m->V * sizeof(float));
        m->io.dlog_rows = rows;
    }
    grad_pointers(m);
    return (tf_bwd_target){be, &m->a, &m->tv, m->lg, m->d_embed, m->d_final_norm, m->d_head,
                           m->lora_rank ? m->dad : NULL, &m->rope};
}

bool tf_device_update(dllm_tf *m, tf_update *u, bool step)
{
    if (!tf_device_training(m))
        return false;
    if (step)
        tf_device_view(m, false); /* the trainable copy is current */
    *u = (tf_update){m->dev, step ? dev_trainable(m) : NULL, m->grad, NULL, NULL, m->n_train};
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
    transfer(m, out, m->grad, false);
}

static float *state_vector(dllm_tf *m, dllm_state s)
{
    tf_device_view(m, false); /* the layout segments() reads, current */
    if (s != DLLM_STATE_PARAMS)
        tf_moments(m, m->dev, m->n_train);
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
