/* transformer_impl.h: the transformer core's internals, shared by its files
 * (transformer.c: weights, LoRA, checkpoints; transformer_view.c: precision
 * copies; transformer_fwd.c: forward and backward) and by the model files
 * that extend it (dllm/qwen3.c: KV-cache decoding). Not a public interface. */
#ifndef DLLM_TRANSFORMER_IMPL_H
#define DLLM_TRANSFORMER_IMPL_H

#include "dllm/transformer.h"
#include "kernels/backend.h"
#include "kernels/fp8.h"
#include "kernels/nvfp4.h"
#include "kernels/ops.h"

/* A layer's tensors by slot (dllm/arch.h); NULL where the arch has none (or,
 * in a view, where a packed or quantised matrix replaces a linear). Shapes: q (QD, C), k, v (KD, C),
 * o (C, QD), gate, up (H, C), down (C, H); norms (C), q/k_norm (HD); biases
 * (QD), (KD), (KD). */
typedef struct {
    float *t[DLLM_NT];
} tf_layer;

typedef struct {
    float *A, *B;   // (r, in), (out, r)
    float *dA, *dB; // same shapes
    int in, out;
} tf_lora;

/* What the last forward through a tf_acts left there for a backward. */
typedef enum {
    TF_KEPT_NONE,   /* nothing: no keeping forward since the last change */
    TF_KEPT_ACTS,   /* a keeping forward's activations (its logits went to the caller) */
    TF_KEPT_LOGITS, /* the same, with its rows' targets and log-sum-exps kept beside
                       them in the backend's memory (dllm_tf_device_forward_logp) */
} tf_kept;

typedef struct tf_acts tf_acts;

/* Device memory that two activation sets take turns in: the kept forward's (m->a) and
 * that of every forward without backward (a device's), which never need their contents
 * at the same time. The set that lays its buffers out there last owns it; the other
 * loses its forward buffers (not its backward scratch) and lays them out again at its
 * next forward. */
typedef struct {
    char *base;
    size_t cap;      /* bytes */
    tf_acts *owner;  /* NULL: none */
} tf_region;

/* Activations kept for backward, and backward scratch. */
struct tf_acts {
    dllm_backend *be;          /* whose memory the buffers are (NULL: the host's) */
    tf_region *region;         /* where the forward buffers are (NULL: allocated each) */
    size_t rused;              /* bytes of region laid out (measured, then placed) */
    size_t bwdN, bwdR;         /* rows the backward scratch was sized for */
    bool lost;                 /* another set took the region since this one's forward */
    int B, T, N, R;            /* sizes of the last forward */
    tf_kept kept;              /* what a backward may differentiate */
    bool have_mask;            /* keymask passed to attention (else NULL) */
    bool head_in_xr;           /* the last forward left x_L's head rows in xr (tf_layers_fwd) */
    size_t capN, capAtt, capR; /* allocated for */
    int capL;                  /* layers with kept activations: L, or 1 (no grad), or K */
    int capX;                  /* residual-stream slots (capL + 1, or ceil(L/K) + K) */
    int rk;                    /* the kept forward's recomputation: 0 none, else K (every
                                  K-th layer's input kept, a segment recomputed at a time) */
    int seg;                   /* recomputation: the first layer of the segment whose
                                  activations the K slots hold (-1: none) */
    int32_t *tokens;  // (N)
    uint8_t *keymask; // (N) 0/1
    int32_t *pos;     // (N) RoPE position of row b*T + t
    int pos_T;        /* pos holds row n's n % pos_T for n < pos_N (positions that do not
                         count real tokens): a device forward of the same T leaves them in
                         place instead of uploading them again; 0: unknown */
    size_t pos_N;
    int32_t *rows;    // (R) logits rows
    int32_t *hrows;   // (R) the hidden-state row each logits row reads (shifted logits)
    float *resid;     // (capX, N, C) residual stream entering layer l; [L] = final
                      // (recomputation: the segments' inputs and x_L, then the K - 1
                      // inputs inside a segment: tf_acts_xslot)
    float *n1;        // (L, N, C)
    float *rstd1;     // (L, N)
    float *qr;        // (L, N, QD) q_proj output before q_norm (qk_norm only)
    float *rstdq;     // (L, N*NH)
    float *q;         // (L, N, QD) after [q_norm and] RoPE
    float *kr;        // (L, N, KD)
    float *rstdk;     // (L, N*NKV)
    float *k;         // (L, N, KD)
    float *v;         // (L, N, KD)
    float *att;       // (L, attention state): the backend's (CPU: probabilities B,NH,T,T)
    float *y;         // (L, N, QD) attention output before o_proj
    float *h;         // (L, N, C) residual after attention
    float *n2;        // (L, N, C)
    float *rstd2;     // (L, N)
    float *g, *u, *s; // (L, N, H) gate, up, silu(gate) * up
    float *xa;        // (L, NLIN, N, r) LoRA x A^T (only with LoRA)
    float *xr;        // (R, C) final residual rows
    float *nf;        // (R, C) final_norm(xr)
    float *rstdf;     // (R)
    /* backward scratch (allocated by the first backward) */
    float *dx, *dn;       // (N, C)
    float *dq, *dy, *dqr; // (N, QD)
    float *dk, *dv, *dkr; // (N, KD)
    float *dg, *du, *ds;  // (N, H)
    float *dxa;           // (N, r)
    float *dxr, *dnf;     // (R, C)
};

