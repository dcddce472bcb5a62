/* plan_memory.h: the device memory of a run on the GPU path, recorded rather than
 * modelled. The run's device work -- the model put on the device as rl_run_open does
 * (views, LoRA, the rollout copy, the device trainer), one step's rollout, its scoring at
 * the rollout copy and at the trainer, the update (kept forward, backward, clip and
 * AdamW, the rollout copy's rebuild) and the next step's rollout -- runs through the
 * policy at the run's shapes on a shape-only model over the recording backend
 * (kernels/record/record.h), which mirrors the CUDA backend's allocations. The peak is
 * the most device bytes allocated at once; the items are the bytes live at that moment
 * by the part of the work that allocated them. Under the CUDA emulation the emulated
 * allocator's peak for the same work equals it to the byte (tests/unit/test_plan_device.c).
 *
 * The rollout's counts are the sampler's schedule (the recording computes nothing): every
 * sequence's block masked as the plain schedule leaves it, Dream's as its timesteps do,
 * autoregressive decoding to the full length. The train phase ends with the evaluation's
 * greedy rollouts (rl_evaluate's batches); autoregressive decoding at the trainer's
 * numerics (a forward of the whole prefix per token) is recorded at its last forward,
 * the largest, since its buffers only grow. */
#ifndef DLLM_PLAN_MEMORY_H
#define DLLM_PLAN_MEMORY_H

#include "dllm/model_config.h"
#include "dllm/policy.h"
#include "dllm/sampler.h"
#include "kernels/record/record.h"
#include "src/config/yaml_config.h"
#include "src/plan/mem_plan.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { PM_ROLLOUT = 0, PM_SCORE, PM_TRAIN } pm_phase;
extern const char *const pm_phase_names[3];

typedef struct {
    dllm_policy_cfg pc;          /* numerics and LoRA (its targets, shape and backend set
                                    when recorded) */
    char targets[16][64];        /* LoRA target names (n: pc.n_lora_targets) */
    dllm_sampler_cfg sc;         /* the rollout's sampler */
    dllm_dream_cfg dream;
    double top_p;
    int B;                       /* sequences decoded together */
    int P;                       /* prompt tokens */
    int S;                       /* sequences per rank and step: scored and updated */
    int mb;                      /* canvases per scoring and update forward */
    int recompute;               /* train.recompute's K (0: every layer kept) */
    /* the evaluation's rollouts (train phase): eval_B prompts of P tokens with esc at
     * eval_prec, after the step (rl_evaluate's batches); off when eval is false */
    bool eval;
    dllm_sampler_cfg esc;
    int eval_B;
    dllm_prec eval_prec;
} pm_shape;

#define PM_MAX_ITEMS 32

typedef struct {
    pm_phase phase;
    rec_tag_bytes items[PM_MAX_ITEMS]; /* live at the peak, by what allocated them */
    int n;
    int64_t peak;
    bool update;                 /* the update ran on the device */
    double wall_s;               /* how long the recording took */
} pm_plan;

/* The run's shapes from its config and the plan options (ranks, prompt tokens,
 * micro-batch, rollout batch, recomputation). Input errors name the key or flag. */
int pm_shape_of_run(pm_shape *s, const dllm_cfg *cfg, const dllm_model_config *mc,
                    const mem_plan_opts *o, dllm_err *err);

/* The phase's device work on an open policy p (on a device); allocations tagged when that
 * device is a recording backend. *update: whether the update ran on the device. */
int pm_work(dllm_policy *p, const pm_shape *s, pm_phase ph, bool *update, dllm_err *err);

/* The phase's work recorded on a shape-only model of mc. */
int pm_record(const dllm_model_config *mc, const pm_shape *s, pm_phase ph, pm_plan *out,
              dllm_err *err);

/* The items and the peak (GB and bytes), and against cap (0: none) whether it fits. */
void pm_print(const pm_plan *p, const char *what, int64_t cap, FILE *f);
void pm_print_json(const pm_plan *p, const char *what, int64_t cap, FILE *f);

/* The first single change that fits cap: recomputation per layer, then the micro-batch
 * halved, then the rollout batch halved, each recorded; "--micro-batch 16 (peak 36.10
 * GB)" into buf. Returns 1 if one was found. */
int pm_suggest(const dllm_model_config *mc, const pm_shape *s, pm_phase ph, int64_t cap,
               char *buf, size_t n);

/* `sft`'s device memory: the model, the device trainer, one batch's forward and backward
 * of B sequences of T tokens (every position after the first scored, the most a batch
 * scores) and AdamW; with validation (sft.eval_every > 0) the checkpoint it evaluates,
 * opened beside the trained model as `sft` does, decoding `eval_B` prompts of P tokens with
 * the eval sampler. */
typedef struct {
    dllm_policy_cfg pc;          /* numerics and LoRA of the trained model */
    char targets[16][64];
    int B, T;
    bool eval;
    dllm_sampler_cfg esc;
    int eval_B, P;
} pm_sft_shape;

int pm_sft_shape_of(pm_sft_shape *s, const dllm_cfg *cfg, const dllm_model_config *mc,
                    int prompt_tokens, dllm_err *err);
/* The work on an open policy p (on a device); the validation model is opened with
 * eval_cfg. *update: whether the update ran on the device. */
int pm_work_sft(dllm_policy *p, const pm_sft_shape *s, const dllm_policy_cfg *eval_cfg,
                bool *update, dllm_err *err);
/* Recorded on shape-only models of mc; out->phase is PM_TRAIN. */
int pm_record_sft(const dllm_model_config *mc, const pm_sft_shape *s, pm_plan *out,
                  dllm_err *err);

/* The input error of a plan over cap: the phase's peak, its three largest items, the keys
 * and flags that shrink them, and the first single change that fits (pm_suggest). */
int pm_does_not_fit(const pm_plan *p, const dllm_model_config *mc, const pm_shape *s,
                    int64_t cap, dllm_err *err);

#endif
