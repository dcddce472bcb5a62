/* transformer.h: the transformer core -- one implementation of the model
 * family described by dllm/arch.h (LLaDA, Qwen3, ...), fp32 master weights
 * with a bf16 trainer option and bf16 / FP8 rollout copies (dllm/precision.h),
 * LoRA, forward (train / nograd / rollout) and backward, named parameters in
 * the HF / PEFT layout. Every op runs through the model's backend
 * (kernels/backend.h).
 *
 * Parameters live in one allocation carved into named pointers (torch layout
 * [out, in], HF state_dict order as the descriptor gives it). With LoRA
 * enabled the base weights are frozen and the trainable vector is the LoRA
 * A/B matrices only; otherwise it is every parameter. Gradients accumulate
 * across dllm_tf_backward calls until dllm_optim_zero_grad.
 *
 * These host allocations are the CPU backend's memory. With the model on a
 * device (dllm_tf_to_device) the model's views, RoPE table, activations and,
 * when the update runs there, the trainable vector, gradients and AdamW
 * moments are in the device's memory (the same fields, transformer_impl.h);
 * the host keeps the master weights, and checkpoints stream from wherever the
 * trainable vector lives. */
#ifndef DLLM_TRANSFORMER_H
#define DLLM_TRANSFORMER_H

#include "dllm/arch.h"
#include "dllm/device_logits.h"
#include "dllm/model_config.h"
#include "dllm/optim.h"
#include "dllm/precision.h"
#include "dllm/safetensors.h"
#include "kernels/backend.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dllm_tf dllm_tf;

/* One named parameter (HF / PEFT name), for checkpoints, adapters and tests. */
typedef struct {
    char name[96];    /* "model.transformer.blocks.0.q_proj.weight" or the PEFT
                         "base_model.model.model.transformer.blocks.0.q_proj.lora_A.weight" */
    float *data;      /* inside the model's one parameter allocation */
    float *grad;      /* inside the host's gradient vector; NULL when frozen (base
                         weights under LoRA), not yet allocated (made by the first
                         dllm_optim_grads, dllm_optim_zero_grad or dllm_tf_backward on
                         the host) or while the model trains on a device (its gradients
                         are there: dllm_tf_device_grads) */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* torch layout: [out, in] */
    size_t numel;
} dllm_param;

/* Random initialisation of cfg's architecture (dllm_arch_get(cfg->arch)):
 * norms 1, everything else N(0, 0.02), deterministic for a seed (one stream
 * per tensor and chunk, so independent of the thread count). */
dllm_tf *dllm_tf_create(const dllm_model_config *cfg, uint64_t seed);
/* The same for an explicit descriptor (an architecture not in model_config). */
dllm_tf *dllm_tf_create_arch(const dllm_arch_desc *a, const dllm_model_config *cfg,
                             uint64_t seed);
/* A model of cfg's shapes without values, for the recording backend
 * (kernels/record/record.h): its weights are address space never written (they read as
 * zeros, and no host memory backs them until something writes), LoRA merges are skipped,
 * so an 8B model costs the host almost nothing. It runs the real code paths on a
 * recording backend; its numbers mean nothing. NULL (err set) on a bad config. */
dllm_tf *dllm_tf_create_shape(const dllm_model_config *cfg, dllm_err *err);
/* 0 if cfg has the sizes the descriptor needs; else an input error naming `where`. */
int dllm_tf_check_config(const dllm_arch_desc *a, const dllm_model_config *cfg,
                         const char *where, dllm_err *err);
/* Loads DIR (config.json + safetensors, single or sharded; any supported
 * dtype); config.json's model_type picks the architecture. A tied checkpoint
 * that still carries the head tensor is read through the embedding. */
int dllm_tf_load(dllm_tf **out, const char *dir, dllm_err *err);
/* The same with the architecture given (NULL: model_type's), for a
 * descriptor model_config does not name; config.json supplies the sizes. */
int dllm_tf_load_arch(dllm_tf **out, const dllm_arch_desc *a, const char *dir, dllm_err *err);
/* Writes DIR/config.json + safetensors in the HF layout (no head tensor when
 * tied), dtype ST_F32 or ST_BF16, sharded above max_shard_bytes (0 = one
 * file). With LoRA the merged weights are written. */
int dllm_tf_save(dllm_tf *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
                 dllm_err *err);
void dllm_tf_free(dllm_tf *m);
const dllm_model_config *dllm_tf_config(const dllm_tf *m);
const dllm_arch_desc *dllm_tf_arch(const dllm_tf *m);

/* LoRA on the targets in `mask` (LORA_* bits): W' = W + (alpha/rank) B A,
 * A [rank, in] ~ kaiming-uniform as PEFT, B [out, rank] = 0. rank <= 0 or
 * mask 0: off. Only layer linears carry adapters, never the head. */
void dllm_tf_lora_enable(dllm_tf *m, int rank, float alpha, int mask, uint64_t seed);

