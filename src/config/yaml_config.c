/* yaml_config.c: the YAML reader behind yaml_config.h. Schema in the key table below.
 * (Over 900 lines: the key table carries each key's one-line meaning, and the
 * reader, the checks and the listings walk that one table.) */
#include "src/config/yaml_config.h"
#include "dllm/arch.h"
#include "src/run/run_dir.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/stat.h>
#include <yaml.h>

int dllm_cfg_recompute_every(const char *s, int *every)
{
    long k = 0;
    char *end = NULL;
    if (!strcmp(s, "none"))
        k = 0;
    else if (!strcmp(s, "layer"))
        k = 1;
    else if (!strncmp(s, "every:", 6) && s[6] >= '0' && s[6] <= '9' &&
             ((k = strtol(s + 6, &end, 10)), *end == '\0') && k >= 1 && k <= 1000000)
        ;
    else
        return -1;
    if (every)
        *every = (int)k;
    return 0;
}

double dllm_cfg_lr(const dllm_cfg *cfg, long step, long total)
{
    double lr = cfg->optim.lr;
    long w = cfg->optim.warmup;
    if (w > 0 && step <= w)
        return lr * (double)step / (double)w;
    if (cfg->optim.schedule == CFG_SCHEDULE_COSINE && total > w)
        lr *= 0.5 * (1 + cos(3.14159265358979323846 * (double)(step - w) / (double)(total - w)));
    return lr;
}


/* ---- names of the enumerated keys -------------------------------------------- */

#define NAMES(var, key, ...)                                   \
    static const cfg_name var##_v[] = {__VA_ARGS__};           \
    const cfg_names var = CFG_NAMES(key, var##_v)

NAMES(cfg_names_device, "device", {"cpu", CFG_DEVICE_CPU}, {"cuda", CFG_DEVICE_CUDA});
/* model.arch, model.preset and model.lora.targets name what the architecture
 * registry holds (dllm/arch.h), read from it when asked so that an architecture
 * registered at run time is a value too: the architectures by id; every preset
 * name once, in registry order (tiny, small, llada-8b, qwen3-8b, dream-7b: the
 * cfg_preset values); every LoRA target name and alias once (value: its bit). */
static const cfg_names *arch_names(void)
{
    static cfg_name v[DLLM_ARCH_MAX];
    static cfg_names t = {"model.arch", v, 0, NULL};
    if (t.n != dllm_arch_count()) {
        for (int i = 0; i < dllm_arch_count(); i++)
            v[i] = (cfg_name){dllm_arch_get((dllm_arch)i)->name, i};
        t.n = dllm_arch_count();
    }
    return &t;
}

/* Appends name (value) to the n entries of v unless there; capacity cap. */
static void add_name(cfg_name *v, int *n, int cap, const char *name, int value)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(v[i].name, name))
            return;
    if (*n < cap)
        v[(*n)++] = (cfg_name){name, value};
}

static const cfg_names *preset_names(void)
{
    enum { CAP = 64 };
    static cfg_name v[CAP];
    static cfg_names t = {"model.preset", v, 0, NULL};
    static int archs;
    if (archs != dllm_arch_count()) {
        t.n = 0;
        for (archs = 0; archs < dllm_arch_count(); archs++)
            for (int k = 0; k < dllm_arch_get((dllm_arch)archs)->n_presets; k++)
                add_name(v, &t.n, CAP, dllm_arch_get((dllm_arch)archs)->presets[k].name, t.n);
    }
    return &t;
}

static const cfg_names *lora_target_names(void)
{
    enum { CAP = 4 * DLLM_NLIN };
    static cfg_name v[CAP];
    static cfg_names t = {"model.lora.targets", v, 0, NULL};
    static int archs;
    if (archs != dllm_arch_count()) {
        t.n = 0;
        for (archs = 0; archs < dllm_arch_count(); archs++) {
            const dllm_arch_desc *a = dllm_arch_get((dllm_arch)archs);
            for (int j = 0; j < DLLM_NLIN; j++)
                add_name(v, &t.n, CAP, a->lora_name[j], 1 << j);
            for (int j = 0; a->lora_alias && j < DLLM_NLIN; j++)
                add_name(v, &t.n, CAP, a->lora_alias[j], 1 << j);
            for (int j = 0; a->lora_more && a->lora_more[j]; j++)
                add_name(v, &t.n, CAP, a->lora_more[j], 0);
        }
    }
    return &t;
}

const cfg_names cfg_names_arch = {"model.arch", NULL, 0, arch_names};
const cfg_names cfg_names_preset = {"model.preset", NULL, 0, preset_names};
static const cfg_names cfg_names_lora_target = {"model.lora.targets", NULL, 0, lora_target_names};
NAMES(cfg_names_dtype, "model.dtype", {"f32", ST_F32}, {"bf16", ST_BF16});
NAMES(cfg_names_trainer_precision, "model.trainer_precision", {"fp32", CFG_TRAINER_FP32},
      {"bf16", CFG_TRAINER_BF16});
NAMES(cfg_names_task, "task.name", {"countdown", CFG_TASK_COUNTDOWN}, {"sudoku", CFG_TASK_SUDOKU},
      {"gsm8k", CFG_TASK_GSM8K}, {"math500", CFG_TASK_MATH500}, {"custom", CFG_TASK_CUSTOM});
NAMES(cfg_names_task_format, "task.format", {"d1", CFG_FORMAT_D1}, {"plain", CFG_FORMAT_PLAIN});
NAMES(cfg_names_chat, "task.chat", {"auto", CFG_CHAT_AUTO}, {"plain", DLLM_CHAT_PLAIN},
      {"llada", DLLM_CHAT_LLADA}, {"qwen3", DLLM_CHAT_QWEN3}, {"qwen2.5", DLLM_CHAT_QWEN25},
      {"qwen3.5", DLLM_CHAT_QWEN35});
NAMES(cfg_names_reward, "task.reward.kind", {"task", CFG_REWARD_TASK}, {"correct", CFG_REWARD_CORRECT},
      {"partial", CFG_REWARD_PARTIAL});
NAMES(cfg_names_rollout_precision, "rollout.precision", {"trainer", CFG_ROLLOUT_TRAINER},
      {"bf16", CFG_ROLLOUT_BF16}, {"fp8", CFG_ROLLOUT_FP8}, {"fp8-exact", CFG_ROLLOUT_FP8_EXACT},
      {"nvfp4", CFG_ROLLOUT_NVFP4}, {"int8", CFG_ROLLOUT_INT8});
NAMES(cfg_names_fp8_format, "rollout.fp8.format", {"e4m3", CFG_FP8_E4M3}, {"e5m2", CFG_FP8_E5M2});
NAMES(cfg_names_fp8_scaling, "rollout.fp8.scaling", {"block", CFG_FP8_BLOCK},
      {"channel", CFG_FP8_CHANNEL}, {"tensor", CFG_FP8_TENSOR});
NAMES(cfg_names_int8_scaling, "rollout.int8.scaling", {"channel", CFG_INT8_CHANNEL},
      {"block", CFG_INT8_BLOCK});
NAMES(cfg_names_nvfp4_scaling, "rollout.nvfp4.scaling", {"block16", CFG_NVFP4_BLOCK16},
      {"block32", CFG_NVFP4_BLOCK32}, {"channel", CFG_NVFP4_CHANNEL}, {"tensor", CFG_NVFP4_TENSOR});
NAMES(cfg_names_remasking, "rollout.remasking", {"low_confidence", REMASK_LOW_CONFIDENCE},
      {"random", REMASK_RANDOM});
NAMES(cfg_names_estimator, "correction.estimator", {"one_step", EST_ONE_STEP}, {"elbo", EST_ELBO},
      {"trajectory", EST_TRAJECTORY});
NAMES(cfg_names_corr_method, "correction.method", {"none", CORR_NONE}, {"is", CORR_IS},
      {"tis", CORR_TIS}, {"mis", CORR_MIS}, {"fixed", CORR_FIXED}, {"ais", CORR_AIS});
NAMES(cfg_names_corr_level, "correction.level", {"sequence", CORR_LEVEL_SEQUENCE},
      {"geo", CORR_LEVEL_GEO}, {"token", CORR_LEVEL_TOKEN});
NAMES(cfg_names_ais_combine, "correction.ais.combine", {"linear", AIS_COMBINE_LINEAR},
      {"logistic", AIS_COMBINE_LOGISTIC});