/* The weights one forward reads, and where it rounds to bf16. */
typedef struct {
    dllm_backend *be;        // whose memory every pointer below is, and which runs the
                             // forward reading it (host views: the model's CPU backend)
    const tf_lora *ad;       // the adapters a device view applies at run time (with lora):
                             // its uploaded copies (host views read m->ad)
    float *buf;              // owned copy (NULL: the master weights)
    const float *embed;      // (V, C)
    const float *final_norm; // (C)
    const float *head;       // (V, C): the view's embed when tied
    tf_layer *lw;            // (L)
    /* the layer linears in a rollout copy's format (at most one set; none: the
     * fp32 weights in lw through the backend's linear_fwd) */
    fp8_matrix *q8;          // (L, NLIN) FP8, or NULL
    nvfp4_matrix *q4;        // (L, NLIN) NVFP4, or NULL
    int8_matrix *qi;         // (L, NLIN) INT8, or NULL
    bf16_matrix *b16;        // (L, NLIN) bf16, or NULL
    bf16_matrix head16;      // the head packed as bf16 (head16.w NULL: the fp32 head)
    bool round_lin;          // bf16 at the layer linears' inputs
    bool lin_rounds;         // with round_lin: the linears round n1, n2 and s as they read
                             // them, forward and backward, and nothing else reads those,
                             // so they are not rounded in place (y is: attention's
                             // backward reads it)
    bool round_head;         // bf16 at the head's input
    bool lora;               // apply the LoRA adapters at run time (the trainer only:
                             // the rollout copies have them merged)
    size_t nbuf;             // floats in buf
    bool buf_mapped;         // buf is reserved address space (a shape-only model's)
    bool fuse_act;           // FP8 / INT8 / bf16 linears read the codes or bf16 copy their
                             // producer (RMSNorm, SwiGLU) wrote, where the backend has
                             // the fused ops
} tf_view;

/* The loop of the denoising sampler over a model on a device (transformer_logits.c). */
typedef struct {
    dllm_tf *m;
    bool rollout;
} tf_dl_ctx;

/* What a model on a device moves a forward's inputs, outputs and weights through, and the
 * chunks of rows it computes there (the device's memory unless marked host); sized by
 * transformer_device.c. */