/* ---- the optimizer: one state, wherever the model trains ---- */
/* The trainable vector (the parameters, or the adapters under LoRA), its gradients and
 * the AdamW moments (dllm/optim.h) live in the memory of the backend that updates them:
 * the host's (the CPU backend), or the device's once the model trains there
 * (dllm_tf_device_train); the moments start again when the trainable vector changes (a
 * LoRA enable) and move with the update when it starts or stops running on a device. On
 * a device the copy there is the master after a step or a state write. */
dllm_optim dllm_tf_optim(dllm_tf *m);
/* The trainable parameters were written outside a step's sync (dllm_optim_state_write of
 * the whole vector: a swap for scoring under other weights): a bf16 trainer's rounded copy
 * on the host follows (a device's copies followed at the write). The rollout copy is left
 * as it was. */
void dllm_tf_trainer_changed(dllm_tf *m);

/* Forward over tokens [B,T] (keymask [B,T], 1 = real token, NULL = all real;
 * left padding for the archs counting real tokens for RoPE). Logits [n_rows,
 * V] (V = embedding_size) only for the flat rows (b*T + t) listed in rows
 * (NULL: all B*T rows) -- exact, and it saves most of the head's cost.
 * Activations are kept for dllm_tf_backward. The signature of dllm_logits_fn. */
int dllm_tf_forward(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                    const int32_t *rows, int n_rows, float *logits);
/* The same logits, keeping nothing for backward: one layer of activations
 * instead of L (rollouts, scoring). A following dllm_tf_backward is an error. */
int dllm_tf_forward_nograd(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B,
                           int T, const int32_t *rows, int n_rows, float *logits);
/* Forward-only at rollout numerics (nograd-style memory; on the host in buffers of its
 * own, so the trainer's kept activations survive it; on a device that trains, every
 * forward without backward takes turns with the kept forward in one region of device
 * memory: a backward must follow its kept forward with no forward between, else it
 * stops, naming it). */
int dllm_tf_forward_rollout(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B,
                            int T, const int32_t *rows, int n_rows, float *logits);
/* log softmax(logits)[target] for the rows (as dllm_tf_forward_nograd's rows, or at
 * the rollout copy's numerics when `rollout`) without a [n_rows, V] logits tensor: the
 * head runs a chunk of rows at a time (64 on the host; a device's logits chunk),
 * followed by the backend's log-softmax (xent_fwd: fp32, online log-sum-exp), so
 * logp (n_rows) equals the logits' log-softmax up to fp32 rounding. Temperature 1. On
 * a device only the log-probs are downloaded. Input errors as the forward's. */
int dllm_tf_target_logp(dllm_tf *m, bool rollout, const int32_t *tokens, const uint8_t *keymask,
                        int B, int T, const int32_t *rows, const int32_t *targets, int n_rows,
                        float *logp);
/* Backward of the last dllm_tf_forward: dlogits [n_rows, V]; accumulates into
 * the gradients (tied: the head's part lands in the embedding's gradient). */
void dllm_tf_backward(dllm_tf *m, const float *dlogits);
/* Activation recomputation of the forwards kept for the backward (host and device):
 * every = 0 keeps every layer's activations; every = K keeps the input of layers 0, K,
 * 2K, ... and the activations of K layers, and the backward recomputes a segment of K
 * layers from its input before differentiating it (the same ops in the same order: the
 * gradients are bit-identical to every = 0; the last segment's activations are the
 * forward's own). K >= L: one segment, nothing recomputed. Negative: an input error. */
int dllm_tf_set_recompute(dllm_tf *m, int every);
/* Number of activation floats kept for backward at the last forward's size. */
size_t dllm_tf_activation_floats(const dllm_tf *m);

/* ---- named parameters ---- */
/* The base parameters in HF order; *out points into the model. Returns the count. */
int dllm_tf_params(dllm_tf *m, const dllm_param **out);
/* The LoRA parameters (A then B per targeted linear, layer by layer, PEFT
 * names); returns 0 (and *out = NULL) when LoRA is off. */
int dllm_tf_lora_params(dllm_tf *m, const dllm_param **out);
/* LoRA settings of m: returns the rank (0 = off); alpha and mask may be NULL. */
int dllm_tf_lora_info(const dllm_tf *m, float *alpha, int *mask);
/* PEFT adapter file <-> the enabled LoRA parameters (F32, every tensor present). */
int dllm_tf_lora_load(dllm_tf *m, const char *path, dllm_err *err);
int dllm_tf_lora_save(dllm_tf *m, const char *path, dllm_err *err);

/* ---- precision (dllm/precision.h) ---- */
/* Applies p and (re)builds the trainer's bf16 copy and the rollout copy from
 * the current weights. Call it after every weight change (optimizer step,
 * adapter load, LoRA enable) when the trainer is bf16 or the rollout is not
 * "trainer". *seconds (may be NULL) receives its wall time. A model never
 * synced computes at fp32 with rollout "trainer". */
