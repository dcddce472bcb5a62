/* rl_run.c: setting up a run, checkpoints (save and resume), and teardown. */
#include "src/rl/rl_run.h"

#include "config.h"
#include "dllm/arch.h"
#include "dllm/transformer.h"
#include "src/cli/cli_util.h"
#include "src/comm/comm.h"
#include "src/comm/comm_device.h"
#include "src/run/opt_state.h"
#include "src/config/gen_settings.h"
#include "src/data/prompt.h"
#include "src/run/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- task data ------------------------------------------------------------------ */

static int load_items(rl_run *run, const char *path, uint64_t seed, size_t n,
                      dllm_task_items *out, dllm_err *err)
{
    const dllm_cfg *cfg = &run->cfg;
    dllm_task_source src = {.path = path[0] ? path : NULL, .seed = seed, .n = n,
                            .n_numbers = cfg->task.n_numbers, .max_blanks = cfg->task.max_blanks};
    if (run->custom) {
        if (!src.path && !dllm_custom_can_generate(run->custom))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "task custom: set task.train.path (a JSONL "
                                "file; the plugin, if any, has no generate)");
        return dllm_custom_load(run->custom, &src, out, err);
    }
    if (!src.path && !run->task->can_generate)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "task %s has no generator: set task.train.path and task.eval.path",
                            run->task->name);
    return dllm_task_load(run->task, &src, out, err);
}

/* A prompt that leaves no room for its completion in the model's context is
 * refused before anything runs: the model was never trained on positions past
 * max_sequence_length, and the canvas (prompt + gen_length) of a long one grows
 * every buffer of the step. path: the items' file (NULL: the generator). */
static int check_prompt_fits(const rl_run *run, const dllm_task_item *it, size_t i, int n,
                             const char *path, const char *gen_key, int gen, dllm_err *err)
{
    if (n + gen <= run->mc->max_seq_len)
        return 0;
    bool eval = !strcmp(gen_key, "eval.gen_length");
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "%s: %s item %zu (\"%.40s%s\"): its prompt of %d tokens (task.format %s) + "
                        "%s %d exceed the model's max_sequence_length %d: shorten or drop the "
                        "prompt, or lower %s",
                        path ? path : "the task's generator", eval ? "evaluation" : "training",
                        i + 1, it->question, strlen(it->question) > 40 ? "..." : "", n,
                        cfg_names_name(&cfg_names_task_format, run->cfg.task.format), gen_key, gen,
                        run->mc->max_seq_len, gen_key);
}

static int encode_items(rl_run *run, const dllm_task_items *items, rl_prompt **out,
                        const char *path, const char *gen_key, int gen, dllm_err *err)
{
    rl_prompt *ps = dllm_calloc(items->n ? items->n : 1, sizeof *ps);
    for (size_t i = 0; i < items->n; i++) {
        const dllm_task_item *it = &items->items[i];
        char *text = rl_task_format(run, it, err);
        int rc = text ? prompt_encode(run->tok, run->chat, run->mc, text, &ps[i].ids, &ps[i].n, err)
                      : err->code;
        free(text);
        if (!rc && gen_key && (rc = check_prompt_fits(run, it, i, ps[i].n, path, gen_key, gen, err)))
            free(ps[i].ids);
        size_t unk = !rc && path ? prompt_unknown_chars(run->tok, it->question, ps[i].ids,
                                                        (size_t)ps[i].n)
                                 : 0;
        if (unk) {
            free(ps[i].ids);
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: item %zu (\"%.40s\"): %zu character(s) the tokenizer cannot "
                              "represent (non-ASCII under the char tokenizer) would become <|unk|>",
                              path, i + 1, it->question, unk);
        }
        if (rc) {
            for (size_t j = 0; j < i; j++)
                free(ps[j].ids);
            free(ps);
            return rc;
        }
    }
    *out = ps;
    return 0;
}