typedef struct {
    float *stage;              // (largest linear) fp32: one weight on its way up
    float *hstage;             // (largest linear) host: one merged weight
    int32_t *h_tok, *h_pos, *h_rows; // (hcap) host: a forward's inputs built for upload
    uint8_t *h_mask;           // (hcap) host
    size_t hcap;
    float *lg;                 // (lg_cap, V) one chunk of logits, grown up to lg_rows
    int lg_rows, lg_cap;       /* the chunk, and the rows allocated so far */
    int32_t *tgt;              // (lg_cap) a chunk's targets
    float *lp;                 // (lg_cap) a chunk's log-probs
    /* the loss gradient's device path (dllm_tf_device_forward_logp): the kept forward's
     * head rows' targets, log-probs and log-sum-exps stay here (the logits are made
     * again, a chunk at a time, by the backward) */
    int32_t *ktgt;             // (k_cap) the head rows' targets
    float *klp, *klse, *kg;    // (k_cap) log-probs, log-sum-exps, dLoss/dlogp
    int k_cap;                 /* (a.kept TF_KEPT_LOGITS: they hold its rows) */
    float *dlog;               // (dlog_rows, V) one chunk of dlogits (uploaded, or built here)
    int dlog_rows;             /* at most lg_rows */
    const float *xl[2];        /* device_logits: x_L of the last layers() per view (NULL once
                                  another forward has used ra) */
    tf_dl_ctx dl[2];
} tf_io;

/* Where the trainable vector lives while the model is on a device (dllm_tf_to_device): on
 * the device from the moment it trains there with its trainer view built
 * (dllm_tf_device_ahead: the optimizer updates that view, the host's copy is refreshed
 * only by a read), otherwise on the host, the device's copies being built from it. No
 * other state says where: a write on the host drops the device's trainer view
 * (tf_device_host_written), built again from the host's at its next use. */

struct dllm_tf {
    const dllm_arch_desc *arch;
    dllm_backend *be;
    dllm_model_config cfg;
    int C, L, NH, NKV, HD, H, V, QD, KD; /* QD = NH*HD, KD = NKV*HD, V = embedding_size */
    bool tied;

    float *params; // (n_params) HF order
    size_t n_params;
    bool shape_only; /* dllm_tf_create_shape: params is an untouched mapping */
    float *embed;      // (V, C)
    tf_layer *lw;      // (L)
    float *final_norm; // (C)
    float *head;       // (V, C): the head, or embed when tied
    dllm_param *plist;
    int np;

    /* The gradients: one vector (n_train floats) in the layout of the trainable copy the
     * update steps, in grad_be's memory: the host's (the CPU backend's; HF order, or the
     * LoRA vector) or a device's where the model trains there (its trainer copy's
     * layout). Made by the first backward or gradient access where the model trains
     * (tf_ensure_grads, dllm_tf_device_train): a model that is only run or saved never
     * pays for them. NULL: none. */
    float *grad;
    size_t n_train;
    dllm_backend *grad_be;
    /* pointers into grad (NULL where frozen): the base tensors', and the adapters' (dA, dB
     * of the adapter array of grad's side: m->ad on the host, m->dad on a device); on the
     * host the parameter lists' .grad too */
    float *d_embed, *d_final_norm, *d_head;
    tf_layer *lg;      // (L)

    int lora_rank, lora_mask;
    float lora_alpha, lora_scale; /* scale = alpha / rank */
    float *lora_params;
    size_t n_lora;
    float *adam_m, *adam_v; // (trainable) AdamW moments in adam_be's memory and the layout of
                            // the trainable copy it updates, made (zero) by their first use
    dllm_backend *adam_be;  /* the updating backend they belong to: the host's (the CPU
                               backend) or the device's (dllm_tf_device_train) */
    tf_lora *ad; // (L, NLIN) the host's adapters; A == NULL where not targeted
    dllm_param *llist;
    int nl;

