/* mem_plan_run.h: a run's shapes for the device plans, from its config -- what `plan
 * --phase` and `plan --time` model and what `train` checks before it starts, so that
 * the three read one run the same way. */
#ifndef DLLM_MEM_PLAN_RUN_H
#define DLLM_MEM_PLAN_RUN_H

#include "src/plan/mem_plan.h"
#include "src/plan/mem_plan_device.h"

/* The run's trainer and rollout precision and its LoRA targets (bit j: block linear j). */
int mem_run_precision(const dllm_cfg *cfg, const dllm_model_config *mc, dllm_precision *prec,
                      int *lora_mask, dllm_err *err);
/* The config's train.recompute into o (K at or above the layers: one segment, as the run
 * clamps it). */
void mem_run_recompute(const dllm_cfg *cfg, const dllm_model_config *mc, mem_plan_opts *o);
/* The device path's shapes of one step on one of o->ranks ranks: every sequence of the
 * rank decoded together (or o->rollout_batch), o->micro_batch canvases per scoring and
 * update forward (default min(64, the rank's sequences)), o->prompt_tokens of prompt,
 * the update on the device where the run takes it there. */
int mem_dev_shape_of_run(mem_dev_shape *s, const dllm_cfg *cfg, const dllm_model_config *mc,
                         const mem_plan_opts *o, dllm_err *err);

#endif