char *rl_task_format(rl_run *run, const dllm_task_item *it, dllm_err *err)
{
    if (run->cfg.task.format != CFG_FORMAT_D1)
        return dllm_strdup(it->question);
    return run->custom ? dllm_custom_format(run->custom, it, err) : run->task->format(it);
}

int rl_task_score(rl_run *run, const dllm_task_item *it, const char *text, size_t len,
                  double *reward, int *correct, dllm_err *err)
{
    if (run->custom)
        return dllm_custom_score(run->custom, it, text, len, reward, correct, err);
    *correct = run->task->correct(it, text, len);
    /* task.reward.kind partial: the config check allowed it only where it exists */
    *reward = run->cfg.task.reward.kind == CFG_REWARD_PARTIAL && run->task->partial
                  ? run->task->partial(it, text, len)
                  : run->task->reward(it, text, len);
    return 0;
}

/* ---- setup ------------------------------------------------------------------------ */

/* Estimators and samplers of the run from its config. */
static int setup_estimators(rl_run *run, dllm_err *err)
{
    const dllm_cfg *c = &run->cfg;
    const bool ar = !dllm_policy_is_diffusion(run->pol);
    dllm_lik_cfg base = {.mc = c->likelihood.mc_samples, .shrink = c->likelihood.shrink,
                         .temperature = c->likelihood.temperature,
                         .mask_id = run->mc->mask_token_id, .vocab = run->mc->embedding_size};
    run->lik_w = run->lik_pol = base;
    if (ar) {
        run->lik_w.kind = run->lik_pol.kind = EST_AR_EXACT;
    } else {
        run->lik_w.kind = c->correction.estimator;
        run->lik_pol.kind = c->grpo.logp_estimator;
        run->lik_pol.p_mask_prompt = c->grpo.p_mask_prompt;
        /* per-token ratios and weights need every token scored once */
        if (c->grpo.loss.ratio == GRPO_RATIO_TOKEN && run->lik_pol.kind != EST_ONE_STEP)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "grpo.ratio: token needs grpo.logp_estimator one_step for a "
                                "diffusion model");
        if (c->correction.c.level == CORR_LEVEL_TOKEN && run->lik_w.kind != EST_ONE_STEP)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "correction.level: token needs correction.estimator one_step for a "
                                "diffusion model");
    }
    run->shared_plan = run->lik_w.kind == run->lik_pol.kind && run->lik_pol.p_mask_prompt == 0;
    dllm_sampler_cfg s = {.gen_length = c->rollout.gen_length, .block_length = c->rollout.block_length,
                          .steps = c->rollout.steps, .temperature = c->rollout.temperature,
                          .remasking = c->rollout.remasking,
                          .cfg_scale = c->rollout.cfg_scale,
                          .logits_eos_inf = c->rollout.logits_eos_inf,
                          .confidence_eos_eot_inf = c->rollout.confidence_eos_eot_inf,
                          .mask_id = run->mc->mask_token_id, .eos_id = run->mc->eos_token_id,
                          .eot_id = dllm_tokenizer_token_to_id(run->tok, "<|eot_id|>"),
                          .vocab = run->mc->embedding_size};
    s.mask_token = c->rollout.mask_token == CFG_MASK_TOKEN_FORBID ? DLLM_MASK_TOKEN_FORBID
                                                                  : DLLM_MASK_TOKEN_ALLOW;
    s.cache = c->rollout.cache;
    s.threshold = c->rollout.threshold;
    s.cache_refresh = c->rollout.cache_refresh;
    run->sampler = s;
    s.gen_length = c->eval.gen_length;
    s.block_length = c->eval.block_length;
    s.steps = c->eval.steps;
    s.temperature = c->eval.temperature;
    s.remasking = REMASK_LOW_CONFIDENCE;
    s.mask_token = c->eval.mask_token == CFG_MASK_TOKEN_FORBID ? DLLM_MASK_TOKEN_FORBID
                                                               : DLLM_MASK_TOKEN_ALLOW;
    s.cache = c->eval.cache;
    s.threshold = c->eval.threshold;
    s.cache_refresh = c->eval.cache_refresh;
    run->eval_sampler = s;
    /* cached and parallel denoising: LLaDA's sampler (docs/METHOD.md §2a) */
    const dllm_arch_desc *arch = dllm_arch_get(run->mc->arch);
    for (int k = 0; k < 2; k++) {
        const char *sec = k ? "eval" : "rollout";
        const dllm_sampler_cfg *q = k ? &run->eval_sampler : &run->sampler;
        const char *what = q->cache != DLLM_CACHE_NONE ? "cache" : "threshold";
        if (q->cache == DLLM_CACHE_NONE && q->cache_refresh > 0)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s.cache_refresh %d: refreshes a cache; "
                                "%s.cache is none", sec, q->cache_refresh, sec);
        if (q->cache == DLLM_CACHE_NONE && q->threshold == 0)
            continue;
        if (ar)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s.%s: a denoising sampler's setting; "
                                "%s decodes autoregressively", sec, what, arch->name);
        if (arch->sampler == DLLM_SAMPLER_DREAM)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s.%s: not for Dream's sampler "
                                "(docs/METHOD.md §2a)", sec, what);
        const int gl = k ? c->eval.gen_length : c->rollout.gen_length;
        const int bl = k ? c->eval.block_length : c->rollout.block_length;
        if (q->cache != DLLM_CACHE_NONE && gl % bl)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s.block_length %d must divide "
                                "%s.gen_length %d under %s.cache %s", sec, bl, sec, gl, sec,
                                dllm_cache_name(q->cache));
    }
    /* mu is the sampler: under the trajectory estimator its recorded probabilities (at
     * temperature 1) are l_mu, the replay at the rollout precision l_mu_exact */
    run->sampler_probs = (run->sampler.cache != DLLM_CACHE_NONE || run->sampler.threshold > 0) &&
                         run->lik_w.kind == EST_TRAJECTORY;
    if (run->sampler_probs && c->likelihood.temperature != 1.0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "likelihood.temperature %g: must be 1 with the "
                            "trajectory estimator on cached or parallel rollouts (the sampler's "
                            "probabilities are at temperature 1)", c->likelihood.temperature);
    if (dllm_sampler_check(&run->sampler, err))
        return dllm_err_prefix(err, "rollout");
    if (dllm_sampler_check(&run->eval_sampler, err))
        return dllm_err_prefix(err, "eval");
    return 0;
}

