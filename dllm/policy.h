/* policy.h: one interface over the models the RL loop trains (docs/DESIGN.md,
 * "The policy interface"). The loop never asks whether the model is a
 * masked-diffusion LLaDA or an autoregressive Qwen3; it sees
 *   - logits callbacks at two precisions: TRAIN (the trainer: fp32, or bf16
 *     rounding on the CPU) and ROLLOUT (the rollout copy: the trainer's own
 *     numerics for the reference arm, bf16, or FP8 W8A8 blockwise);
 *   - rollouts (denoising sampler or AR decoding) made at ROLLOUT precision;
 *   - the trainable vector, its gradients, and the backward of TRAIN logits;
 *   - sync_rollout: rebuild the rollout copy from the trainer weights (LoRA
 *     merged first) after every optimizer step. */
#ifndef DLLM_POLICY_H
#define DLLM_POLICY_H

#include "dllm/arch.h"
#include "dllm/lik_plan.h"
#include "dllm/model_config.h"
#include "dllm/safetensors.h"
#include "dllm/dream_sampler.h"
#include "dllm/sampler.h"
#include "dllm/transformer.h"
#include "kernels/backend.h"

/* TRAIN: trainer numerics, activations kept for dllm_policy_backward; ROLLOUT: the
 * rollout copy; TRAIN_NOGRAD: trainer numerics (the same logits as TRAIN), nothing
 * kept -- one layer of activations instead of all (scoring, evaluation). */
typedef enum { DLLM_PREC_TRAIN = 0, DLLM_PREC_ROLLOUT = 1, DLLM_PREC_TRAIN_NOGRAD = 2 } dllm_prec;

typedef struct {
    const char *path;        /* model directory, or NULL/"" for a preset */
    const char *preset;      /* tiny | small | llada-8b | qwen3-8b | dream-7b (with arch) */
    const char *arch;        /* llada | qwen3 | dream (ignored with a path: config.json decides) */
    uint64_t seed;           /* preset initialisation and LoRA init */
    int lora_rank;           /* 0: full fine-tuning */
    double lora_alpha;
    const char *const *lora_targets; /* HF module names */
    int n_lora_targets;
    const char *trainer;     /* fp32 | bf16 */
    const char *rollout;     /* trainer | bf16 | fp8 | fp8-exact | nvfp4 | int8 */
    const char *fp8_format;  /* e4m3 | e5m2 */
    const char *fp8_scaling; /* block | channel | tensor */
    bool fp8_pow2_scale;
    const char *int8_scaling; /* channel (NULL, "") | block */
    const char *nvfp4_scaling; /* block16 (NULL, "") | block32 | channel | tensor */
    const char *device;      /* cpu (NULL, "") | cuda: where the model runs
                                (dllm_tf_to_device): rollouts and scoring, and the update
                                where the run's trainer allows it there (COMMANDS.md,
                                "The device flag") */
    const char *device_flag; /* the flag or key that named device, for messages (NULL:
                                "device") */
    /* `plan`'s recording (src/plan/plan_memory.h): a model of these dimensions without
     * values (dllm_tf_create_shape; path, preset and arch ignored) on this backend
     * (device ignored); its rollout copy is built there. NULL: neither. */
    const dllm_model_config *shape;
    dllm_backend *backend;
} dllm_policy_cfg;

typedef struct dllm_policy dllm_policy;

int dllm_policy_open(dllm_policy **out, const dllm_policy_cfg *c, dllm_err *err);
/* device cpu (NULL or "": *be = NULL) or cuda (*be = dllm_backend_cuda()); an input
 * error naming `flag` for another value, or for cuda without a usable CUDA backend
 * (saying why: dllm_backend_cuda_why). */
int dllm_policy_device_parse(const char *device, const char *flag, dllm_backend **be,
                             dllm_err *err);
/* The trainable vector was written outside an optimizer step's sync
 * (dllm_optim_state_write of the whole vector: a swap for scoring): what the trainer
 * computes with follows it (a bf16 trainer's rounded weights). */
void dllm_policy_trainer_changed(dllm_policy *p);
/* The device backend the policy's model is on (NULL: the host). */
dllm_backend *dllm_policy_device(const dllm_policy *p);
void dllm_policy_free(dllm_policy *p);