NAMES(cfg_names_dream_alg, "rollout.dream.alg", {"origin", DLLM_DREAM_ORIGIN},
      {"maskgit_plus", DLLM_DREAM_MASKGIT_PLUS}, {"topk_margin", DLLM_DREAM_TOPK_MARGIN},
      {"entropy", DLLM_DREAM_ENTROPY});
NAMES(cfg_names_ais_noise, "correction.ais.noise", {"debias", AIS_NOISE_DEBIAS},
      {"none", AIS_NOISE_NONE});
NAMES(cfg_names_ais_population, "correction.ais.population", {"informative", AIS_POP_INFORMATIVE},
      {"all", AIS_POP_ALL});
NAMES(cfg_names_ais_variance, "correction.ais.variance", {"total", AIS_VAR_TOTAL},
      {"excess", AIS_VAR_EXCESS});
NAMES(cfg_names_schedule, "optim.schedule", {"constant", CFG_SCHEDULE_CONSTANT},
      {"cosine", CFG_SCHEDULE_COSINE});
NAMES(cfg_names_eval_precision, "eval.precision", {"trainer", CFG_EVAL_TRAINER},
      {"rollout", CFG_EVAL_ROLLOUT});
NAMES(cfg_names_mask_token, "rollout.mask_token", {"allow", CFG_MASK_TOKEN_ALLOW},
      {"forbid", CFG_MASK_TOKEN_FORBID});
NAMES(cfg_names_cache, "rollout.cache", {"none", DLLM_CACHE_NONE}, {"prefix", DLLM_CACHE_PREFIX},
      {"dual", DLLM_CACHE_DUAL});

/* enumerated fields are stored through an int */
_Static_assert(sizeof(cfg_device) == sizeof(int) && sizeof(dllm_arch) == sizeof(int) &&
                   sizeof(st_dtype) == sizeof(int) && sizeof(dllm_remasking) == sizeof(int) &&
                   sizeof(dllm_estimator) == sizeof(int) && sizeof(corr_method) == sizeof(int) &&
                   sizeof(corr_level) == sizeof(int) && sizeof(ais_combine) == sizeof(int) &&
                   sizeof(ais_noise) == sizeof(int) && sizeof(dllm_dream_alg) == sizeof(int) &&
                   sizeof(ais_population) == sizeof(int) && sizeof(ais_variance) == sizeof(int) &&
                   sizeof(grpo_ratio) == sizeof(int) && sizeof(grpo_agg) == sizeof(int) &&
                   sizeof(grpo_adv_scale) == sizeof(int) && sizeof(dllm_cache) == sizeof(int),
               "enum fields must be int-sized");

typedef enum { K_INT, K_LONG, K_FLOAT, K_BOOL, K_STR, K_ENUM, K_FLOAT2, K_STR_LIST, K_INT_LIST } key_type;

typedef struct {
    const char *path;    /* dotted key path */
    key_type type;
    size_t off;          /* offsetof(dllm_cfg, ...) */
    size_t size;         /* buffer size for K_STR, field size otherwise */
    const char *def;     /* default, parsed like a YAML scalar ("" for none) */
    double min, max;     /* numeric range (inclusive) */
    const cfg_names *names; /* K_ENUM: its names; K_STR_LIST: the allowed items, or NULL */
    const char *desc;    /* one line for `dllm-rl config` (docs/CONFIG.md's meaning) */
} cfg_key;

#define F(field) offsetof(dllm_cfg, field), sizeof(((dllm_cfg *)0)->field)
#define INF HUGE_VAL