int rl_run_open(rl_run *run, const dllm_cfg *cfg, const char *run_dir, dllm_err *err)
{
    memset(run, 0, sizeof *run);
    run->cfg = *cfg;
    snprintf(run->run_dir, sizeof run->run_dir, "%s", run_dir);
    run->rank = comm_rank();
    run->size = comm_size();
    run->t_start = dllm_now();
    run->max_canvas = cfg->train.micro_batch;
    if (cfg->grpo.prompts_per_step % run->size)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "grpo.prompts_per_step %d is not divisible by the %d ranks",
                            cfg->grpo.prompts_per_step, run->size);
    const char *task_name = cfg_names_name(&cfg_names_task, cfg->task.name);
    if (cfg->task.name == CFG_TASK_CUSTOM) {
        /* before the model: a reward that cannot start stops the run at once */
        dllm_custom_cfg cc = {.prompt_field = cfg->task.fields.prompt,
                              .reference_field = cfg->task.fields.reference,
                              .command = cfg->task.reward.command,
                              .timeout_s = cfg->task.reward.timeout_s, .plugin = cfg->task.plugin};
        if (dllm_custom_open(&run->custom, &cc, err))
            return err->code;
        run->task = &dllm_task_custom;
    } else {
        run->task = dllm_task_find(task_name);
    }
    if (!run->task)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.name: unknown task '%s'", task_name);
    const char *targets[CFG_LIST_MAX];
    for (int i = 0; i < cfg->model.lora.targets.n; i++)
        targets[i] = cfg->model.lora.targets.items[i];
    /* the policy's API takes the YAML names */
    dllm_policy_cfg pc = {.path = cfg->model.path,
                          .preset = cfg_names_name(&cfg_names_preset, cfg->model.preset),
                          .arch = cfg_names_name(&cfg_names_arch, cfg->model.arch),
                          .seed = (uint64_t)cfg->seed,
                          .lora_rank = cfg->model.lora.rank, .lora_alpha = cfg->model.lora.alpha,
                          .lora_targets = targets, .n_lora_targets = cfg->model.lora.targets.n,
                          .trainer = cfg_names_name(&cfg_names_trainer_precision,
                                                    cfg->model.trainer_precision),
                          .rollout = cfg_names_name(&cfg_names_rollout_precision, cfg->rollout.precision),
                          .fp8_format = cfg_names_name(&cfg_names_fp8_format, cfg->rollout.fp8.format),
                          .fp8_scaling = cfg_names_name(&cfg_names_fp8_scaling, cfg->rollout.fp8.scaling),
                          .fp8_pow2_scale = cfg->rollout.fp8.pow2_scale,
                          .int8_scaling = cfg_names_name(&cfg_names_int8_scaling,
                                                         cfg->rollout.int8.scaling),
                          .nvfp4_scaling = cfg_names_name(&cfg_names_nvfp4_scaling,
                                                          cfg->rollout.nvfp4.scaling),
                          /* device: cuda puts the rollouts and the likelihoods on the
                           * device, and the update too where it can run there (below) */
                          .device = cfg->device == CFG_DEVICE_CUDA ? "cuda" : "cpu",
                          .device_flag = "device"};
    /* several ranks on devices: each its own, made current before the policy puts
     * anything there */
    if (cfg->device == CFG_DEVICE_CUDA && comm_device_select(NULL, err))
        return err->code;
    if (dllm_policy_open(&run->pol, &pc, err))
        return err->code;
    int every = 0; /* train.recompute: checked at load */
    dllm_cfg_recompute_every(cfg->train.recompute, &every);
    if (dllm_policy_set_recompute(run->pol, every))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "train.recompute: '%s' refused",
                            cfg->train.recompute);
    dllm_dream_cfg dc = {.eps = cfg->rollout.dream.eps, .alg_temp = cfg->rollout.dream.alg_temp,
                         .top_p = 1, .top_k = cfg->rollout.dream.top_k};
    dc.alg = cfg->rollout.dream.alg;
    dllm_policy_set_dream(run->pol, &dc);
    run->mc = dllm_policy_config(run->pol);
    /* tokenizer: the model's, or the char tokenizer of a preset (written into the run) */
    char tp[4200];
    if (cfg->model.path[0]) {
        snprintf(tp, sizeof tp, "%s/tokenizer.json", cfg->model.path);
    } else {
        snprintf(tp, sizeof tp, "%s/tokenizer.json", run_dir);
        if (run->rank == 0 && dllm_tokenizer_write_char(tp, err))
            return err->code;
        comm_barrier();
    }
    if (dllm_tokenizer_load(&run->tok, tp, err))
        return err->code;
    if (cfg->task.chat == CFG_CHAT_AUTO) {
        if (cfg->model.path[0]) {
            if (dllm_chat_format_from_dir(cfg->model.path, &run->chat, err))
                return err->code;
        } else {
            run->chat = DLLM_CHAT_PLAIN;
        }
    } else {
        run->chat = (dllm_chat_format)cfg->task.chat;
    }
    if (setup_estimators(run, err))
        return err->code;
    /* data: the training items and held-out evaluation items */
    if (load_items(run, cfg->task.train.path, (uint64_t)cfg->seed, (size_t)cfg->task.train.n,
                   &run->train, err))
        return err->code;
    /* a custom task without an eval file and without a generator evaluates on the
     * training file's first eval.n items (docs/CUSTOM_TASKS.md) */
    const char *eval_path = cfg->task.eval.path;
    if (run->custom && !eval_path[0] && !dllm_custom_can_generate(run->custom))
        eval_path = cfg->task.train.path;
    if (load_items(run, eval_path, (uint64_t)cfg->seed ^ 0x5eed0e7a1ULL,
                   (size_t)cfg->eval.n, &run->eval, err))
        return err->code;
    while (run->eval.n > (size_t)cfg->eval.n) /* first eval.n of a file */
        dllm_task_item_free(&run->eval.items[--run->eval.n]);
    if (run->train.n < (size_t)cfg->grpo.prompts_per_step)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task: %zu training items, fewer than "
                            "grpo.prompts_per_step %d", run->train.n, cfg->grpo.prompts_per_step);
    if (encode_items(run, &run->train, &run->train_prompts,
                     cfg->task.train.path[0] ? cfg->task.train.path : NULL,
                     /* training prompts are rolled out only when a step runs */
                     cfg->grpo.steps > 0 ? "rollout.gen_length" : NULL, cfg->rollout.gen_length,
                     err) ||
        encode_items(run, &run->eval, &run->eval_prompts,
                     cfg->task.eval.path[0] ? cfg->task.eval.path : NULL, "eval.gen_length",
                     cfg->eval.gen_length, err))
        return err->code;
    /* optimizer, reference policy */
    dllm_optim_trainable(dllm_policy_optim(run->pol), &run->n_param);
    if (cfg->grpo.loss.beta > 0) {
        run->ref_params = dllm_malloc(sizeof(float) * run->n_param);
        dllm_optim_state_read(dllm_policy_optim(run->pol), DLLM_STATE_PARAMS, 0, run->n_param,
                              run->ref_params);
    }
    /* on a device the update runs there too; several ranks sum the device gradients with
     * NCCL (rl_step.c), every rank alike (same config) */
    if (dllm_policy_device(run->pol) &&
        (dllm_tf_device_train(dllm_policy_model(run->pol), err) || comm_device_open(err)))
        return err->code;
    return dllm_policy_sync_rollout(run->pol, NULL, err);
}