int dllm_tf_rollout_sync(dllm_tf *m, const dllm_precision *p, double *seconds, dllm_err *err);
/* The precision last applied by dllm_tf_rollout_sync. */
dllm_precision dllm_tf_get_precision(const dllm_tf *m);
/* One layer linear of the rollout copy on its own: out (N, out) = linear
 * `name` (a LoRA target name of the arch) of `layer` applied to inp (N, in),
 * exactly as dllm_tf_forward_rollout computes it (for tests and benchmarks;
 * without the bias). Returns DLLM_EXIT_INPUT for an unknown name or layer. */
int dllm_tf_rollout_linear(dllm_tf *m, int layer, const char *name, const float *inp, int N,
                           float *out);

/* ---- a device backend (transformer_device.c) ---- */
/* Places the model's forwards on be (NULL or the CPU backend: back on the host): the
 * trainer view (fp32, or packed bf16 under a bf16 trainer; LoRA at run time), the
 * rollout copy (packed bf16, FP8 or INT8, LoRA merged; built on the device from the
 * uploaded weights), the RoPE table and the activations; the host keeps the masters as
 * loaded until the model trains there (below). dllm_tf_rollout_sync refreshes the device
 * copies after every weight change. Every forward then runs on the device (host tokens
 * in, the requested rows' logits downloaded); the first kept one (dllm_tf_forward)
 * starts its training there (dllm_tf_device_train). An nvfp4 rollout is refused
 * (DLLM_EXIT_INPUT: no device NVFP4 linear); on failure the model stays on the host. */
int dllm_tf_to_device(dllm_tf *m, dllm_backend *be, dllm_err *err);
/* The device backend the model is on, or NULL (host). */
dllm_backend *dllm_tf_device(const dllm_tf *m);
/* The device interface (dllm/device_logits.h) to the model on its device, at the
 * trainer view's numerics (rollout false) or the rollout copy's; valid until the model
 * leaves the device or is freed. Ids are trusted (not range-checked on the device). An
 * input error when the model is not on a device. */
int dllm_tf_device_logits(dllm_tf *m, bool rollout, dllm_device_logits *out, dllm_err *err);
/* Rows of the one logits chunk a model on a device keeps for vocabulary V (256 MiB of
 * fp32 logits, at most 1024 rows): also the device sampler's max_rows. */
int dllm_tf_device_chunk_rows(int V);

/* ---- training on the device (transformer_device_train.c) ---- */
/* From now on dllm_tf_forward keeps its activations on the device (the logits of its rows
 * come down), dllm_tf_backward uploads the dlogits and runs there, and the gradients and
 * AdamW moments live in device memory: dllm_optim_zero_grad, dllm_optim_grad_buffer,
 * dllm_optim_step and dllm_optim_state_* act there (dllm_optim_grads is then NULL: the
 * host's gradients are dropped, the model's one gradient vector is the device's). The
 * device's trainable copy is then the trainable vector: nothing comes down per step (the
 * host's is stale, dllm_tf_device_ahead, until something on the host reads it:
 * dllm_optim_trainable downloads it; a full fine-tune's host masters give their pages
 * back to the system after each step). The rollout copy is built on the device from it (full
 * fine-tuning) or from the host's frozen base and the adapters, which are small;
 * checkpoints stream it tensor by tensor (dllm_tf_save, dllm_optim_state_read). Under a
 * bf16 trainer LoRA's frozen base linears stay packed bf16 (they pass only dX back) and
 * a full fine-tune keeps fp32 masters beside the rounded copy the forward reads. Ended
 * by leaving the device or a LoRA change. */
int dllm_tf_device_train(dllm_tf *m, dllm_err *err);
bool dllm_tf_device_trains(const dllm_tf *m);
/* Whether the trainable vector lives on the device (it trains there, its trainer copy
 * built): the host's copy is refreshed only by a read. */
bool dllm_tf_device_ahead(const dllm_tf *m);
/* The gradients (out: the trainable vector's length and order, as dllm_optim_grads). */
void dllm_tf_device_grads(dllm_tf *m, float *out);
/* The loss gradient computed on the device (temperature 1). dllm_tf_device_forward_logp
 * is dllm_tf_forward's kept forward whose logits rows stay in device memory: only their
 * log-probs of targets (n_rows) come down (fp32: the backend's xent_fwd, as
 * dllm_tf_target_logp's). dllm_tf_device_backward_logp then runs the backward of
 * g = dLoss/dlogp (n_rows, host) through them: dlogits = g (onehot - softmax), built on
 * the device by xent_bwd, so 2 n_rows floats cross instead of 2 n_rows V. Input errors
 * as the forward's; also one when the model does not train on a device. */
int dllm_tf_device_forward_logp(dllm_tf *m, const int32_t *tokens, const uint8_t *keymask, int B,
                                int T, const int32_t *rows, const int32_t *targets, int n_rows,
                                float *logp);
void dllm_tf_device_backward_logp(dllm_tf *m, const float *g);

#endif