static const cfg_key keys[] = {
    {"experiment", K_STR, F(experiment), "run", 0, 0, NULL,
     "run directory name under log.dir (a plain name: letters, digits, . _ + - =)"},
    {"seed", K_LONG, F(seed), "1", 0, 9.2e18, NULL,
     "root of every random stream"},
    {"device", K_ENUM, F(device), "cpu", 0, 0, &cfg_names_device,
     "cpu, or cuda: rollouts and the likelihoods on the CUDA backend, and the update "
     "(forward, backward, clip, AdamW) too, LoRA or full fine-tuning, fp32 or bf16 trainer; "
     "several ranks: one device each, gradients summed with NCCL; sft: the whole step, "
     "likewise"},
    {"model.path", K_STR, F(model.path), "", 0, 0, NULL,
     "HF model directory (config.json + safetensors + tokenizer.json); empty: a random preset"},
    {"model.preset", K_ENUM, F(model.preset), "tiny", 0, 0, &cfg_names_preset,
     "the random preset built when model.path is empty"},
    {"model.arch", K_ENUM, F(model.arch), "llada", 0, 0, &cfg_names_arch,
     "architecture of the random preset (with a path: config.json's)"},
    {"model.dtype", K_ENUM, F(model.dtype), "f32", 0, 0, &cfg_names_dtype,
     "checkpoint dtype written"},
    {"model.trainer_precision", K_ENUM, F(model.trainer_precision), "fp32", 0, 0, &cfg_names_trainer_precision,
     "bf16 rounds the trainer's weights and linear inputs to bf16 (fp32 masters kept for "
     "the update)"},
    {"model.lora.rank", K_INT, F(model.lora.rank), "0", 0, 4096, NULL,
     "LoRA rank (0: full fine-tuning)"},
    {"model.lora.alpha", K_FLOAT, F(model.lora.alpha), "16", 0, INF, NULL,
     "LoRA scale numerator (scale alpha / rank)"},
    {"model.lora.targets", K_STR_LIST, F(model.lora.targets),
     "[q_proj, k_proj, v_proj, attn_out, ff_proj, up_proj, ff_out]", 0, 0, &cfg_names_lora_target,
     "LoRA target modules by HF name"},
    {"task.name", K_ENUM, F(task.name), "countdown", 0, 0, &cfg_names_task,
     "the RL task"},
    {"task.train.path", K_STR, F(task.train.path), "", 0, 0, NULL,
     "training items from a file (empty: generated)"},
    {"task.train.n", K_INT, F(task.train.n), "10000", 1, 1e8, NULL,
     "number of generated training items"},
    {"task.eval.path", K_STR, F(task.eval.path), "", 0, 0, NULL,
     "held-out items from a file (empty: generated with another seed)"},
    {"task.n_numbers", K_INT, F(task.n_numbers), "3", 3, 4, NULL,
     "countdown generator: numbers per item"},
    {"task.max_blanks", K_INT, F(task.max_blanks), "10", 1, 16, NULL,
     "sudoku generator: blanks per puzzle"},
    {"task.format", K_ENUM, F(task.format), "d1", 0, 0, &cfg_names_task_format,
     "d1 instruction or the plain question"},
    {"task.chat", K_ENUM, F(task.chat), "auto", 0, 0, &cfg_names_chat,
     "chat template of the prompts (auto: the model's)"},
    /* `task.reward: correct` is short for task.reward.kind (see shorthands below) */
    {"task.reward.kind", K_ENUM, F(task.reward.kind), "task", 0, 0, &cfg_names_reward,
     "task: the task's reward (d1's; custom: the program's or plugin's); correct: 1 when "
     "correct, else 0 (`task.reward: correct` for short); partial: a graded reward in [0, 1] "
     "(countdown: a wrong value from the right numbers up to 0.8 by its distance to the "
     "target; sudoku: the blanks right, its task reward)"},
    {"task.reward.command", K_STR, F(task.reward.command), "", 0, 0, NULL,
     "custom: the reward program, started once: one JSON line per completion in, one reward "
     "line out (docs/CUSTOM_TASKS.md)"},
    {"task.reward.timeout_s", K_FLOAT, F(task.reward.timeout_s), "30", 1e-3, 86400, NULL,
     "custom: seconds the reward program may take per answer (then the run stops)"},
    {"task.fields.prompt", K_STR, F(task.fields.prompt), "prompt", 0, 0, NULL,
     "custom: the JSONL key of the prompt"},
    {"task.fields.reference", K_STR, F(task.fields.reference), "reference", 0, 0, NULL,
     "custom: the JSONL key of the reference the reward receives"},
    {"task.plugin", K_STR, F(task.plugin), "", 0, 0, NULL,
     "custom: a C plugin (.so) that rewards (include/dllm_task_plugin.h)"},
    {"rollout.precision", K_ENUM, F(rollout.precision), "fp8", 0, 0, &cfg_names_rollout_precision,
     "weights of the rollout copy (trainer: the reference arm, w = 1)"},
    {"rollout.fp8.format", K_ENUM, F(rollout.fp8.format), "e4m3", 0, 0, &cfg_names_fp8_format,
     "FP8 format of the rollout copy"},
    {"rollout.fp8.scaling", K_ENUM, F(rollout.fp8.scaling), "block", 0, 0, &cfg_names_fp8_scaling,
     "FP8 weight scaling (block 128x128 with 1x128 activation groups; on a GPU: cuBLAS "
     "12.9.1+)"},
    {"rollout.fp8.pow2_scale", K_BOOL, F(rollout.fp8.pow2_scale), "false", 0, 0, NULL,
     "round FP8 scales to powers of two"},
    {"rollout.int8.scaling", K_ENUM, F(rollout.int8.scaling), "channel", 0, 0,
     &cfg_names_int8_scaling,
     "INT8 weight scaling: channel (per output row, activations per token) or block "
     "(128x128, activations per 1x128 group)"},
    {"rollout.nvfp4.scaling", K_ENUM, F(rollout.nvfp4.scaling), "block16", 0, 0,
     &cfg_names_nvfp4_scaling,
     "what one E4M3 scale of an NVFP4 copy covers, weights and activations alike: block16 "
     "(NVFP4's 16 elements along the reduction), block32, channel (a weight row / a token) or "
     "tensor; the E2M1 codes and the fp32 per-tensor scale stay"},
    /* GRPO's advantage is a reward minus its group's mean: one completion learns nothing */
    {"rollout.group_size", K_INT, F(rollout.group_size), "8", 2, 4096, NULL,
     "completions per prompt (GRPO needs at least 2)"},
    {"rollout.batch", K_INT, F(rollout.batch), "0", 0, 1 << 20, NULL,
     "sequences decoded together, in turn (0: all of the rank's at once); each sequence "
     "draws the same random stream either way (plan reads it too)"},
    {"rollout.gen_length", K_INT, F(rollout.gen_length), "64", 1, 1 << 20, NULL,
     "generated tokens per completion"},
    {"rollout.block_length", K_INT, F(rollout.block_length), "16", 1, 1 << 20, NULL,
     "semi-autoregressive block length of the denoising schedule"},
    {"rollout.steps", K_INT, F(rollout.steps), "32", 1, 32767, NULL,
     "denoising steps over the whole completion"},
    {"rollout.temperature", K_FLOAT, F(rollout.temperature), "0.9", 0, 100, NULL,
     "sampling temperature"},
    {"rollout.remasking", K_ENUM, F(rollout.remasking), "low_confidence", 0, 0, &cfg_names_remasking,
     "which positions the sampler commits"},
    {"rollout.cfg_scale", K_FLOAT, F(rollout.cfg_scale), "0", 0, 100, NULL,
     "classifier-free guidance scale (0: off)"},
    {"rollout.logits_eos_inf", K_BOOL, F(rollout.logits_eos_inf), "false", 0, 0, NULL,
     "the reference sampler's switch: EOS logits to -inf"},
    {"rollout.confidence_eos_eot_inf", K_BOOL, F(rollout.confidence_eos_eot_inf), "false", 0, 0, NULL,
     "the reference sampler's switch: EOS/EOT confidence to -inf"},
    {"rollout.top_p", K_FLOAT, F(rollout.top_p), "1.0", 1e-6, 1, NULL,
     "nucleus sampling (AR backend)"},
    /* forbid: a weak model's mask draws would leave holes no estimator scores as the
     * policy's choice (dllm/sampler.h); identical to allow while the mask never wins */
    {"rollout.mask_token", K_ENUM, F(rollout.mask_token), "forbid", 0, 0, &cfg_names_mask_token,
     "forbid: every generated position ends as a real token; allow: the published sampler"},
    {"rollout.cache", K_ENUM, F(rollout.cache), "none", 0, 0, &cfg_names_cache,
     "key/value caching of the denoising steps (LLaDA, docs/METHOD.md §2a): prefix recomputes the block and what follows it, dual the block alone"},
    {"rollout.threshold", K_FLOAT, F(rollout.threshold), "0", 0, 1, NULL,
     "parallel decoding: a step commits every masked position of the block with confidence >= T and the most confident one (0: off; LLaDA)"},
    {"rollout.cache_refresh", K_INT, F(rollout.cache_refresh), "0", 0, 1e6, NULL,
     "under rollout.cache: a full pass refreshes the cache every N steps of a block (0: only at its start; 1: every step, the uncached sampler's ids)"},
    {"rollout.dream.alg", K_ENUM, F(rollout.dream.alg), "maskgit_plus", 0, 0, &cfg_names_dream_alg,
     "Dream's sampler: which masked positions are committed each step"},
    {"rollout.dream.eps", K_FLOAT, F(rollout.dream.eps), "0.001", 1e-9, 0.999999, NULL,
     "Dream's sampler: the final timestep of the schedule 1 -> eps"},
    {"rollout.dream.alg_temp", K_FLOAT, F(rollout.dream.alg_temp), "0", 0, 1e6, NULL,
     "Dream's sampler: 0 commits the most confident positions; > 0 draws them by softmax(confidence / alg_temp)"},
    {"rollout.dream.top_k", K_INT, F(rollout.dream.top_k), "0", 0, 1 << 30, NULL,
     "Dream's sampler: keep only the k most likely tokens (0: off)"},
    {"likelihood.temperature", K_FLOAT, F(likelihood.temperature), "1.0", 1e-6, 100, NULL,
     "scoring temperature"},
    {"likelihood.mc_samples", K_INT, F(likelihood.mc_samples), "4", 1, 1 << 16, NULL,
     "Monte Carlo samples of the elbo estimator"},
    {"likelihood.shrink", K_INT, F(likelihood.shrink), "1", 1, 1 << 16, NULL,
     "trajectory estimator: denoising steps per pass"},
    {"grpo.steps", K_INT, F(grpo.steps), "200", 0, 1e9, NULL,
     "RL steps of the run"},
    {"grpo.prompts_per_step", K_INT, F(grpo.prompts_per_step), "8", 1, 1 << 20, NULL,
     "prompts per RL step (all ranks together)"},
    {"grpo.inner_steps", K_INT, F(grpo.inner_steps), "4", 1, 1 << 16, NULL,
     "clipped-surrogate updates per RL step"},
    {"grpo.logp_estimator", K_ENUM, F(grpo.logp_estimator), "one_step", 0, 0, &cfg_names_estimator,
     "estimator of the policy ratio"},
    {"grpo.p_mask_prompt", K_FLOAT, F(grpo.p_mask_prompt), "0", 0, 1, NULL,
     "d1's prompt masking probability"},
    {"grpo.ratio", K_ENUM, F(grpo.loss.ratio), "sequence", 0, 0, &grpo_ratio_names,
     "sequence: exp((l_theta - l_old)/L); token (one_step, AR)"},
    /* open interval (0, 1), checked in dllm_cfg_validate: 0 freezes the ratio, 1 lets it reach 0 */
    {"grpo.clip_eps", K_FLOAT, F(grpo.loss.clip_eps), "0.2", 0, 1, NULL,
     "ratio clipping to [1 - eps, 1 + eps], in (0, 1)"},
    {"grpo.beta", K_FLOAT, F(grpo.loss.beta), "0", 0, 100, NULL,
     "weight of the k3 KL to a reference policy (0: none, policy_kl not logged)"},
    {"grpo.ref_sync_every", K_INT, F(grpo.ref_sync_every), "0", 0, 1e9, NULL,
     "re-sync the reference policy every N steps (0: never)"},
    {"grpo.random_drop", K_FLOAT, F(grpo.random_drop), "0", 0, 1, NULL,
     "each completion's coefficient set to 0 with this probability, drawn from the seed, step "
     "and completion (a control: mis's share of zeroed completions, at random), in [0, 1); "
     "logged as frac_dropped"},
    {"grpo.loss_agg", K_ENUM, F(grpo.loss.agg), "seq_mean", 0, 0, &grpo_agg_names,
     "loss aggregation"},
    {"grpo.advantage_scale", K_ENUM, F(grpo.advantage_scale), "std", 0, 0, &grpo_adv_scale_names,
     "advantage scaling within a group"},
    {"grpo.fresh_masks", K_BOOL, F(grpo.fresh_masks), "false", 0, 0, NULL,
     "new masks per inner step (d1)"},
    {"correction.method", K_ENUM, F(correction.c.method), "ais", 0, 0, &cfg_names_corr_method,
     "mismatch correction of the importance weights"},
    {"correction.estimator", K_ENUM, F(correction.estimator), "elbo", 0, 0, &cfg_names_estimator,
     "estimator of the importance weight"},
    {"correction.level", K_ENUM, F(correction.c.level), "sequence", 0, 0, &cfg_names_corr_level,
     "sequence, geometric-mean or per-token weights"},
    {"correction.cap", K_FLOAT, F(correction.c.cap), "2.0", 1, INF, NULL,
     "C, the truncation cap of tis/mis/ais"},
    {"correction.fixed_alpha", K_FLOAT, F(correction.c.fixed_alpha), "0.5", 0, 1, NULL,
     "the mix of the fixed method"},
    {"correction.ais.combine", K_ENUM, F(correction.c.ais.combine), "linear", 0, 0, &cfg_names_ais_combine,
     "how AIS combines its diagnostics"},
    {"correction.ais.noise", K_ENUM, F(correction.c.ais.noise), "debias", 0, 0, &cfg_names_ais_noise,
     "debias: subtract the estimator noise from the divergence"},
    {"correction.ais.population", K_ENUM, F(correction.c.ais.population), "informative", 0, 0,
     &cfg_names_ais_population,
     "completions the diagnostics see: informative (groups with unequal rewards) or all"},
    {"correction.ais.variance", K_ENUM, F(correction.c.ais.variance), "total", 0, 0,
     &cfg_names_ais_variance,
     "variance amplification nu: total (second moment at the capped end point) or excess "
     "(beyond what ESS explains)"},
    /* signed: a negative weight reverses its diagnostic (docs/METHOD.md §5) */
    {"correction.ais.weights.reliability", K_FLOAT, F(correction.c.ais.w_rel), "1", -1e300, 1e300, NULL,
     "weight of the reliability diagnostic (0 removes it)"},
    {"correction.ais.weights.divergence", K_FLOAT, F(correction.c.ais.w_div), "1", -1e300, 1e300, NULL,
     "weight of the divergence diagnostic (0 removes it)"},
    {"correction.ais.weights.variance", K_FLOAT, F(correction.c.ais.w_var), "1", -1e300, 1e300, NULL,
     "weight of the variance diagnostic (0 removes it)"},
    {"correction.ais.tau_delta", K_FLOAT, F(correction.c.ais.tau_delta), "0.05", 1e-12, INF, NULL,
     "divergence scale tau of s_div"},
    {"correction.ais.bias", K_FLOAT, F(correction.c.ais.bias), "-4", -INF, INF, NULL,
     "bias of the logistic combination"},
    {"correction.ais.gain", K_FLOAT, F(correction.c.ais.gain), "8", 1e-12, 1e300, NULL,
     "gain of the logistic combination on the normalised weighted score"},
    {"correction.ais.eta", K_FLOAT, F(correction.c.ais.eta), "0", 0, 1, NULL,
     "smoothing of alpha across steps (0: none)"},
    {"correction.ais.alpha_min", K_FLOAT, F(correction.c.ais.alpha_min), "0", 0, 1, NULL,
     "lower clamp of alpha"},
    {"correction.ais.alpha_max", K_FLOAT, F(correction.c.ais.alpha_max), "1", 0, 1, NULL,
     "upper clamp of alpha"},
    {"data.train", K_STR, F(data.train), "", 0, 0, NULL,
     "SFT data: JSONL of prompt/answer pairs"},
    {"data.max_len", K_INT, F(data.max_len), "128", 2, 1 << 20, NULL,
     "longest prompt + answer in tokens (longer is an error)"},
    {"data.answer_length", K_INT, F(data.answer_length), "0", 0, 1 << 20, NULL,
     "EOS-pad every SFT answer to this many tokens (0: no)"},
    {"sft.steps", K_INT, F(sft.steps), "100", 0, 1e9, NULL,
     "SFT optimizer steps"},
    {"sft.batch_size", K_INT, F(sft.batch_size), "8", 1, 1 << 20, NULL,
     "SFT pairs per step"},
    {"sft.chat", K_BOOL, F(sft.chat), "false", 0, 0, NULL,
     "wrap SFT prompts in the model's chat format"},
    {"sft.eval_every", K_INT, F(sft.eval_every), "0", 0, 1e9, NULL,
     "validation accuracy every N steps and at the end (0: off)"},
    {"sft.eval_n", K_INT, F(sft.eval_n), "500", 1, 1 << 24, NULL,
     "validation items: the first N held-out items of sft.eval_seed"},
    {"sft.eval_seed", K_LONG, F(sft.eval_seed), "1000", 0, 9.2e18, NULL,
     "seed of the validation items (those `train --set seed=S` evaluates on): keep it off "
     "the RL seeds"},
    {"sft.keep_best", K_BOOL, F(sft.keep_best), "false", 0, 0, NULL,
     "keep the checkpoint of the best validation accuracy as ckpt/best"},
    {"optim.lr", K_FLOAT, F(optim.lr), "1e-4", 0, 10, NULL,
     "AdamW learning rate"},
    {"optim.warmup", K_INT, F(optim.warmup), "0", 0, 1e9, NULL,
     "linear warmup steps"},
    {"optim.betas", K_FLOAT2, F(optim.betas), "[0.9, 0.99]", 0, 1 - 1e-12, NULL,
     "AdamW betas"},
    {"optim.eps", K_FLOAT, F(optim.eps), "1e-8", 0, 1, NULL,
     "AdamW epsilon"},
    {"optim.weight_decay", K_FLOAT, F(optim.weight_decay), "0", 0, 10, NULL,
     "AdamW decoupled weight decay"},
    {"optim.grad_clip", K_FLOAT, F(optim.grad_clip), "1.0", 0, INF, NULL,
     "global gradient-norm clipping (0: off)"},
    {"optim.schedule", K_ENUM, F(optim.schedule), "constant", 0, 0, &cfg_names_schedule,
     "constant, or cosine to 0 at the last step after the warmup"},
    {"eval.every", K_INT, F(eval.every), "20", 0, 1e9, NULL,
     "evaluate every N steps and at the end (0: never)"},
    {"eval.n", K_INT, F(eval.n), "500", 0, 1e8, NULL,
     "evaluation items"},
    {"eval.gen_length", K_INT, F(eval.gen_length), "64", 1, 1 << 20, NULL,
     "evaluation generated tokens"},
    {"eval.block_length", K_INT, F(eval.block_length), "16", 1, 1 << 20, NULL,
     "evaluation block length"},
    {"eval.steps", K_INT, F(eval.steps), "32", 1, 32767, NULL,
     "evaluation denoising steps"},
    {"eval.gen_lengths", K_INT_LIST, F(eval.gen_lengths), "[]", 1, 1 << 20, NULL,
     "d1's protocol: evaluate at each of these lengths (block eval.block_length, steps = "
     "length / 2 unless eval.gen_steps), each logged as task@length; empty: "
     "eval.gen_length only"},
    {"eval.gen_steps", K_INT_LIST, F(eval.gen_steps), "[]", 1, 32767, NULL,
     "denoising steps for each of eval.gen_lengths, in its order; empty: length / 2 (d1)"},
    {"eval.temperature", K_FLOAT, F(eval.temperature), "0", 0, 100, NULL,
     "evaluation temperature (0: greedy)"},
    {"eval.precision", K_ENUM, F(eval.precision), "trainer", 0, 0, &cfg_names_eval_precision,
     "weights evaluation decodes with: trainer or the rollout copy"},
    {"eval.mask_token", K_ENUM, F(eval.mask_token), "forbid", 0, 0, &cfg_names_mask_token,
     "forbid or allow the mask token in evaluation completions"},
    {"eval.cache", K_ENUM, F(eval.cache), "none", 0, 0, &cfg_names_cache,
     "evaluation's key/value caching (as rollout.cache)"},
    {"eval.threshold", K_FLOAT, F(eval.threshold), "0", 0, 1, NULL,
     "evaluation's parallel-decoding threshold (as rollout.threshold; 0: off)"},
    {"eval.cache_refresh", K_INT, F(eval.cache_refresh), "0", 0, 1e6, NULL,
     "evaluation's cache refresh (as rollout.cache_refresh)"},
    {"log.dir", K_STR, F(log.dir), "runs", 0, 0, NULL,
     "directory of the run directories"},
    {"log.every", K_INT, F(log.every), "10", 1, 1e9, NULL,
     "sft progress every N steps (train reports every step)"},
    {"log.trajectories", K_BOOL, F(log.trajectories), "true", 0, 0, NULL,
     "per-completion rows in log.h5"},
    {"log.tensorboard", K_BOOL, F(log.tensorboard), "false", 0, 0, NULL,
     "also write every logged step metric and evaluation as TensorBoard scalars to "
     "RUN_DIR/events.out.tfevents.* (train and sft; `tensorboard --logdir` reads them)"},
    {"log.grad_cosine", K_BOOL, F(log.grad_cosine), "false", 0, 0, NULL,
     "log the cosine and norm ratio of the corrected and uncorrected loss gradients "
     "(one extra backward per step)"},
    /* 10: a killed run loses at most 10 steps and stays resumable (docs/COMMANDS.md, train) */
    {"checkpoint.every", K_INT, F(checkpoint.every), "10", 0, 1e9, NULL,
     "checkpoint every N steps and at the end (0: only at the end)"},
    {"checkpoint.keep", K_INT, F(checkpoint.keep), "2", 0, 1e6, NULL,
     "newest checkpoints kept (0: all)"},
    {"train.recompute", K_STR, F(train.recompute), "layer", 0, 0, NULL,
     "activations the update's forward keeps: none (all), layer (each layer's input; one "
     "layer recomputed at a time) or every:K (each K-th layer's input; K layers recomputed "
     "at a time); the gradients are the same bit for bit (plan reads it too)"},
    {"train.micro_batch", K_INT, F(train.micro_batch), "64", 1, 1 << 20, NULL,
     "canvases per forward when scoring and updating (the likelihood plans' chunks; fewer "
     "hold less device memory; plan reads it too)"},
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* ---- where an error is: file:line:col plus the line itself ------------------ */

typedef struct {
    const char *file;  /* config path or "--set" */
    const char *text;  /* whole source text, for echoing the line */
    dllm_cfg_keys_set *count; /* keys the text sets, by kind (NULL: not counted) */
} source;

static int fail_at(dllm_err *err, const source *src, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_at(dllm_err *err, const source *src, yaml_mark_t mark, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* echo the offending line with a caret under the column */
    char line[256] = "";
    const char *p = src->text;
    for (size_t l = 0; p && *p && l < mark.line; p++)
        if (*p == '\n')
            l++;
    if (p) {
        size_t n = strcspn(p, "\n");
        if (n >= sizeof line)
            n = sizeof line - 1;
        memcpy(line, p, n);
        line[n] = '\0';
    }
    size_t col = mark.column < 200 ? mark.column : 200;
    char caret[208];
    memset(caret, ' ', col);
    caret[col] = '^';
    caret[col + 1] = '\0';
    if (!strcmp(src->file, "--set"))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set %s: %s", src->text, msg);
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu:%zu: %s\n  %s\n  %s", src->file,
                        (size_t)mark.line + 1, (size_t)mark.column + 1, msg, line, caret);
}

static const cfg_key *find_key(const char *path)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].path, path))
            return &keys[i];
    return NULL;
}