int rl_max_prompt(const rl_run *run)
{
    int P = 1;
    for (size_t i = 0; i < run->train.n; i++)
        P = run->train_prompts[i].n > P ? run->train_prompts[i].n : P;
    return P;
}

void rl_run_close(rl_run *run)
{
    if (run->log)
        h5log_close(run->log);
    tb_writer_close(run->tb);
    for (size_t i = 0; run->train_prompts && i < run->train.n; i++)
        free(run->train_prompts[i].ids);
    for (size_t i = 0; run->eval_prompts && i < run->eval.n; i++)
        free(run->eval_prompts[i].ids);
    free(run->train_prompts);
    free(run->eval_prompts);
    dllm_task_items_free(&run->train);
    dllm_task_items_free(&run->eval);
    dllm_custom_close(run->custom);
    dllm_tokenizer_free(run->tok);
    comm_device_close();
    if (run->pol)
        dllm_policy_free(run->pol);
    free(run->ref_params);
    free(run->old_params);
    memset(run, 0, sizeof *run);
}

/* ---- the config of a run, its latest checkpoint ---------------------------------- */

/* Keys a resumed run may change: they extend it or change what is written
 * about it, never what a step computes (a reward program's timeout only decides
 * whether a slow answer stops the run). */
static const char *const resume_keys[] = {"grpo.steps",  "eval.every",       "log.every",
                                          "checkpoint.every", "checkpoint.keep",
                                          "task.reward.timeout_s"};
