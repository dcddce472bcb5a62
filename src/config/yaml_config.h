/* yaml_config.h: experiments from YAML into a typed struct.
 *
 * One table (the key table in yaml_config.c) names every key: dotted path, type, default,
 * range or names table, and where it lives in dllm_cfg. Enumerated keys are
 * parsed once into C enums; the correction and GRPO-loss settings are the
 * corr_cfg and grpo_loss_cfg that corrections.h and grpo.h consume, filled in
 * place (their defaults and ranges are the key table's, nowhere else). The reader (libyaml
 * document API) walks the file, rejects unknown keys, checks types and ranges,
 * and reports every error as "file:line:col: message" with the offending line
 * echoed. `--set a.b.c=value` overrides go through the same checks. */
#ifndef DLLM_YAML_CONFIG_H
#define DLLM_YAML_CONFIG_H

#include "dllm/chat.h"
#include "dllm/dream_sampler.h"
#include "dllm/estimators.h"
#include "dllm/model_config.h"
#include "dllm/safetensors.h"
#include "dllm/sampler.h"
#include "kernels/base.h"
#include "src/config/cfg_names.h"
#include "src/rl/corrections.h"
#include "src/rl/grpo.h"

#define CFG_STR_MAX 512
#define CFG_LIST_MAX 16

typedef struct {
    int n;
    char items[CFG_LIST_MAX][64];
} cfg_str_list;

#define CFG_INT_LIST_MAX 8
typedef struct {
    int n;
    int v[CFG_INT_LIST_MAX];
} cfg_int_list;

/* Enumerated keys: parsed once into these values (names in yaml_config.c's
 * tables, or the library's own enums where one exists: dllm_arch, st_dtype,
 * dllm_remasking, dllm_estimator, grpo_*, corr_*). */
typedef enum { CFG_DEVICE_CPU, CFG_DEVICE_CUDA } cfg_device;
typedef enum {
    CFG_PRESET_TINY, CFG_PRESET_SMALL, CFG_PRESET_LLADA_8B, CFG_PRESET_QWEN3_8B, CFG_PRESET_DREAM_7B
} cfg_preset;
typedef enum { CFG_TRAINER_FP32, CFG_TRAINER_BF16 } cfg_trainer_precision;
typedef enum {
    CFG_TASK_COUNTDOWN, CFG_TASK_SUDOKU, CFG_TASK_GSM8K, CFG_TASK_MATH500, CFG_TASK_CUSTOM
} cfg_task;
typedef enum { CFG_FORMAT_D1, CFG_FORMAT_PLAIN } cfg_task_format;
/* task.chat: auto, or a dllm_chat_format value */
enum { CFG_CHAT_AUTO = -1 };
typedef enum { CFG_REWARD_TASK, CFG_REWARD_CORRECT, CFG_REWARD_PARTIAL } cfg_reward;
typedef enum {
    CFG_ROLLOUT_TRAINER, CFG_ROLLOUT_BF16, CFG_ROLLOUT_FP8, CFG_ROLLOUT_FP8_EXACT, CFG_ROLLOUT_NVFP4,
    CFG_ROLLOUT_INT8
} cfg_rollout_precision;
typedef enum { CFG_FP8_E4M3, CFG_FP8_E5M2 } cfg_fp8_format;
typedef enum { CFG_FP8_BLOCK, CFG_FP8_CHANNEL, CFG_FP8_TENSOR } cfg_fp8_scaling;
typedef enum { CFG_INT8_CHANNEL, CFG_INT8_BLOCK } cfg_int8_scaling;
typedef enum { CFG_NVFP4_BLOCK16, CFG_NVFP4_BLOCK32, CFG_NVFP4_CHANNEL, CFG_NVFP4_TENSOR } cfg_nvfp4_scaling;
typedef enum { CFG_SCHEDULE_CONSTANT, CFG_SCHEDULE_COSINE } cfg_schedule;
/* eval.precision: the weights greedy evaluation runs at, for every architecture */
typedef enum { CFG_EVAL_TRAINER, CFG_EVAL_ROLLOUT } cfg_eval_precision;
/* rollout.mask_token / eval.mask_token: may the sampler leave (or commit) the
 * mask token in a completion, or must every generated position be a real token */
typedef enum { CFG_MASK_TOKEN_ALLOW, CFG_MASK_TOKEN_FORBID } cfg_mask_token;