/* Sections that also take a scalar, as short for one of their keys: task.reward was
 * a choice before it had the custom task's keys, and configs (and run directories'
 * stored config.yaml) still say `reward: correct`. */
static const struct { const char *section, *key; } shorthands[] = {
    {"task.reward", "task.reward.kind"},
};

static const cfg_key *find_shorthand(const char *path)
{
    for (size_t i = 0; i < sizeof shorthands / sizeof shorthands[0]; i++)
        if (!strcmp(shorthands[i].section, path))
            return find_key(shorthands[i].key);
    return NULL;
}

/* Is `prefix` the path of a section (some key starts with "prefix.")? */
static bool is_section(const char *prefix)
{
    size_t n = strlen(prefix);
    for (size_t i = 0; i < NKEYS; i++)
        if (!strncmp(keys[i].path, prefix, n) && keys[i].path[n] == '.')
            return true;
    return false;
}

static void list_section_keys(const char *prefix, char *out, size_t len)
{
    size_t n = strlen(prefix), used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < NKEYS && used + 64 < len; i++) {
        const char *k = keys[i].path;
        if (n && (strncmp(k, prefix, n) || k[n] != '.'))
            continue;
        const char *rest = n ? k + n + 1 : k;
        size_t m = strcspn(rest, ".");
        /* print each child once */
        bool seen = false;
        for (size_t j = 0; j < i; j++) {
            const char *kj = keys[j].path;
            if (n && (strncmp(kj, prefix, n) || kj[n] != '.'))
                continue;
            const char *rj = n ? kj + n + 1 : kj;
            if (strcspn(rj, ".") == m && !strncmp(rj, rest, m))
                seen = true;
        }
        if (!seen)
            used += (size_t)snprintf(out + used, len - used, "%s%.*s", used ? ", " : "", (int)m,
                                     rest);
    }
}