enum { N_RESUME_KEYS = sizeof resume_keys / sizeof resume_keys[0] };

bool rl_resume_key_ok(const char *assignment)
{
    return run_dir_key_in(assignment, resume_keys, N_RESUME_KEYS);
}

int rl_config_load(dllm_cfg *cfg, const char *path, const char *resume_dir, const char *const *sets,
                   int nsets, dllm_err *err)
{
    dllm_cfg_defaults(cfg);
    if (!resume_dir) {
        dllm_cfg_keys_set count;
        if (dllm_cfg_load_counted(cfg, path, &count, err) ||
            dllm_cfg_require_kind(&count, path, true, err) ||
            run_dir_apply_sets(cfg, sets, nsets, err) || dllm_cfg_absolute_paths(cfg, err))
            return err->code;
        return dllm_cfg_validate(cfg, err);
    }
    if (run_dir_resume_config(cfg, path, resume_dir, sets, nsets, resume_keys, N_RESUME_KEYS,
                              "train", err))
        return err->code;
    return dllm_cfg_validate(cfg, err);
}

int rl_run_step_of(const char *ckpt)
{
    const char *b = strrchr(ckpt, '/');
    b = b ? b + 1 : ckpt;
    return strncmp(b, "step-", 5) ? -1 : atoi(b + 5);
}

