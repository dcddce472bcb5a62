/* yaml_config.h: experiments from YAML into a typed struct.
 *
 * One table (the key table in yaml_config.c) names every key: dotted path, type, default,
 * range or choices, and where it lives in dllm_cfg. The reader (libyaml
 * document API) walks the file, rejects unknown keys, checks types and ranges,
 * and reports every error as "file:line:col: message" with the offending line
 * echoed. `--set a.b.c=value` overrides go through the same checks. */
#ifndef DLLM_YAML_CONFIG_H
#define DLLM_YAML_CONFIG_H

#include "kernels/base.h"

#define CFG_STR_MAX 512
#define CFG_LIST_MAX 16

typedef struct {
    int n;
    char items[CFG_LIST_MAX][64];
} cfg_str_list;

typedef struct {
    char experiment[128];
    long seed;
    char device[8];          /* cpu | cuda */
    struct {
        char path[CFG_STR_MAX];  /* model directory (HF layout); empty: use preset */
        char preset[32];         /* tiny | small | llada-8b | qwen3-8b */
        char arch[16];           /* llada | qwen3 (with a path: from config.json) */
        char dtype[8];           /* f32 | bf16: checkpoint dtype written */
        char trainer_precision[8]; /* fp32 | bf16: bf16 rounds weights and activations (CPU) */
        struct {
            int rank;            /* 0 = full fine-tuning */
            double alpha;
            cfg_str_list targets;
        } lora;
    } model;
    struct {
        char name[32];           /* countdown | sudoku | gsm8k | math500 */
        struct { char path[CFG_STR_MAX]; int n; } train; /* path empty: generator with n items */
        struct { char path[CFG_STR_MAX]; } eval;          /* path empty: generator, held out */
        int n_numbers;           /* countdown generator: 3 or 4 */
        int max_blanks;          /* sudoku generator */
        char format[16];         /* d1 (reasoning/answer tags) | plain */
        char chat[16];           /* auto | plain | llada | qwen3 */
        char reward[16];         /* task: the task's reward | correct: 1 if correct, else 0 */
    } task;
    struct {
        char precision[16];      /* trainer | bf16 | fp8 | fp8-exact | nvfp4 */
        struct { char format[8]; char scaling[16]; int pow2_scale; } fp8;
        int group_size;
        int gen_length, block_length, steps;
        double temperature;
        char remasking[24];      /* low_confidence | random */
        double cfg_scale;
        int logits_eos_inf, confidence_eos_eot_inf;
        double top_p;            /* AR backend */
    } rollout;
    struct {
        double temperature;
        int mc_samples;
        int shrink;
    } likelihood;
    struct {
        int steps, prompts_per_step, inner_steps;
        char logp_estimator[16]; /* one_step | elbo | trajectory (AR: exact) */
        double p_mask_prompt;
        char ratio[16];          /* sequence | token */
        double clip_eps, beta;
        int ref_sync_every;
        char loss_agg[16];       /* seq_mean | token_mean */
        char advantage_scale[8]; /* std | none */
        int fresh_masks;
    } grpo;
    struct {
        char method[8];          /* none | is | tis | mis | fixed | ais */
        char estimator[16];      /* one_step | elbo | trajectory */
        char level[16];          /* sequence | geo | token */
        double cap, fixed_alpha;
        struct {
            char combine[16];    /* linear | logistic */
            char noise[8];       /* debias | none: elbo estimator noise in ESS and nu */
            struct { double reliability, divergence, variance; } weights;
            double tau_delta, bias, eta, alpha_min, alpha_max;
        } ais;
    } correction;
    struct {
        char train[CFG_STR_MAX]; /* JSONL {"prompt": ..., "answer": ...} */
        int max_len;             /* prompt + answer tokens; longer pairs are an error */
        int answer_length;       /* EOS-pad every answer to this many tokens (0: no) */
    } data;
    struct {
        int steps;
        int batch_size;
        int chat;                /* wrap prompts in the model's chat format */
    } sft;
    struct {
        double lr;
        int warmup;
        double betas[2];
        double eps;
        double weight_decay;
        double grad_clip;        /* 0 = off */
        char schedule[16];       /* constant | cosine (to 0 at the last step, after warmup) */
    } optim;
    struct {
        int every;               /* 0 = only at the end */
        int n;
        int gen_length, block_length, steps;
        double temperature;
    } eval;
    struct {
        char dir[CFG_STR_MAX];
        int every;               /* print/log every N steps */
        int trajectories;        /* per-completion rows in the HDF5 log */
    } log;
    struct {
        int every;               /* 0 = only at the end */
        int keep;                /* newest checkpoints kept, 0 = all */
    } checkpoint;
} dllm_cfg;

/* Defaults for every key. */
void dllm_cfg_defaults(dllm_cfg *cfg);
/* Parses a YAML file over the defaults. */
int dllm_cfg_load(dllm_cfg *cfg, const char *path, dllm_err *err);
/* Applies "a.b.c=value" (value parsed as a YAML scalar or flow sequence). */
int dllm_cfg_set(dllm_cfg *cfg, const char *assignment, dllm_err *err);
/* Checks cross-key constraints and file existence after all overrides. */
int dllm_cfg_validate(const dllm_cfg *cfg, dllm_err *err);
/* Learning rate at optimizer step `step` (1-based) of `total`: linear warmup
 * over optim.warmup steps, then constant or cosine to 0 at step `total`. */
double dllm_cfg_lr(const dllm_cfg *cfg, long step, long total);
/* The effective config as YAML (every key), malloc'd. */
char *dllm_cfg_dump(const dllm_cfg *cfg);

#endif
