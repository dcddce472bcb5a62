/* rl_run.h: opening and closing an RL run, and its checkpoints
 * (RUN_DIR/ckpt/step-N: weights or adapter in HF/PEFT layout, tokenizer.json,
 * optimizer.safetensors with the exact trainable vector and AdamW moments,
 * state.json; ckpt/latest points to the newest complete one). */
#ifndef DLLM_RL_RUN_H
#define DLLM_RL_RUN_H

#include "src/rl/rl.h"

/* The effective config of a run: defaults, then the YAML file (or, with
 * resume_dir, that run's stored RUN_DIR/config.yaml), then the --set
 * assignments, validated. A new run refuses an SFT config. With resume_dir,
 * --set may change only the keys rl_resume_key_ok accepts, and path (when
 * given) must parse to the stored config (after the same --set). */
int rl_config_load(dllm_cfg *cfg, const char *path, const char *resume_dir, const char *const *sets,
                   int nsets, dllm_err *err);
/* Is "key=value" an override a resumed run accepts (grpo.steps, eval.every,
 * log.every, checkpoint.every, checkpoint.keep, task.reward.timeout_s)? */
bool rl_resume_key_ok(const char *assignment);
/* N of a checkpoint directory .../step-N; -1 for another name. */
int rl_run_step_of(const char *ckpt);
/* RUN_DIR/ckpt/<target of ckpt/latest> into ckpt; -1 when there is none. */
int rl_latest_checkpoint(const char *run_dir, char *ckpt, size_t n);

int rl_run_open(rl_run *run, const dllm_cfg *cfg, const char *run_dir, dllm_err *err);
void rl_run_close(rl_run *run);
/* Longest encoded training prompt (the log's prompt width). */
int rl_max_prompt(const rl_run *run);
int rl_checkpoint_save(rl_run *run, int64_t step, dllm_err *err);
/* Restores the trainable vector, AdamW state, alpha and step from a checkpoint. */
int rl_checkpoint_load(rl_run *run, const char *ckpt_dir, dllm_err *err);

#endif
