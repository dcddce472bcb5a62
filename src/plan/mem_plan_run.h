/* mem_plan_run.h: a run's numerics and recomputation from its config, read one way by
 * `plan` (its recorded memory, plan_memory.h, and --time) and by `train`'s check. */
#ifndef DLLM_MEM_PLAN_RUN_H
#define DLLM_MEM_PLAN_RUN_H

#include "src/plan/mem_plan.h"
#include "dllm/precision.h"

/* The run's trainer and rollout precision and its LoRA targets (bit j: block linear j). */
int mem_run_precision(const dllm_cfg *cfg, const dllm_model_config *mc, dllm_precision *prec,
                      int *lora_mask, dllm_err *err);
/* The config's train.recompute into o (K at or above the layers: one segment, as the run
 * clamps it). */
void mem_run_recompute(const dllm_cfg *cfg, const dllm_model_config *mc, mem_plan_opts *o);
#endif
