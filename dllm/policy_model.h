/* policy_model.h: a model the policy (dllm/policy.h) runs that the transformer core
 * does not compute -- an architecture whose descriptor (dllm/arch.h) has `model`. The
 * policy dispatches to this table where it would call the core: the logits at each
 * precision, the backward, the trainable vector with its gradients and optimizer, the
 * rollout copy, autoregressive rollouts, LoRA adapters and checkpoints, on the host or a
 * device. */
#ifndef DLLM_POLICY_MODEL_H
#define DLLM_POLICY_MODEL_H

#include "dllm/ar_sampler.h"
#include "dllm/model_config.h"
#include "dllm/optim.h"
#include "dllm/precision.h"
#include "dllm/qwen35.h"
#include "dllm/safetensors.h"
#include "kernels/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


typedef struct dllm_model_ops {
    /* The model of DIR (config.json, safetensors), or of preset `preset` with seed's
     * random weights (dir NULL), into *impl; its common sizes into *mc. */
    int (*open)(void **impl, const char *dir, const char *preset, uint64_t seed,
                dllm_model_config *mc, dllm_err *err);
    void (*free)(void *impl);
    /* Moves the model (before LoRA and the first sync) to the device backend be, where its
     * forwards, backward and optimizer then run; an input error when it cannot. */
    int (*to_device)(void *impl, dllm_backend *be, dllm_err *err);
    /* LoRA of rank > 0 on the targets named (n 0: every target), scaled alpha / rank, A
     * drawn from seed: the trainable vector becomes the adapters. An unknown target is an
     * input error naming `what` and the target. */
    int (*lora_enable)(void *impl, int rank, double alpha, const char *const *targets, int n,
                       const char *what, uint64_t seed, dllm_err *err);
    /* The rank (0: no LoRA), alpha into *alpha; the targets' names into names [cap], their
     * count into *n (each may be NULL). */
    int (*lora_info)(void *impl, float *alpha, const char **names, int cap, int *n);
    /* The adapters to / from one safetensors file in PEFT's names. */
    int (*lora_save)(void *impl, const char *path, dllm_err *err);
    int (*lora_load)(void *impl, const char *path, dllm_err *err);
    /* logits (dllm_logits_fn's contract: host memory) at the trainer's numerics (rollout
     * false; keep: for backward) or the rollout copy's. */
    int (*logits)(void *impl, bool rollout, bool keep, const int32_t *tokens,
                  const uint8_t *keymask, int B, int T, const int32_t *rows, int n_rows,
                  float *logits);
    void (*backward)(void *impl, const float *dlogits);
    /* the trainable vector, its gradients and the optimizer (dllm/optim.h; impl is its
     * model) */
    const dllm_optim_ops *optim;
    /* the trainable vector was written outside an optimizer step (a swap for scoring): what
     * the trainer computes with follows it (a bf16 trainer's rounded weights) */
    void (*trainer_changed)(void *impl);
    /* rebuilds the rollout copy at p (and the trainer's bf16 copy when p's trainer is bf16)
     * from the trainer's weights, LoRA merged into the rollout copy */
    int (*sync)(void *impl, const dllm_precision *p, dllm_err *err);
    /* autoregressive rollouts at the rollout copy's numerics (dllm/ar_sampler.h) */
    int (*rollout)(void *impl, const int32_t *prompts, const uint8_t *prompt_mask, int B, int P,
                   const dllm_ar_cfg *c, uint64_t seed, dllm_ar_rollout *out, dllm_err *err);
    /* DIR/config.json and weights in the published layout (LoRA merged, fp32 masters) */
    int (*save)(void *impl, const char *dir, st_dtype dtype, dllm_err *err);
} dllm_model_ops;

/* Qwen3.5's (dllm/qwen35_policy.c), and its descriptor's config.json reader and writer
 * (dllm/qwen35_config.c). */
extern const dllm_model_ops qwen35_model_ops;
struct json_t;
struct dllm_arch_desc;
int qwen35_config_read_desc(const struct json_t *root, const char *path, dllm_model_config *cfg,
                            dllm_err *err);
struct json_t *qwen35_config_json_desc(const struct dllm_arch_desc *a,
                                       const dllm_model_config *cfg);
/* The Qwen3.5 preset of mc's sizes ("tiny", "qwen3.5-9b"); NULL if none. */
const char *qwen35_preset_of(const dllm_model_config *mc);

/* The Qwen3.5 config of a model of mc's sizes: DIR/config.json when there, else the preset
 * of those sizes (an input error when none is). */
int qwen35_config_for(const dllm_model_config *mc, const char *dir, qwen35_config *qc,
                      dllm_err *err);

#endif