dllm_arch dllm_policy_arch(const dllm_policy *p);
bool dllm_policy_is_diffusion(const dllm_policy *p);
/* How its rollouts decode (the architecture's sampler family, dllm/arch.h). */
dllm_sampler_family dllm_policy_sampler(const dllm_policy *p);
const dllm_model_config *dllm_policy_config(const dllm_policy *p);
/* True when the rollout copy computes exactly what the trainer computes
 * (rollout: trainer), so w = 1 exactly. */
bool dllm_policy_rollout_is_trainer(const dllm_policy *p);

/* Logits callback and its context for a precision (for the sampler and the
 * likelihood plans). TRAIN keeps activations for dllm_policy_backward. */
dllm_logits_fn dllm_policy_logits(dllm_policy *p, dllm_prec prec, void **ctx);
/* The fused log-prob callback (dllm_tf_target_logp) for a precision other than TRAIN
 * when the model is on a device (only log-probs cross to the host), else NULL: on the
 * host the likelihoods keep their double log-softmax of the logits. */
dllm_logp_fn dllm_policy_logp(dllm_policy *p, dllm_prec prec, void **ctx);
/* Backward of the last TRAIN forward (dllm_backward_fn-compatible; ctx from
 * dllm_policy_logits(p, DLLM_PREC_TRAIN, &ctx)). */
void dllm_policy_backward(void *ctx, const float *dlogits);
/* When the model trains on a device: the TRAIN forward that leaves its logits there and
 * returns the rows' log-probs (dllm_tf_device_forward_logp), for
 * dllm_lik_plan_backward_logp with dllm_policy_backward_logp; else NULL (the host builds
 * the dlogits). */
dllm_logp_fn dllm_policy_train_logp(dllm_policy *p, void **ctx);
void dllm_policy_backward_logp(void *ctx, const float *g);

/* The trainable vector, its gradients and the optimizer of the model, wherever it trains
 * (dllm/optim.h), for every architecture. */
dllm_optim dllm_policy_optim(dllm_policy *p);
/* Forwards that keep activations for a backward keep every K-th layer's input and
 * recompute the rest (dllm_tf_set_recompute); an input error for a model that keeps
 * its own. */
int dllm_policy_set_recompute(dllm_policy *p, int every);

/* Rebuilds the rollout copy (and the trainer's bf16 copy) from the current
 * weights; returns its wall time in seconds through *seconds (may be NULL). */
int dllm_policy_sync_rollout(dllm_policy *p, double *seconds, dllm_err *err);

/* Rollouts at ROLLOUT precision. prompts (B, P) left-padded, prompt_mask (B, P)
 * (NULL: no padding). Diffusion: the denoising sampler; AR: temperature/top-p
 * decoding with a KV cache (commit_step[t] = t, commit_prob = the sampling
 * probability of token t). */
int dllm_policy_rollout(dllm_policy *p, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                        int P, const dllm_sampler_cfg *sc, double top_p, uint64_t seed,
                        dllm_rollout *out, dllm_err *err);
/* The same sampler family at the trainer view's numerics (no gradient): LLaDA's
 * denoising sampler (on the device when the model is there) or Dream's; diffusion
 * architectures only (AR decoding at the trainer's numerics is the caller's). */
int dllm_policy_sample_trainer(dllm_policy *p, const int32_t *prompts, const uint8_t *prompt_mask,
                               int B, int P, const dllm_sampler_cfg *sc, double top_p,
                               uint64_t seed, dllm_rollout *out, dllm_err *err);

/* Dream's sampler settings for the rollouts that follow (alg, eps, alg_temp,
 * top_k; top_p comes with each dllm_policy_rollout call). Default: those of
 * the train keys rollout.dream.* (maskgit_plus, eps 1e-3, alg_temp 0, top_k
 * off). Ignored by other archs. */
void dllm_policy_set_dream(dllm_policy *p, const dllm_dream_cfg *d);

/* HF weights (LoRA merged), and PEFT adapters. */
int dllm_policy_save(const dllm_policy *p, const char *dir, st_dtype dtype, dllm_err *err);
int dllm_policy_save_adapter(const dllm_policy *p, const char *dir, dllm_err *err);
int dllm_policy_load_adapter(dllm_policy *p, const char *dir, dllm_err *err);
bool dllm_policy_has_lora(const dllm_policy *p);

/* The policy's model (the transformer core, dllm/transformer.h), for callers
 * that need more than this interface (benchmarks, tests); NULL for an architecture
 * with a model of its own (dllm_arch_in_core false). */
struct dllm_tf *dllm_policy_model(dllm_policy *p);

#endif