/* ---- scalar parsing ------------------------------------------------------- */

static bool parse_double(const char *s, double *out)
{
    if (!*s)
        return false;
    char *end;
    errno = 0;
    /* YAML 1.1 infinities (.inf, +.inf, -.inf in any of its three spellings);
     * strtod's own "inf"/"nan" are not YAML */
    const char *u = s + (*s == '+' || *s == '-');
    if (!strcmp(u, ".inf") || !strcmp(u, ".Inf") || !strcmp(u, ".INF")) {
        *out = *s == '-' ? -HUGE_VAL : HUGE_VAL;
        return true;
    }
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_long(const char *s, long *out)
{
    if (!*s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno == ERANGE)
        return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, int *out)
{
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "yes") || !strcmp(s, "on")) {
        *out = 1;
        return true;
    }
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "no") || !strcmp(s, "off")) {
        *out = 0;
        return true;
    }
    return false;
}


static const char *type_name(key_type t)
{
    switch (t) {
    case K_INT:
    case K_LONG: return "an integer";
    case K_FLOAT: return "a number";
    case K_BOOL: return "true or false";
    case K_STR: return "a string";
    case K_ENUM: return "one of the listed choices";
    case K_FLOAT2: return "a list of two numbers";
    case K_STR_LIST: return "a list of strings";
    case K_INT_LIST: return "a list of integers";
    }
    return "?";
}

static int check_range(const cfg_key *k, double v, const source *src, yaml_mark_t mark,
                       dllm_err *err)
{
    if (v < k->min || v > k->max)
        return fail_at(err, src, mark, "%s = %g is out of range [%g, %g]", k->path, v, k->min,
                       k->max);
    return 0;
}

static int set_scalar(dllm_cfg *cfg, const cfg_key *k, const char *s, const source *src,
                      yaml_mark_t mark, dllm_err *err)
{
    char *dst = (char *)cfg + k->off;
    switch (k->type) {
    case K_INT:
    case K_LONG: {
        long v;
        if (!parse_long(s, &v))
            return fail_at(err, src, mark, "%s must be %s, got '%s'", k->path, type_name(k->type), s);
        if (check_range(k, (double)v, src, mark, err))
            return err->code;
        if (k->type == K_INT)
            *(int *)dst = (int)v;
        else
            *(long *)dst = v;
        return 0;
    }
    case K_FLOAT: {
        double v;
        if (!parse_double(s, &v)) {
            /* YAML spells infinity .inf; C's inf, infinity are not YAML numbers */
            bool inf_word = !strcasecmp(s + (s[0] == '+' || s[0] == '-'), "inf") ||
                            !strcasecmp(s + (s[0] == '+' || s[0] == '-'), "infinity");
            return fail_at(err, src, mark, "%s must be a number, got '%s'%s", k->path, s,
                           inf_word ? " (YAML writes infinity as .inf)" : "");
        }
        /* only the cap has a meaning at infinity (min(w, .inf) = w) */
        if (isinf(v) && strcmp(k->path, "correction.cap"))
            return fail_at(err, src, mark, "%s must be finite, got '%s'", k->path, s);
        if (check_range(k, v, src, mark, err))
            return err->code;
        *(double *)dst = v;
        return 0;
    }
    case K_BOOL: {
        int v;
        if (!parse_bool(s, &v))
            return fail_at(err, src, mark, "%s must be true or false, got '%s'", k->path, s);
        *(int *)dst = v;
        return 0;
    }
    case K_ENUM: {
        int v;
        if (!cfg_names_find(k->names, s, &v)) {
            char choices[256];
            return fail_at(err, src, mark, "%s must be one of %s, got '%s'", k->path,
                           cfg_names_choices(k->names, choices, sizeof choices), s);
        }
        *(int *)dst = v;
        return 0;
    }
    case K_STR:
        if (strlen(s) >= k->size)
            return fail_at(err, src, mark, "%s is too long (at most %zu characters)", k->path,
                           k->size - 1);
        if (!strcmp(k->path, "train.recompute") && dllm_cfg_recompute_every(s, NULL))
            return fail_at(err, src, mark, "%s: expected none, layer or every:K (K >= 1), got "
                           "'%s'", k->path, s);
        strcpy(dst, s);
        return 0;
    default:
        return fail_at(err, src, mark, "%s must be %s", k->path, type_name(k->type));
    }
}

