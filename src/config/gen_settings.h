/* gen_settings.h: the generation settings a checkpoint was trained for,
 * CKPT/generation.json, so `generate` and `eval` sample a model the way its
 * training saw it without flags (flags still override). The file:
 *   {"sampler": "denoising" | "autoregressive",
 *    "gen_length": N, "block_length": N, "steps": N,   (denoising schedule)
 *    "temperature": T, "remasking": "low_confidence" | "random",
 *    "top_p": P, "chat": "plain" | "llada" | "qwen3" | "qwen2.5" | "qwen3.5" | "auto",
 *    "dream": {"alg": "origin" | "maskgit_plus" | "topk_margin" | "entropy",
 *              "eps": E, "alg_temp": A, "top_k": K},   (Dream models only)
 *    "task": {"name": "sudoku", "format": "plain" | "d1", "max_blanks": B,
 *             "n_numbers": K, "reward": "task" | "correct"}}
 *                                     (the task settings the model was trained on:
 *                                      every train checkpoint; sft when its config
 *                                      sets task.*; `eval --task` of that task uses them)
 * Every key is optional when read: a missing one keeps the caller's default.
 * block_length and steps are written for either sampler (an autoregressive
 * model ignores them; Dream's sampler reads steps, not block_length). Dream's
 * sampler takes the top-level top_p as its nucleus; "dream" holds the rest of
 * its settings (dllm/dream_sampler.h). */
#ifndef DLLM_GEN_SETTINGS_H
#define DLLM_GEN_SETTINGS_H

#include "dllm/dream_sampler.h"
#include "kernels/base.h"
#include "src/config/yaml_config.h"

#include <stdbool.h>

typedef struct {
    bool diffusion;
    int gen_length, block_length, steps;
    double temperature, top_p;
    char remasking[32];
    char chat[16];
    bool dream;          /* the "dream" object: written when set, set when read */
    dllm_dream_cfg dcfg; /* its alg, eps, alg_temp, top_k (top_p: the field above) */
    bool has_task;       /* the "task" object: written when set, set when read */
    struct {
        int name;        /* cfg_task */
        int format;      /* cfg_task_format */
        int max_blanks, n_numbers;
        int reward;      /* cfg_reward */
    } task;
} ckpt_generation;

/* Writes DIR/generation.json. */
int ckpt_write_generation(const char *dir, const ckpt_generation *g, dllm_err *err);

/* Reads DIR/generation.json into *g, keeping g's values for absent keys.
 * Returns 0 when read, -1 when the file does not exist (g untouched), or an
 * input error (naming the file and key) for a malformed file. */
int ckpt_read_generation(const char *dir, ckpt_generation *g, dllm_err *err);

/* The settings of a masked-diffusion or autoregressive model trained on answers
 * of gen_length tokens (EOS included): one block, two tokens per denoising step
 * (the quickstart's measured schedule: 34 tokens in 17 steps), greedy. */
void ckpt_generation_default(ckpt_generation *g, bool diffusion, int gen_length);

/* The settings a run config evaluates with (eval.gen_length, .block_length,
 * .steps, .temperature; chat: the run's chat format name, e.g. "plain"), for a
 * trainer's checkpoints: ckpt_generation_from_cfg(&g, cfg, diffusion, chat);
 * ckpt_write_generation(ckpt_dir, &g, err). */
void ckpt_generation_from_cfg(ckpt_generation *g, const dllm_cfg *cfg, bool diffusion,
                              const char *chat);

/* Records cfg's task settings (task.name, .format, .max_blanks, .n_numbers,
 * .reward) in g: what prompts the model was trained on and how it was rewarded. */
void ckpt_generation_set_task(ckpt_generation *g, const dllm_cfg *cfg);

/* Applies g's recorded task settings to cfg (none recorded: nothing). */
void ckpt_generation_apply_task(const ckpt_generation *g, dllm_cfg *cfg);

/* Marks g as a Dream model's settings and records cfg's rollout.dream.* (alg,
 * eps, alg_temp, top_k) and rollout.top_p: the sampler the run trained with. */
void ckpt_generation_set_dream(ckpt_generation *g, const dllm_cfg *cfg);

#endif
