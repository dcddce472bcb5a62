/* transformer_device_impl.h: the device copies of the transformer core, shared by
 * transformer_device.c (placement, views, forwards) and transformer_device_train.c
 * (the kept forward's backward, gradients and AdamW on the device). Not a public
 * interface. */
#ifndef DLLM_TRANSFORMER_DEVICE_IMPL_H
#define DLLM_TRANSFORMER_DEVICE_IMPL_H

#include "dllm/transformer_impl.h"

/* The bytes one chunk of logits rows may take on the device. */
enum { LOGITS_CHUNK_BYTES = 256 << 20, LOGITS_CHUNK_MAX_ROWS = 1024 };

typedef struct {
    dllm_tf *m;
    bool rollout;
} dl_ctx;

struct tf_device {
    dllm_backend *be;
    op_rope_table rope;      /* cos/sin in device memory, as large as the host's */
    tf_view tv;              /* trainer view (tv.be NULL: not built; built into its buffers
                                by its next use, tf_device_view); the rollout copy is the
                                model's (m->rv, in this device's memory; rv.be NULL: none) */
    tf_view mv;              /* a bf16 trainer's full fine-tune training here: the fp32
                                masters (the trainable vector, in tv's layout), tv their
                                bf16-rounded copy, rebuilt after every write (mv.be NULL:
                                none; tv is then the trainable copy) */
    dllm_precision rprec;    /* what m->rv was built for */
    tf_lora *ad;             // (L, NLIN) A/B pointing into lora, or NULL
    float *lora;             // (n_lora) device copy of the LoRA parameters
    size_t n_lora;
    float *stage;            // (largest linear) device staging, fp32
    float *hstage;           // (largest linear) host: one merged weight
    int32_t *h_tok, *h_pos, *h_rows; // (hcap) host input staging
    uint8_t *h_mask;         // (hcap)
    size_t hcap;
    float *lg;               // (lg_cap, V) one chunk of logits, grown up to lg_rows
    int lg_rows, lg_cap;     /* the chunk, and the rows allocated so far */
    int32_t *tgt;            // (lg_cap) a chunk's targets
    float *lp;               // (lg_cap) a chunk's log-probs
    const float *xl[2];      /* device_logits: x_L of the last layers() (NULL once another
                                forward has used m->ra) */
    dl_ctx dl[2];
    /* training on the device (transformer_device_train.c); off until enabled */
    bool train;
    tf_region region;        /* while it trains: the kept forward's activations (m->a) and
                                those of every forward without backward (m->ra) take turns
                                in it */
    float *g;                // (n_train) gradients, in the trainable's device layout
    size_t n_train;
    tf_layer *glw;           // (L) gradient pointers into g (NULL entries: frozen)
    float *g_embed, *g_final_norm, *g_head;
    tf_lora *gad;            // (L, NLIN) A, B of ad with dA, dB into g (LoRA)
    float *dlog;             // (dlog_rows, V) one chunk of dlogits (uploaded, or built here)
    int dlog_rows;           /* at most lg_rows */
    /* the loss gradient's device path (dllm_tf_device_forward_logp): the kept forward's
     * head rows' targets, log-probs and log-sum-exps stay here (the logits are made
     * again, a chunk at a time, by the backward) */
    int32_t *ktgt;           // (k_cap) the head rows' targets
    float *klp, *klse, *kg;  // (k_cap) log-probs, log-sum-exps, dLoss/dlogp
    int k_cap;               /* (ka.kept TF_KEPT_LOGITS: they hold its rows) */
    bool no_fuse_act;        /* the producers leave FP8 / INT8 quantisation and bf16
                                rounding to the linears (tf_device_fuse_act) */
};


/* The view a device forward reads (the host's trainer copy followed, and the trainer
 * view built first where it is not). */
const tf_view *tf_device_view(dllm_tf *m, bool rollout);
/* The trainer's fp32 copy on the device: a bf16 trainer's masters (full fine-tuning
 * training here), otherwise the trainer view itself; tf_device_masters builds it first
 * where it is not. */
static inline const tf_view *tf_device_fp32(const tf_device *d)
{
    return d->mv.be ? &d->mv : &d->tv;
}
const tf_view *tf_device_masters(dllm_tf *m);
/* A bf16 trainer's rounded copy made again from the masters on the device after they were
 * written (an optimizer step, a state write); no-op without masters. */
void tf_device_trainer_follow(dllm_tf *m);
/* Whether the producers (RMSNorm, SwiGLU) of the FP8, INT8 or bf16 rollout copy's linears
 * and of a bf16 trainer's write the codes or bf16 copies those linears read (on, the
 * default) or each linear quantises or rounds its input (off): the same logits and
 * gradients bit for bit, fewer launches and bytes when on. For the tests that compare the
 * two. */
void tf_device_fuse_act(dllm_tf *m, bool on);
/* The buffers of the forwards (transformer_fwd.c), grown to hold: the logits chunk (and
 * its targets and log-probs) for n rows (n <= lg_rows); host staging of n inputs; the
 * kept forward's R head rows' targets, log-probs, log-sum-exps and dLoss/dlogp. */
void tf_device_chunk(dllm_tf *m, int n);
void tf_device_staging(tf_device *d, size_t n);
void tf_device_kept_rows(dllm_tf *m, int R);
/* Frees the training state (gradients, moments, the kept activations: the host's again). */
void tf_device_train_free(dllm_tf *m);


#endif