static int set_sequence(dllm_cfg *cfg, const cfg_key *k, yaml_document_t *doc, yaml_node_t *node,
                        const source *src, dllm_err *err)
{
    char *dst = (char *)cfg + k->off;
    int n = (int)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (k->type == K_FLOAT2) {
        if (n != 2)
            return fail_at(err, src, node->start_mark, "%s must be a list of two numbers, got %d items",
                           k->path, n);
        for (int i = 0; i < 2; i++) {
            yaml_node_t *it = yaml_document_get_node(doc, node->data.sequence.items.start[i]);
            double v;
            if (it->type != YAML_SCALAR_NODE || !parse_double((char *)it->data.scalar.value, &v))
                return fail_at(err, src, it->start_mark, "%s[%d] must be a number", k->path, i);
            if (check_range(k, v, src, it->start_mark, err))
                return err->code;
            ((double *)dst)[i] = v;
        }
        return 0;
    }
    if (k->type == K_INT_LIST) {
        cfg_int_list *l = (cfg_int_list *)dst;
        if (n > CFG_INT_LIST_MAX)
            return fail_at(err, src, node->start_mark, "%s has %d items (at most %d)", k->path,
                           n, CFG_INT_LIST_MAX);
        memset(l, 0, sizeof *l); /* items past n compare equal (dllm_cfg_first_difference) */
        for (int i = 0; i < n; i++) {
            yaml_node_t *it = yaml_document_get_node(doc, node->data.sequence.items.start[i]);
            double v;
            if (it->type != YAML_SCALAR_NODE || !parse_double((char *)it->data.scalar.value, &v) ||
                v != floor(v))
                return fail_at(err, src, it->start_mark, "%s[%d] must be an integer", k->path, i);
            if (check_range(k, v, src, it->start_mark, err))
                return err->code;
            l->v[l->n++] = (int)v;
        }
        return 0;
    }
    if (k->type != K_STR_LIST)
        return fail_at(err, src, node->start_mark, "%s must be %s, not a list", k->path,
                       type_name(k->type));
    cfg_str_list *l = (cfg_str_list *)dst;
    if (n > CFG_LIST_MAX)
        return fail_at(err, src, node->start_mark, "%s has %d items (at most %d)", k->path, n,
                       CFG_LIST_MAX);
    l->n = 0;
    for (int i = 0; i < n; i++) {
        yaml_node_t *it = yaml_document_get_node(doc, node->data.sequence.items.start[i]);
        const char *s = it->type == YAML_SCALAR_NODE ? (char *)it->data.scalar.value : NULL;
        if (!s || strlen(s) >= sizeof l->items[0])
            return fail_at(err, src, it->start_mark, "%s[%d] must be a short string", k->path, i);
        int bit;
        char allowed[256];
        if (k->names && !cfg_names_find(k->names, s, &bit))
            return fail_at(err, src, it->start_mark, "%s: unknown item '%s' (choices: %s)", k->path, s,
                           cfg_names_choices(k->names, allowed, sizeof allowed));
        strcpy(l->items[l->n++], s);
    }
    return 0;
}

/* Sections that only an RL run reads, and those only sft reads. */
static const char *const rl_sections[] = {"task.", "rollout.", "likelihood.", "grpo.", "correction."};
static const char *const sft_sections[] = {"sft.", "data."};

static void count_key(dllm_cfg_keys_set *c, const char *path)
{
    c->total++;
    for (size_t i = 0; i < sizeof rl_sections / sizeof rl_sections[0]; i++)
        c->rl += !strncmp(path, rl_sections[i], strlen(rl_sections[i]));
    for (size_t i = 0; i < sizeof sft_sections / sizeof sft_sections[0]; i++)
        c->sft += !strncmp(path, sft_sections[i], strlen(sft_sections[i]));
}

static int walk(dllm_cfg *cfg, yaml_document_t *doc, yaml_node_t *node, const char *prefix,
                const source *src, dllm_err *err)
{
    const cfg_key *k = prefix[0] ? find_key(prefix) : NULL;
    if (node->type == YAML_MAPPING_NODE && !k) {
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
             p++) {
            yaml_node_t *kn = yaml_document_get_node(doc, p->key);
            yaml_node_t *vn = yaml_document_get_node(doc, p->value);
            if (kn->type != YAML_SCALAR_NODE)
                return fail_at(err, src, kn->start_mark, "keys must be plain names");
            /* reject duplicates within one mapping */
            for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++) {
                yaml_node_t *qk = yaml_document_get_node(doc, q->key);
                if (qk->type == YAML_SCALAR_NODE &&
                    !strcmp((char *)qk->data.scalar.value, (char *)kn->data.scalar.value))
                    return fail_at(err, src, kn->start_mark, "duplicate key '%s'",
                                   (char *)kn->data.scalar.value);
            }
            char path[256];
            snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "",
                     (char *)kn->data.scalar.value);
            if (!find_key(path) && !is_section(path)) {
                char known[512];
                list_section_keys(prefix, known, sizeof known);
                return fail_at(err, src, kn->start_mark, "unknown key '%s' (known %s%s: %s)", path,
                               prefix[0] ? "keys of " : "sections", prefix, known);
            }
            if (walk(cfg, doc, vn, path, src, err))
                return err->code;
        }
        return 0;
    }
    if (!k && node->type != YAML_MAPPING_NODE)
        k = find_shorthand(prefix);
    if (!k) {
        if (prefix[0] == '\0')
            return fail_at(err, src, node->start_mark, "the config must be a mapping of sections");
        return fail_at(err, src, node->start_mark, "'%s' is a section: expected a mapping", prefix);
    }
    if (src->count)
        count_key(src->count, k->path);
    if (node->type == YAML_SEQUENCE_NODE)
        return set_sequence(cfg, k, doc, node, src, err);
    if (node->type == YAML_MAPPING_NODE)
        return fail_at(err, src, node->start_mark, "%s must be %s, not a mapping", k->path,
                       type_name(k->type));
    const char *s = (char *)node->data.scalar.value;
    if ((k->type == K_STR) && (!strcmp(s, "null") || !strcmp(s, "~")) &&
        node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
        s = "";
    if (k->type == K_FLOAT2 || k->type == K_STR_LIST || k->type == K_INT_LIST)
        return fail_at(err, src, node->start_mark, "%s must be %s", k->path, type_name(k->type));
    return set_scalar(cfg, k, s, src, node->start_mark, err);
}

/* Parses YAML text and applies it at `prefix` (the root for files). */
static int apply_yaml(dllm_cfg *cfg, const char *text, size_t len, const char *prefix,
                      const source *src, dllm_err *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_mark_t m = parser.problem_mark;
        int rc = fail_at(err, src, m, "YAML syntax error: %s%s%s", parser.problem,
                         parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !(root->type == YAML_SCALAR_NODE && !root->data.scalar.length && !prefix[0]))
        rc = walk(cfg, &doc, root, prefix, src, err);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

void dllm_cfg_defaults(dllm_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    dllm_err err;
    for (size_t i = 0; i < NKEYS; i++) {
        source src = {"<defaults>", keys[i].def, NULL};
        if (apply_yaml(cfg, keys[i].def, strlen(keys[i].def), keys[i].path, &src, &err)) {
            fprintf(stderr, "dllm-rl: bad default for %s: %s\n", keys[i].path, err.msg);
            abort();
        }
    }
}

int dllm_cfg_load_counted(dllm_cfg *cfg, const char *path, dllm_cfg_keys_set *count,
                          dllm_err *err)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s is a directory, expected a YAML file "
                            "(a run directory's config is %s/config.yaml)", path, path);
    char *text;
    size_t len;
    if (dllm_read_file(path, &text, &len, err))
        return err->code;
    dllm_cfg_keys_set c = {0, 0, 0};
    source src = {path, text, &c};
    int rc = apply_yaml(cfg, text, len, "", &src, err);
    free(text);
    /* every default on a random model is never what was meant */
    if (!rc && c.total == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: empty config: nothing to run (set at least the keys that say what "
                          "to run, e.g. model.path or model.preset and task.name; `dllm-rl config` "
                          "lists every key)", path);
    if (count)
        *count = c;
    return rc;
}