int rl_latest_checkpoint(const char *run_dir, char *ckpt, size_t n)
{
    char link[4200];
    snprintf(link, sizeof link, "%s/ckpt/latest", run_dir);
    char target[256];
    ssize_t k = readlink(link, target, sizeof target - 1);
    if (k <= 0)
        return -1;
    target[k] = '\0';
    snprintf(ckpt, n, "%s/ckpt/%s", run_dir, target);
    return 0;
}

/* ---- saving and loading checkpoints ------------------------------------------- */

/* Writes every file of the checkpoint of `step` into the directory tmp. */
static int checkpoint_files(rl_run *run, int64_t step, const char *tmp, dllm_err *err)
{
    char path[4600];
    /* weights for people: the adapter (LoRA) or the full HF model */
    st_dtype dt = run->cfg.model.dtype;
    int rc = dllm_policy_has_lora(run->pol) ? dllm_policy_save_adapter(run->pol, tmp, err)
                                            : dllm_policy_save(run->pol, tmp, dt, err);
    if (rc)
        return rc;
    char tok_from[4200], tok_to[4600];
    if (run->cfg.model.path[0])
        snprintf(tok_from, sizeof tok_from, "%s/tokenizer.json", run->cfg.model.path);
    else
        snprintf(tok_from, sizeof tok_from, "%s/tokenizer.json", run->run_dir);
    snprintf(tok_to, sizeof tok_to, "%s/tokenizer.json", tmp);
    if (cli_copy_file(tok_from, tok_to, err))
        return err->code;
    /* the sampler settings the model is evaluated with, so `generate --model CKPT`
     * needs no flags (src/config/gen_settings.h) */
    ckpt_generation g;
    ckpt_generation_from_cfg(&g, &run->cfg, dllm_policy_is_diffusion(run->pol),
                             dllm_chat_format_name(run->chat));
    ckpt_generation_set_task(&g, &run->cfg); /* what `eval --task` of the model uses */
    if (dllm_policy_sampler(run->pol) == DLLM_SAMPLER_DREAM)
        ckpt_generation_set_dream(&g, &run->cfg);
    if (ckpt_write_generation(tmp, &g, err))
        return err->code;
    /* exact state for resuming: trainable vector, AdamW moments (streamed from wherever
     * the model keeps them: on a device its copies are the masters), reference */
    opt_state os = {.n = run->n_param, .p = run->pol,
                    .extra_name = run->ref_params ? "reference" : NULL, .extra = run->ref_params};
    snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
    if ((rc = opt_state_save(&os, path, err)))
        return rc;
    json_t *st = json_pack("{s:I, s:I, s:f, s:I, s:I, s:s}", "step", (json_int_t)step, "opt_step",
                           (json_int_t)run->opt_step, "alpha_prev", run->alpha_prev,
                           "ref_synced_at", (json_int_t)run->ref_synced_at, "seed",
                           (json_int_t)run->cfg.seed, "version", PACKAGE_VERSION);
    snprintf(path, sizeof path, "%s/state.json", tmp);
    rc = json_dump_file(st, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(st);
    if (rc)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: write failed", path);
    return 0;
}

int rl_checkpoint_save(rl_run *run, int64_t step, dllm_err *err)
{
    if (run->rank != 0)
        return 0;
    char dir[4200], tmp[4400], fin[4400];
    snprintf(dir, sizeof dir, "%s/ckpt", run->run_dir);
    if (cli_mkdirs(dir, err))
        return err->code;
    snprintf(tmp, sizeof tmp, "%s/.step-%lld.tmp", dir, (long long)step);
    snprintf(fin, sizeof fin, "%s/step-%lld", dir, (long long)step);
    cli_rm_tree(tmp);
    if (cli_mkdirs(tmp, err))
        return err->code;
    /* a checkpoint that cannot be written whole (a full disk) leaves nothing
     * behind: ckpt/latest still names the last complete one */
    int rc = checkpoint_files(run, step, tmp, err);
    if (rc) {
        cli_rm_tree(tmp);
        return rc;
    }
    cli_rm_tree(fin);
    if (rename(tmp, fin))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", fin, strerror(errno));
    char link[4400], tmplink[4400], target[64];
    snprintf(link, sizeof link, "%s/latest", dir);
    snprintf(tmplink, sizeof tmplink, "%s/.latest.tmp", dir);
    snprintf(target, sizeof target, "step-%lld", (long long)step);
    unlink(tmplink);
    if (symlink(target, tmplink) || rename(tmplink, link))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", link, strerror(errno));
    /* keep the newest checkpoint.keep */
    int keep = run->cfg.checkpoint.keep;
    if (keep > 0) {
        DIR *d = opendir(dir);
        long long steps[4096];
        int ns = 0;
        for (struct dirent *e; d && (e = readdir(d)) && ns < 4096;) {
            long long s;
            if (sscanf(e->d_name, "step-%lld", &s) == 1)
                steps[ns++] = s;
        }
        if (d)
            closedir(d);
        for (int i = 0; i < ns; i++) {
            int newer = 0;
            for (int j = 0; j < ns; j++)
                newer += steps[j] > steps[i];
            if (newer >= keep) {
                char old[4400];
                snprintf(old, sizeof old, "%s/step-%lld", dir, steps[i]);
                cli_rm_tree(old);
            }
        }
    }
    return 0;
}

int rl_checkpoint_load(rl_run *run, const char *ckpt_dir, dllm_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/state.json", ckpt_dir);
    json_error_t je;
    json_t *st = json_load_file(path, 0, &je);
    if (!st)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    json_int_t step = -1, opt = -1, ref_at = 0;
    double alpha = 0;
    if (json_unpack(st, "{s:I, s:I, s:F, s:I}", "step", &step, "opt_step", &opt, "alpha_prev",
                    &alpha, "ref_synced_at", &ref_at)) {
        json_decref(st);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: missing step, opt_step, alpha_prev or "
                            "ref_synced_at", path);
    }
    json_decref(st);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", ckpt_dir);
    opt_state os = {.n = run->n_param, .p = run->pol,
                    .extra_name = run->ref_params ? "reference" : NULL, .extra = run->ref_params};
    int rc = opt_state_load(&os, path, err);
    if (rc)
        return rc;
    run->step = step;
    run->opt_step = (long)opt;
    run->alpha_prev = alpha;
    run->ref_synced_at = ref_at;
    return dllm_policy_sync_rollout(run->pol, NULL, err);
}