    /* Everything below is in the memory of the backend the model runs on: the host's
     * (dev NULL), or the device's (dllm_tf_to_device, transformer_device.c). */
    dllm_backend *dev;    /* the device every forward runs on, or NULL: the host */
    op_rope_table rope;   /* cos/sin (grown by tf_rope_grow) */
    tf_acts a;            /* trainer activations (the kept forward's), in a.be's memory: the
                             host's, or the device's while the model trains there */
    dllm_precision prec;  /* last applied by dllm_tf_rollout_sync */
    tf_view tv;           /* trainer: the master weights or their bf16 copy on the host; on a
                             device its copy there (tv.be NULL: not built; built into its
                             buffers by its next use, tf_device_view) */
    tf_view mv;           /* a bf16 trainer's full fine-tune training on a device: its fp32
                             masters there (the trainable vector, in tv's layout), tv their
                             rounded copy, made again after every write (mv.be NULL: none;
                             the host's masters are its weights) */
    tf_view rv;           /* rollout copy (unused under rollout "trainer") */
    tf_acts ra;           /* activations of the rollout forward; on a device, of every forward
                             without backward (rollouts and scoring at both views, one call at
                             a time: one set sized by the widest) */
    bool decode_rollout;  /* KV-cache decoding (dllm/qwen3.c) reads the rollout copy */
    int recompute;        /* kept forwards: 0 keep every layer, K recompute (dllm_tf_set_recompute) */
    bool no_fuse_act;     /* a device's FP8 / INT8 / bf16 linears quantise or round their own
                             inputs instead of their producers (tf_device_fuse_act) */
    /* on a device: the LoRA copy its trainer view applies (the host's is the master) */
    float *dlora;         // (n_dlora)
    size_t n_dlora;
    tf_lora *dad;         // (L, NLIN) A, B into dlora; dA, dB into grad while it trains there
    tf_io io;
    /* training on a device (transformer_device_train.c): the kept forward, the backward and
     * the update there, from its first kept forward (dllm_tf_device_train) for as long as
     * its gradients are there (tf_device_training) */
    tf_region region;     /* while it trains: the kept forward's activations (a) and those of
                             every forward without backward (ra) take turns in it */
};

#define TF_FALLOC(n) ((float *)dllm_malloc(((size_t)(n) + 1) * sizeof(float)))

/* The inputs of a forward computed on the host: token ids, key mask (0/1), RoPE
 * positions, logits rows and the hidden row each reads (shifted logits); returns
 * whether attention needs the key mask. Any output may be NULL. */
bool tf_inputs(const dllm_tf *m, int B, int T, int R, const int32_t *tokens,
               const uint8_t *keymask, const int32_t *rows, int32_t *o_tokens, uint8_t *o_mask,
               int32_t *o_pos, int32_t *o_rows, int32_t *o_hrows);

/* ---- the model on a device (transformer_device.c) ---- */
/* The bytes one chunk of logits rows may take on the device. */
enum { LOGITS_CHUNK_BYTES = 256 << 20, LOGITS_CHUNK_MAX_ROWS = 1024 };
/* Rebuilds the device views from the current weights at m->prec (called by
 * dllm_tf_rollout_sync when the model is on a device). */
int tf_device_sync(dllm_tf *m, dllm_err *err);
/* Frees everything in the device's memory; the model is the host's again. */
void tf_device_free(dllm_tf *m);
/* The view a device forward reads (the trainer view built first where it is not). */
const tf_view *tf_device_view(dllm_tf *m, bool rollout);
/* The trainer's fp32 copy on the device: a bf16 trainer's masters (full fine-tuning
 * training there), otherwise the trainer view itself; tf_device_masters builds it first
 * where it is not. */