int dllm_cfg_load(dllm_cfg *cfg, const char *path, dllm_err *err)
{
    return dllm_cfg_load_counted(cfg, path, NULL, err);
}

int dllm_cfg_require_kind(const dllm_cfg_keys_set *c, const char *path, bool rl, dllm_err *err)
{
    if (rl && c->sft > 0 && c->rl == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s is an SFT config (it sets sft.* or data.* keys and no task.*, "
                            "rollout.*, likelihood.*, grpo.* or correction.* key): run it with "
                            "`dllm-rl sft %s`", path, path);
    if (!rl && c->rl > 0 && c->sft == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s is an RL config (it sets task.*, rollout.*, likelihood.*, grpo.* "
                            "or correction.* keys and no sft.* or data.* key): run it with "
                            "`dllm-rl train %s`", path, path);
    return 0;
}

int dllm_cfg_set(dllm_cfg *cfg, const char *assignment, dllm_err *err)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set %s: expected key.path=value", assignment);
    char path[256];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof path)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set: key too long");
    memcpy(path, assignment, n);
    path[n] = '\0';
    const cfg_key *shorthand = find_key(path) ? NULL : find_shorthand(path);
    if (shorthand)
        snprintf(path, sizeof path, "%s", shorthand->path);
    else if (!find_key(path))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--set %s: unknown key '%s'", assignment, path);
    source src = {"--set", assignment, NULL};
    const char *val = eq + 1;
    /* an unset shell variable must not quietly run the default */
    if (!val[0])
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--set %s: empty value for '%s' (give a value, e.g. --set %s=VALUE, or "
                            "leave the --set out to keep the config's value)", assignment, path, path);
    return apply_yaml(cfg, val, strlen(val), path, &src, err);
}

int dllm_cfg_absolute_paths(dllm_cfg *cfg, dllm_err *err)
{
    struct { char *v; const char *key; } paths[] = {
        {cfg->model.path, "model.path"},
        {cfg->task.train.path, "task.train.path"},
        {cfg->task.eval.path, "task.eval.path"},
        {cfg->task.plugin, "task.plugin"},
        {cfg->data.train, "data.train"},
    };
    char cwd[CFG_STR_MAX];
    bool have_cwd = false;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char *v = paths[i].v;
        if (!v[0] || v[0] == '/')
            continue;
        if (!have_cwd && !getcwd(cwd, sizeof cwd))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot resolve '%s': %s", paths[i].key, v,
                                strerror(errno));
        have_cwd = true;
        char abs[2 * CFG_STR_MAX];
        const char *rel = strncmp(v, "./", 2) ? v : v + 2;
        int n = snprintf(abs, sizeof abs, "%s/%s", cwd, rel);
        if (n < 0 || n >= CFG_STR_MAX)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: '%s' is too long as an absolute path",
                                paths[i].key, v);
        memcpy(v, abs, (size_t)n + 1);
    }
    return 0;
}

/* The custom task's keys: a reward from exactly one source, read by no other task. */
static int custom_task_check(const dllm_cfg *cfg, dllm_err *err)
{
    const bool cmd = cfg->task.reward.command[0], plugin = cfg->task.plugin[0];
    if (cfg->task.name != CFG_TASK_CUSTOM) {
        if (cmd || plugin)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s is read only by task.name custom "
                                "(task.name is %s)", cmd ? "task.reward.command" : "task.plugin",
                                cfg_names_name(&cfg_names_task, cfg->task.name));
        return 0;
    }
    if (cmd == plugin)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.name custom needs its reward from %s: "
                            "task.reward.command (a program) or task.plugin (a shared object)",
                            cmd ? "one source, not both" : "somewhere");
    if (!cfg->task.fields.prompt[0] || !cfg->task.fields.reference[0])
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.fields.%s: empty key name",
                            cfg->task.fields.prompt[0] ? "reference" : "prompt");
    return 0;
}

