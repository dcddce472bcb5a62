/* mem_plan_device.h: what the device path of today holds on the device
 * (dllm/transformer_device.c, dllm/transformer_device_train.c, dllm/sampler.c,
 * the CUDA backend), for the phases it runs there: rollouts, scoring without
 * gradients, or a training run's both with the update on the device (gradients, AdamW
 * moments, the kept forward and its backward). `dllm-rl plan --phase` prints it; the
 * emulation build checks it against the allocator's measured peak
 * (tests/unit/test_plan_device.c). mem_plan.h is the full GPU design instead. */
#ifndef DLLM_MEM_PLAN_DEVICE_H
#define DLLM_MEM_PLAN_DEVICE_H

#include "dllm/model_config.h"
#include "dllm/precision.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { MEM_DEV_ROLLOUT = 0, MEM_DEV_SCORE, MEM_DEV_TRAIN } mem_dev_phase;

typedef struct {
    dllm_precision prec;     /* trainer and rollout copy */
    int lora_rank;           /* 0: none */
    int lora_mask;           /* targets: bit j for block linear j (LORA_ALL) */
    /* rollouts (ROLLOUT, TRAIN): B sequences of P prompt + G generated tokens */
    int B, P, G;
    bool cfg;                /* rollout.cfg_scale > 0 (LLaDA: two canvases) */
    bool random_remask;      /* rollout.remasking random (LLaDA) */
    /* scoring (SCORE, TRAIN): one forward of sB canvases of sT tokens, sR scored rows */
    int sB, sT, sR;
    bool score_rollout;      /* SCORE: at the rollout copy (else the trainer view) */
    /* TRAIN: the update on the device (dllm_tf_device_train: an fp32 trainer, or LoRA
     * under a bf16 one), one kept forward of uB canvases of uT tokens, uR rows, and its
     * backward, at recompute (dllm_tf_set_recompute: 0 every layer kept, K every K-th) */
    bool update;
    int uB, uT, uR;
    int recompute;
} mem_dev_shape;

#define MEM_DEV_MAX_ITEMS 32

typedef struct {
    char name[64];
    int64_t bytes;
    bool transient;          /* freed at the end of its call (the device sampler's) */
    char formula[160];
} mem_dev_item;

typedef struct {
    mem_dev_phase phase;
    mem_dev_item items[MEM_DEV_MAX_ITEMS];
    int n;
    int64_t kept;            /* allocated once and kept while the model is on the device */
    int64_t peak;            /* kept + the transient items */
    int64_t fixed;           /* of them: the cuBLASLt and backend workspaces */
    int64_t backend_ws;      /* the CUDA backend's workspace as it grows to, with its
                                buffer of fused FP8 activations */
    int64_t update;          /* of kept: the update's own items (0: not on the device) */
} mem_dev_plan;

extern const char *const mem_dev_phase_names[3];

/* The itemised device bytes. Input errors (an nvfp4 rollout: no device linear; a
 * non-positive shape; a device update of full fine-tuning under a bf16 trainer, which
 * dllm_tf_device_train refuses) name the key. */
int mem_plan_device(mem_dev_plan *p, const dllm_model_config *mc, const mem_dev_shape *s,
                    mem_dev_phase ph, dllm_err *err);

void mem_plan_device_print(const mem_dev_plan *p, const char *what, int64_t cap, FILE *f);

#endif