static inline const tf_view *tf_device_fp32(const dllm_tf *m)
{
    return m->mv.be ? &m->mv : &m->tv;
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
/* The buffers of the forwards (m->io), grown to hold: the logits chunk (and its targets and
 * log-probs) for n rows (n <= lg_rows); host staging of n inputs; the kept forward's R head
 * rows' targets, log-probs, log-sum-exps and dLoss/dlogp. */
void tf_device_chunk(dllm_tf *m, int n);
void tf_device_staging(dllm_tf *m, size_t n);
void tf_device_kept_rows(dllm_tf *m, int R);
/* Frees the training state (gradients, moments, the kept activations: the host's again). */
void tf_device_train_free(dllm_tf *m);
/* Pull: the device's trainable copy down into the host's where the device is where it
 * lives (no-op otherwise): what the host reads is current. */
void tf_device_pull(dllm_tf *m);
/* The host's trainable vector was written (a state write, a host step with a device's
 * copies beside it, a LoRA load): where it lived on the device, the host's now; the
 * device's trainer copy is dropped (built again from the host's by its next use) and the
 * kept forward with it. No-op without a device. */
void tf_device_host_written(dllm_tf *m);
/* The host's trainable tensors are handed out to be written (dllm_tf_params, LoRA
 * changes): pulled, then tf_device_host_written. */
void tf_device_host_access(dllm_tf *m);
/* What one optimizer step reads and writes, all in be's memory and one layout: the
 * trainable vector, its gradients and the AdamW moments (n floats each). */
typedef struct {
    dllm_backend *be;
    float *p, *g, *m, *v;
    size_t n;
} tf_update;
/* The device's trainable copy and gradients when the model trains there: true; false
 * otherwise (the host's are the update's). With `step` the trainable copy is made
 * current and p set; without, p is NULL (zeroing or summing the gradients needs only g).
 * The moments are the model's (tf_moments). */
bool tf_device_update(dllm_tf *m, tf_update *u, bool step);
/* The AdamW moments (n floats each) in be's memory: made there (zero) when there are
 * none, or when they belong to another backend (whose are dropped; the device's training
 * carries them across before it gets here, dllm_tf_device_train / leaving the device). */
void tf_moments(dllm_tf *m, dllm_backend *be, size_t n);
void tf_moments_free(dllm_tf *m);
/* The device's trainable copy was written (optimizer step, checkpoint): the host's is
 * stale (a full fine-tune's host pages are given back). */
void tf_device_updated(dllm_tf *m);
/* Elements [off, off + n) of state s (trainable order) between a host buffer and the
 * device's copy (up: host to device). */
void tf_device_state_move(dllm_tf *m, dllm_state s, size_t off, size_t n, float *host,
                          bool up);

/* Training on the device (transformer_device_train.c): whether the kept forward, the
 * backward and the optimizer step run there. */
bool tf_device_training(const dllm_tf *m);

/* What a backward reads and writes, all in be's memory: the kept activations, the
 * weights it differentiates through (straight-through under a bf16 trainer), the
 * gradients (NULL where frozen) and the adapters with theirs. */
typedef struct {
    dllm_backend *be;
    tf_acts *a;
    const tf_view *w;
    const tf_layer *lg;                     // (L) gradient pointers
    float *d_embed, *d_final_norm, *d_head; /* d_head == d_embed when tied */
    const tf_lora *ad;                      // (L, NLIN) A, B, dA, dB; NULL without LoRA
    const op_rope_table *rope;              /* in be's memory */
} tf_bwd_target;
/* What the backward on the device reads and writes (its gradients, the trainer view
 * there), its dlogits chunk grown to fit the kept forward's rows. */
tf_bwd_target tf_device_bwd_target(dllm_tf *m);
/* Recomputation: the activations of the segment ending at layer l from its kept input
 * (the forward's ops), into the K slots (transformer_fwd.c, for the backward). */
void tf_recompute_segment(dllm_tf *m, const tf_bwd_target *t, int l);
/* The backward of the last keeping forward into t, in parts, for dlogits made or moved a
 * chunk of rows at a time (in t->be's memory): begin (the scratch,
 * the head rows' gradients zeroed), head (rows r0 .. r0 + n - 1 of dlogits, (n, V) at
 * dlogits, into their dnf rows and d_head), rest (final norm, scatter, the layers). */
void tf_backward_begin(dllm_tf *m, const tf_bwd_target *t);
void tf_backward_head(dllm_tf *m, const tf_bwd_target *t, int r0, int n, const float *dlogits);
void tf_backward_rest(dllm_tf *m, const tf_bwd_target *t);

/* dst (out, in) = W + (alpha/r) B A for linear j of layer l (W alone without an
 * adapter there), on the host: the weight a rollout copy is built from. */
void tf_merged_weight(const dllm_tf *m, int l, int j, float *dst);

/* (out, in) of linear j. */
void tf_lin_shape(const dllm_tf *m, int j, int *out, int *in);
/* Length of per-layer tensor slot t. */
size_t tf_slot_numel(const dllm_tf *m, int t);
/* Grows the RoPE table to npos positions. */
void tf_rope_grow(dllm_tf *m, int npos);
/* The view a forward without backward reads wherever the model runs: the trainer's or
 * the rollout copy (on a device, its copies there). */
const tf_view *tf_fwd_view(dllm_tf *m, bool rollout);
/* The view a rollout forward reads on the host (the trainer's under rollout "trainer"). */
const tf_view *tf_rollout_view(const dllm_tf *m);
/* The layer linears' format in a view tf_view_build makes. */
typedef enum { TF_LIN_F32, TF_LIN_BF16, TF_LIN_FP8, TF_LIN_NVFP4, TF_LIN_INT8 } tf_lin_fmt;
/* What tf_view_build makes, and from what. */
typedef struct {
    dllm_backend *be;    /* whose memory the view is in; its pack_weight packs the linears */
    bool round;          /* every tensor but the packed linears rounded to bf16 */
    tf_lin_fmt lin;      /* the layer linears: fp32 in the view's buffer, or packed (p's
                            settings) */
    bool merge;          /* LoRA merged into the linears (a rollout copy) */
    bool head16;         /* the head packed as bf16 too */
    bool head32;         /* ... keeping its fp32 copy (a backward, or a host forward, reads
                            it; always without head16) */
    const tf_view *from; /* an fp32 view in be's memory, LoRA off, to copy and pack from:
                            nothing crosses (a full fine-tune training on a device); NULL:
                            the host's weights */
    float *stage;        /* (largest linear) be's memory: a host matrix on its way to be
                            (NULL on the host) */
    float *hstage;       /* (largest linear) host: one merged weight (NULL: allocated) */
} tf_view_spec;
/* v = the weights as s says, in s->be's memory: one builder for the host's copies and a
 * device's. Reuses v's buffers when their sizes are unchanged (the rebuild after every
 * optimizer step). */
int tf_view_build(dllm_tf *m, tf_view *v, const tf_view_spec *s, const dllm_precision *p,
                  dllm_err *err);
/* Floats in the largest layer linear. */
size_t tf_max_linear(const dllm_tf *m);
/* Frees a view's copies in be's memory (tf_view_free: in its own backend's, or the
 * host's). */
void tf_view_free_on(const dllm_tf *m, tf_view *v, dllm_backend *be);
void tf_view_free(const dllm_tf *m, tf_view *v);
void tf_view_master(dllm_tf *m, tf_view *v);
/* The host's trainer view follows its weights written outside a step's sync (a swap for
 * scoring): a bf16 trainer's rounded copy is made again. */
void tf_trainer_follow(dllm_tf *m);
void tf_acts_free(tf_acts *a);
/* Attaches a to region r (its buffers freed; r grown to hold them at a's sizes, as a
 * set keeps its sizes), or detaches it (r NULL); a keeps its backend. */
void tf_acts_set_region(dllm_tf *m, tf_acts *a, tf_region *r);
/* Gives back r's memory (its sets lose their forward buffers) and resets it. */
void tf_region_free(tf_region *r, dllm_backend *be);
/* The residual-stream slot of layer l's input in a kept forward's set at recomputation K
 * (0: every layer's); the backward scratch sized for the kept forward (transformer_bwd.c
 * uses both). */
size_t tf_acts_xslot(const dllm_tf *m, int K, int l);
void tf_acts_ensure_bwd(dllm_tf *m, tf_acts *a);
/* The host's gradients (zero), made where there are none on the host (a device's are
 * dropped: the caller trains on the host). */
void tf_ensure_grads(dllm_tf *m);
/* Frees the gradients wherever they are, every pointer into them NULL. */
void tf_grads_free(dllm_tf *m);

/* out (N, out) = inp W^T [+ scale (inp A^T) B^T] for linear j of layer l, W
 * read through v (FP8: the W8A8 GEMM, NVFP4: the W4A4 one, bf16: the bf16 linear); xa (N, r) receives inp A^T (needed
 * when v applies LoRA there). No bias. */
void tf_lin_fwd(const dllm_tf *m, const tf_view *v, int l, int j, float *out, const float *inp,
                int N, float *xa);
/* Linear j of layer l in v's packed or quantised format (every pointer NULL: fp32). */
dllm_lin_weight tf_lin_weight(const tf_view *v, int l, int j);

/* One layer's forward buffers (inside a tf_acts): x in, xn out, the rest
 * outputs; qr == q and kr == k without qk_norm; xa + j * xa_stride receives
 * linear j's LoRA product. */
typedef struct {
    const float *x;
    float *xn;
    float *n1, *rstd1, *qr, *rstdq, *q, *kr, *rstdk, *k, *v, *att, *y, *h, *n2, *rstd2;
    float *g, *u, *s;
    float *xa;
    size_t xa_stride;
    /* set: the attention is tf_batch_attention, which rotates q and k at these positions
     * itself (rope_attention_fwd; a kept forward's backward through rope_attention_bwd);
     * NULL: layer_fwd rotates them before the hook */
    const int32_t *rope_pos;
} tf_layer_io;
/* Attention of layer l: io->y from io->q, io->k, io->v (after RoPE, or rotating them at
 * io->rope_pos when that is set). */
typedef void (*tf_attn_fn)(dllm_tf *m, int l, tf_layer_io *io, void *ctx);
/* Sizes a's buffers for B*T rows, R head rows and `layers` layers of kept
 * activations (L for training; 1 without backward, the residual stream then
 * alternating between two slots). */
void tf_acts_ensure(dllm_tf *m, tf_acts *a, int B, int T, int R, int layers);
/* tf_acts_ensure for a forward that keeps its activations for the backward (keep) at the
 * model's recomputation (dllm_tf_set_recompute: every layer's, or each K-th layer's input
 * and K layers' slots), or for one without backward (!keep: one slot). */
void tf_acts_ensure_fwd(dllm_tf *m, tf_acts *a, int B, int T, int R, bool keep);
/* The embedding of a->tokens and the L layers at a->pos (a->N rows; keep:
 * every layer's activations, else one slot), attention by attn; returns x_L
 * (N, C) inside a. head_rows (a forward without backward that reads only the a->R < N
 * head rows a->hrows of x_L): the last layer runs its keys and values over every row and
 * the rest over those rows alone, returning x_L's head rows (R, C), in order, in a->xr
 * (a->head_in_xr set); bit for bit the rows of the whole forward. */
const float *tf_layers_fwd(dllm_tf *m, tf_acts *a, const tf_view *v, bool keep, tf_attn_fn attn,
                           void *ctx, bool head_rows);
/* Whether a forward without backward at view v (rollout: the rollout copy's) runs its last
 * layer past the attention over the head rows alone (tf_layers_fwd's head_rows): the
 * rollout copy's forwards -- the sampler's and its scores, where the cost is. Their rows
 * are the whole forward's rows bit for bit where the products are row by row (the packed
 * and quantised copies), up to the last bits where a GEMM library picks its kernels by the
 * row count (fp32), as any change of batch does; the trainer's forwards keep the whole
 * last layer, as its kept forward (and so its gradient's replay) computes it. Not NVFP4
 * nor FP8 with tensor scaling: their activations' scale is one per tensor, so the rows
 * present set it. */
bool tf_head_rows_at(const tf_view *v, bool rollout);
/* logits (R, V) = head(final_norm(xr)) at v's numerics (nf, rstdf: outputs). */
void tf_head_fwd(dllm_tf *m, const tf_view *v, const float *xr, float *nf, float *rstdf, int R,
                 float *logits);
/* logits (R, V) = head(nf): tf_head_fwd's product alone, on its nf (rounded there). */
void tf_head_logits(dllm_tf *m, const tf_view *v, const float *nf, int R, float *logits);

/* Full-sequence attention over the batch of the activations ctx (a tf_acts). */
void tf_batch_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx);

#endif