int dllm_cfg_validate(const dllm_cfg *cfg, dllm_err *err)
{
    /* the run directory is log.dir/experiment: a path here would write (and --force
     * remove) outside log.dir */
    if (!run_dir_plain_name(cfg->experiment))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "experiment: '%s' is not a plain directory name (letters, digits, "
                            ". _ + - =; not '.' or '..'): it names the run directory under log.dir",
                            cfg->experiment);
    if (cfg->data.train[0]) {
        FILE *f = fopen(cfg->data.train, "r");
        if (!f)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "data.train: cannot open '%s': %s",
                                cfg->data.train, strerror(errno));
        fclose(f);
    }
    if (cfg->model.path[0]) {
        char p[CFG_STR_MAX + 16];
        snprintf(p, sizeof p, "%s/config.json", cfg->model.path);
        FILE *f = fopen(p, "r");
        if (!f)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "model.path: '%s' has no config.json",
                                cfg->model.path);
        fclose(f);
    }
    const char *paths[3][2] = {{"task.train.path", cfg->task.train.path},
                               {"task.eval.path", cfg->task.eval.path},
                               {"task.plugin", cfg->task.plugin}};
    for (int i = 0; i < 3; i++)
        if (paths[i][1][0]) {
            FILE *f = fopen(paths[i][1], "r");
            if (!f)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot open '%s': %s", paths[i][0],
                                    paths[i][1], strerror(errno));
            fclose(f);
        }
    if (cfg->task.reward.kind == CFG_REWARD_PARTIAL && cfg->task.name != CFG_TASK_COUNTDOWN &&
        cfg->task.name != CFG_TASK_SUDOKU)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "task.reward.kind partial: a graded reward exists for countdown and "
                            "sudoku only (task.name is %s)",
                            cfg_names_name(&cfg_names_task, cfg->task.name));
    if (custom_task_check(cfg, err))
        return err->code;
    const struct { const char *what; int gen, block, steps; } sched[2] = {
        {"rollout", cfg->rollout.gen_length, cfg->rollout.block_length, cfg->rollout.steps},
        {"eval", cfg->eval.gen_length, cfg->eval.block_length, cfg->eval.steps}};
    for (int i = 0; i < 2; i++) {
        if (sched[i].gen % sched[i].block)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s.block_length %d must divide %s.gen_length %d",
                                sched[i].what, sched[i].block, sched[i].what, sched[i].gen);
        int nb = sched[i].gen / sched[i].block;
        if (sched[i].steps % nb)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s.steps %d must be a multiple of the number of blocks %d "
                                "(gen_length / block_length)", sched[i].what, sched[i].steps, nb);
    }
    /* d1's protocol: steps = length / 2 (or eval.gen_steps), a whole number of steps per
     * block */
    const cfg_int_list *gs = &cfg->eval.gen_steps;
    if (gs->n && gs->n != cfg->eval.gen_lengths.n)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "eval.gen_steps has %d entries, eval.gen_lengths %d: one step count "
                            "per length, or none (length / 2)", gs->n, cfg->eval.gen_lengths.n);
    for (int i = 0; i < cfg->eval.gen_lengths.n; i++) {
        const int len = cfg->eval.gen_lengths.v[i], B = cfg->eval.block_length;
        if (len % B)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "eval.gen_lengths[%d] = %d: needs a multiple of eval.block_length %d",
                                i, len, B);
        if (!gs->n && (len % 2 || (len / 2) % (len / B)))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "eval.gen_lengths[%d] = %d: length / 2 steps must be a multiple of "
                                "its %d blocks (or set eval.gen_steps)", i, len, len / B);
        if (gs->n && gs->v[i] % (len / B))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "eval.gen_steps[%d] = %d must be a multiple of the %d blocks of "
                                "eval.gen_lengths[%d] = %d", i, gs->v[i], len / B, i, len);
        for (int j = 0; j < i; j++)
            if (cfg->eval.gen_lengths.v[j] == len)
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "eval.gen_lengths: %d appears twice", len);
    }
    /* with a model.path the architecture is config.json's: checked when the run opens */
    const bool diffusion = !cfg->model.path[0] && dllm_arch_is_diffusion(dllm_arch_get(cfg->model.arch));
    if (diffusion && cfg->grpo.loss.ratio == GRPO_RATIO_TOKEN && cfg->grpo.logp_estimator != EST_ONE_STEP)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "grpo.ratio: token needs grpo.logp_estimator one_step (or an AR model)");
    if (diffusion && cfg->correction.c.level == CORR_LEVEL_TOKEN &&
        cfg->correction.estimator != EST_ONE_STEP)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.level: token needs correction.estimator one_step (or an AR model)");
    /* per-token coefficients multiply per-token ratios: a sequence ratio has none */
    if (cfg->correction.c.level == CORR_LEVEL_TOKEN && cfg->grpo.loss.ratio != GRPO_RATIO_TOKEN)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.level: token needs grpo.ratio token (per-token "
                            "coefficients weigh per-token ratios)");
    if (cfg->correction.c.ais.alpha_min > cfg->correction.c.ais.alpha_max)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.ais.alpha_min %g exceeds correction.ais.alpha_max %g",
                            cfg->correction.c.ais.alpha_min, cfg->correction.c.ais.alpha_max);
    /* the correction module's own preconditions (the key table's ranges imply them) */
    if (corr_cfg_check(&cfg->correction.c, err))
        return err->code;
    if (!(cfg->grpo.random_drop >= 0 && cfg->grpo.random_drop < 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "grpo.random_drop = %g must lie in [0, 1): the share of completions "
                            "left out of the gradient (1 would leave none)", cfg->grpo.random_drop);
    if (!(cfg->grpo.loss.clip_eps > 0 && cfg->grpo.loss.clip_eps < 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "grpo.clip_eps = %g must lie in (0, 1): the ratio is clipped to "
                            "[1 - eps, 1 + eps] (0.2 is usual)", cfg->grpo.loss.clip_eps);
    if (cfg->eval.every > 0 && cfg->eval.n == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "eval.n = 0 with eval.every = %d: nothing to evaluate (set eval.n >= 1, "
                            "or eval.every=0 to evaluate never)", cfg->eval.every);
    if (cfg->model.lora.rank > 0 && cfg->model.lora.targets.n == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "model.lora.targets: empty list with rank %d",
                            cfg->model.lora.rank);
    return 0;
}

size_t dllm_cfg_nkeys(void)
{
    return NKEYS;
}

void dllm_cfg_key_doc_get(size_t i, dllm_cfg_key_doc *out)
{
    const cfg_key *k = &keys[i];
    out->path = k->path;
    out->def = k->def;
    out->desc = k->desc ? k->desc : "";
    out->type = k->type == K_INT || k->type == K_LONG ? "int"
                : k->type == K_FLOAT                  ? "float"
                : k->type == K_BOOL                   ? "bool"
                : k->type == K_STR                    ? "string"
                : k->type == K_ENUM                   ? "choice"
                : k->type == K_FLOAT2                 ? "[float, float]"
                : k->type == K_INT_LIST               ? "[int, ...]"
                                                      : "[string, ...]";
    switch (k->type) {
    case K_INT:
    case K_LONG:
    case K_FLOAT:
    case K_FLOAT2:
    case K_INT_LIST:
        snprintf(out->range, sizeof out->range, "[%g, %g]", k->min, k->max);
        break;
    case K_BOOL: snprintf(out->range, sizeof out->range, "true|false"); break;
    case K_ENUM: cfg_names_choices(k->names, out->range, sizeof out->range); break;
    case K_STR_LIST:
        if (k->names)
            cfg_names_choices(k->names, out->range, sizeof out->range);
        else
            out->range[0] = '\0';
        break;
    default: out->range[0] = '\0';
    }
}

const char *dllm_cfg_first_difference(const dllm_cfg *a, const dllm_cfg *b)
{
    for (size_t i = 0; i < NKEYS; i++) {
        const cfg_key *k = &keys[i];
        const char *pa = (const char *)a + k->off, *pb = (const char *)b + k->off;
        bool same;
        if (k->type == K_STR) {
            same = !strcmp(pa, pb);
        } else if (k->type == K_STR_LIST) { /* items past n and past each NUL are not the value */
            const cfg_str_list *la = (const cfg_str_list *)pa, *lb = (const cfg_str_list *)pb;
            same = la->n == lb->n;
            for (int j = 0; same && j < la->n; j++)
                same = !strcmp(la->items[j], lb->items[j]);
        } else {
            same = !memcmp(pa, pb, k->size);
        }
        if (!same)
            return k->path;
    }
    return NULL;
}

char *dllm_cfg_dump(const dllm_cfg *cfg)
{
    size_t cap = 8192, used = 0;
    char *out = dllm_malloc(cap);
    out[0] = '\0';
    char section[64] = "";
    for (size_t i = 0; i < NKEYS; i++) {
        const cfg_key *k = &keys[i];
        const char *dot = strrchr(k->path, '.');
        char sec[64] = "";
        if (dot)
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - k->path), k->path);
        /* emit section headers as nested mappings */
        int depth = 0;
        if (strcmp(sec, section)) {
            /* count the leading components shared with the previous section,
             * then open the rest of this one, one indentation level each */
            char a[64], b[64];
            snprintf(a, sizeof a, "%s", sec);
            snprintf(b, sizeof b, "%s", section);
            char *sa, *sb, *ta = strtok_r(a, ".", &sa), *tb = strtok_r(b, ".", &sb);
            int d = 0;
            while (ta && tb && !strcmp(ta, tb)) {
                d++;
                ta = strtok_r(NULL, ".", &sa);
                tb = strtok_r(NULL, ".", &sb);
            }
            for (; ta; ta = strtok_r(NULL, ".", &sa), d++)
                used += (size_t)snprintf(out + used, cap - used, "%*s%s:\n", 2 * d, "", ta);
            snprintf(section, sizeof section, "%s", sec);
        }
        for (const char *q = k->path; *q; q++)
            depth += *q == '.';
        const char *name = dot ? dot + 1 : k->path;
        const char *v = (const char *)cfg + k->off;
        char val[1024];
        switch (k->type) {
        case K_INT: snprintf(val, sizeof val, "%d", *(const int *)v); break;
        case K_LONG: snprintf(val, sizeof val, "%ld", *(const long *)v); break;
        case K_FLOAT: /* infinity in YAML's spelling, so the file reads back */
            if (isinf(*(const double *)v))
                snprintf(val, sizeof val, "%s.inf", *(const double *)v < 0 ? "-" : "");
            else
                snprintf(val, sizeof val, "%.17g", *(const double *)v);
            break;
        case K_BOOL: snprintf(val, sizeof val, "%s", *(const int *)v ? "true" : "false"); break;
        case K_ENUM: snprintf(val, sizeof val, "\"%s\"", cfg_names_name(k->names, *(const int *)v)); break;
        case K_STR: { /* YAML double-quoted: escape backslash and quote */
            size_t u = 0;
            val[u++] = '"';
            for (const char *c = v; *c && u + 3 < sizeof val; c++) {
                if (*c == '"' || *c == '\\')
                    val[u++] = '\\';
                val[u++] = *c;
            }
            val[u++] = '"';
            val[u] = '\0';
            break;
        }
        case K_FLOAT2:
            snprintf(val, sizeof val, "[%.17g, %.17g]", ((const double *)v)[0], ((const double *)v)[1]);
            break;
        case K_INT_LIST: {
            const cfg_int_list *l = (const cfg_int_list *)v;
            size_t u = (size_t)snprintf(val, sizeof val, "[");
            for (int j = 0; j < l->n; j++)
                u += (size_t)snprintf(val + u, sizeof val - u, "%s%d", j ? ", " : "", l->v[j]);
            snprintf(val + u, sizeof val - u, "]");
            break;
        }
        case K_STR_LIST: {
            const cfg_str_list *l = (const cfg_str_list *)v;
            size_t u = (size_t)snprintf(val, sizeof val, "[");
            for (int j = 0; j < l->n; j++)
                u += (size_t)snprintf(val + u, sizeof val - u, "%s%s", j ? ", " : "", l->items[j]);
            snprintf(val + u, sizeof val - u, "]");
            break;
        }
        }
        if (used + 2048 > cap)
            out = dllm_realloc(out, cap *= 2);
        used += (size_t)snprintf(out + used, cap - used, "%*s%s: %s\n", 2 * depth, "", name, val);
    }
    return out;
}