extern const cfg_names cfg_names_device, cfg_names_preset, cfg_names_arch, cfg_names_dtype,
    cfg_names_trainer_precision, cfg_names_task, cfg_names_task_format, cfg_names_chat,
    cfg_names_reward, cfg_names_rollout_precision, cfg_names_fp8_format, cfg_names_fp8_scaling,
    cfg_names_int8_scaling, cfg_names_nvfp4_scaling,
    cfg_names_remasking, cfg_names_estimator, cfg_names_corr_method, cfg_names_corr_level,
    cfg_names_ais_combine, cfg_names_ais_noise, cfg_names_dream_alg, cfg_names_schedule, cfg_names_eval_precision, cfg_names_mask_token,
    cfg_names_cache;

typedef struct {
    char experiment[128];
    long seed;
    cfg_device device;
    struct {
        char path[CFG_STR_MAX];  /* model directory (HF layout); empty: use preset */
        cfg_preset preset;
        dllm_arch arch;          /* with a path: from config.json */
        st_dtype dtype;          /* ST_F32 | ST_BF16: checkpoint dtype written */
        cfg_trainer_precision trainer_precision; /* bf16 rounds weights and activations (CPU) */
        struct {
            int rank;            /* 0 = full fine-tuning */
            double alpha;
            cfg_str_list targets;
        } lora;
    } model;
    struct {
        cfg_task name;
        struct { char path[CFG_STR_MAX]; int n; } train; /* path empty: generator with n items */
        struct { char path[CFG_STR_MAX]; } eval;          /* path empty: generator, held out */
        int n_numbers;           /* countdown generator: 3 or 4 */
        int max_blanks;          /* sudoku generator */
        cfg_task_format format;  /* d1 (reasoning/answer tags) | plain */
        int chat;                /* CFG_CHAT_AUTO or a dllm_chat_format */
        struct {
            cfg_reward kind;     /* task: the task's reward | correct: 1 if correct, else 0 |
                                    partial: the task's graded reward (countdown, sudoku) */
            char command[CFG_STR_MAX]; /* custom: the reward program ("" none) */
            double timeout_s;    /* custom: the program's time per answer */
        } reward;
        struct { char prompt[128], reference[128]; } fields; /* custom: JSONL keys */
        char plugin[CFG_STR_MAX]; /* custom: the plugin's path ("" none) */
    } task;
    struct {
        cfg_rollout_precision precision;
        struct { cfg_fp8_format format; cfg_fp8_scaling scaling; int pow2_scale; } fp8;
        struct { cfg_int8_scaling scaling; } int8;
        struct { cfg_nvfp4_scaling scaling; } nvfp4;
        int group_size;
        int batch;               /* sequences decoded together (0: all of the rank's) */
        int gen_length, block_length, steps;
        double temperature;
        dllm_remasking remasking;
        double cfg_scale;
        int logits_eos_inf, confidence_eos_eot_inf;
        double top_p;            /* AR backend and Dream */
        cfg_mask_token mask_token;
        dllm_cache cache;        /* none | prefix | dual (dllm/sampler.h) */
        double threshold;        /* 0: off; else in (0, 1] */
        int cache_refresh;       /* 0: the fill at a block's start only; N: every N steps */
        struct {                 /* Dream's sampler (dllm/dream_sampler.h) */
            dllm_dream_alg alg;  /* origin | maskgit_plus | topk_margin | entropy */
            double eps, alg_temp;
            int top_k;           /* 0: off */
        } dream;
    } rollout;
    struct {
        double temperature;
        int mc_samples;
        int shrink;
    } likelihood;
    struct {
        int steps, prompts_per_step, inner_steps;
        dllm_estimator logp_estimator; /* one_step | elbo | trajectory (AR: exact) */
        double p_mask_prompt;
        grpo_loss_cfg loss;      /* ratio, loss_agg, clip_eps, beta */
        int ref_sync_every;
        grpo_adv_scale advantage_scale;
        int fresh_masks;
        double random_drop; /* share of completions left out of the gradient at random */
    } grpo;
    struct {
        corr_cfg c;              /* method, level, cap, fixed_alpha, ais.* */
        dllm_estimator estimator;
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
        int eval_every;          /* validation accuracy every N steps and at the end (0: off) */
        int eval_n;              /* validation puzzles: the task's held-out items of eval_seed */
        long eval_seed;          /* kept apart from the RL seeds that test the model */
        int keep_best;           /* ckpt/best: the checkpoint of the best validation accuracy */
    } sft;
    struct {
        double lr;
        int warmup;
        double betas[2];
        double eps;
        double weight_decay;
        double grad_clip;        /* 0 = off */
        cfg_schedule schedule;   /* constant | cosine (to 0 at the last step, after warmup) */
    } optim;
    struct {
        int every;               /* 0 = only at the end */
        int n;
        int gen_length, block_length, steps;
        cfg_int_list gen_lengths; /* d1's protocol: each length in turn, steps = length / 2
                                     (empty: gen_length with steps) */
        cfg_int_list gen_steps;   /* the steps of each of gen_lengths (empty: length / 2) */
        double temperature;
        cfg_eval_precision precision;
        cfg_mask_token mask_token;
        dllm_cache cache;
        double threshold;
        int cache_refresh;
    } eval;
    struct {
        char dir[CFG_STR_MAX];
        int every;               /* print/log every N steps */
        int trajectories;        /* per-completion rows in the HDF5 log */
        int tensorboard;         /* step metrics and evaluations as TensorBoard scalars */
        int grad_cosine;         /* one extra backward: corrected vs uncorrected gradient */
    } log;
    struct {
        int every;               /* 0 = only at the end */
        int keep;                /* newest checkpoints kept, 0 = all */
    } checkpoint;
    struct {
        char recompute[24];      /* none | layer | every:K (dllm_cfg_recompute_every) */
        int micro_batch;         /* canvases per scoring and update forward */
    } train;
} dllm_cfg;

/* How many keys a config file sets, and how many of them only an RL run (task,
 * rollout, likelihood, grpo, correction) or only sft (sft, data) reads. */
typedef struct {
    int total, rl, sft;
} dllm_cfg_keys_set;

/* Defaults for every key. */
void dllm_cfg_defaults(dllm_cfg *cfg);
/* Parses a YAML file over the defaults. A directory, or a file that sets no
 * key ("empty config: nothing to run"), is an input error. */
int dllm_cfg_load(dllm_cfg *cfg, const char *path, dllm_err *err);
/* dllm_cfg_load that also counts the keys the file sets (count may be NULL). */
int dllm_cfg_load_counted(dllm_cfg *cfg, const char *path, dllm_cfg_keys_set *count,
                          dllm_err *err);
/* An input error when the counted file is the other command's: rl (train) refuses
 * a config with sft/data keys and no RL key; !rl (sft) the reverse. */
int dllm_cfg_require_kind(const dllm_cfg_keys_set *count, const char *path, bool rl, dllm_err *err);
/* Applies "a.b.c=value" (value parsed as a YAML scalar or flow sequence; an
 * empty value is an input error). */
int dllm_cfg_set(dllm_cfg *cfg, const char *assignment, dllm_err *err);
/* Checks cross-key constraints and file existence after all overrides. */
int dllm_cfg_validate(const dllm_cfg *cfg, dllm_err *err);
/* Makes the file and directory keys (model.path, task.train.path, task.eval.path,
 * task.plugin, data.train) absolute by prefixing the working directory to relative ones, so a
 * run's stored config.yaml means the same from anywhere (export, inspect, resume
 * from another directory). Symbolic links are kept as written (ckpt/latest stays
 * "the latest"). Returns an input error when a path would not fit. */
int dllm_cfg_absolute_paths(dllm_cfg *cfg, dllm_err *err);
/* train.recompute's K (0: none, layer: 1, every:K: K); -1 when s is none of them. */
int dllm_cfg_recompute_every(const char *s, int *every);
/* Learning rate at optimizer step `step` (1-based) of `total`: linear warmup
 * over optim.warmup steps, then constant or cosine to 0 at step `total`. */
double dllm_cfg_lr(const dllm_cfg *cfg, long step, long total);
/* One key of the table, for listings (`dllm-rl config`). */
typedef struct {
    const char *path, *type, *def, *desc;
    char range[512];  /* "[min, max]", "a|b|c" choices or allowed items; "" for strings */
} dllm_cfg_key_doc;
size_t dllm_cfg_nkeys(void);
void dllm_cfg_key_doc_get(size_t i, dllm_cfg_key_doc *out);
/* The first key (table order) whose value differs between a and b; NULL if none. */
const char *dllm_cfg_first_difference(const dllm_cfg *a, const dllm_cfg *b);
/* The effective config as YAML (every key), malloc'd. */
char *dllm_cfg_dump(const dllm_cfg *cfg);

#endif
