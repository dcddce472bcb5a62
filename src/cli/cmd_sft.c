/* dllm-rl sft: supervised fine-tuning. LLaDA: masked diffusion (docs/METHOD.md §1);
 * Qwen3 (autoregressive): next-token cross-entropy on the answer tokens, the
 * mean over the batch's answer tokens.
 *
 * Per step: a batch of prompt/answer pairs (epoch-shuffled, seeded), padded
 * with EOS to data.answer_length answer tokens when set, else to the batch's
 * longest pair (the padding counts as answer, as in
 * LLaDA's SFT); per sequence t ~ U(0,1), p = (1 - 1e-3) t + 1e-3, each answer
 * token masked with probability p; loss = mean over sequences of
 * sum_masked CE / p / answer_len. AdamW with warmup and global-norm clipping.
 * Writes RUN_DIR = log.dir/experiment: config.yaml, sft_log.jsonl, and
 * checkpoints ckpt/step-N in HF layout (ckpt/latest points to the newest), each
 * with tokenizer.json, generation.json (the sampler settings of the data it was
 * trained on) and the exact training state (optimizer.safetensors, state.json),
 * so --resume continues an interrupted run bit for bit.
 * With sft.eval_every the checkpoint of every N-th step (and of the last) is evaluated
 * on held-out validation items as `dllm-rl eval` evaluates it, logged; with
 * sft.keep_best ckpt/best names the checkpoint of the best validation accuracy: on a
 * small labelled set SFT overfits, and its last step is not its best model.
 * With device: cuda the forward, its backward, the norm, the clip and AdamW run on the
 * device through the transformer core's device training (dllm_tf_device_train, as
 * `train` uses it); the new parameters come down after each step, so checkpoints keep
 * the host format, and the AdamW moments come down for a checkpoint and go up on
 * resume. */
#include "dllm/policy_sft.h"
#include "src/plan/mem_plan.h"
#include "src/plan/plan_memory.h"
#include "dllm/transformer.h"
#include "dllm/tokenizer.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "src/cli/cli_util.h"
#include "src/run/opt_state.h"
#include "src/run/run_dir.h"
#include "src/run/run_stop.h"
#include "src/cli/commands.h"
#include "src/config/gen_settings.h"
#include "src/config/yaml_config.h"
#include "src/data/sft_data.h"
#include "src/log/tb_events.h"
#include "src/rl/rl.h"
#include "src/rl/rl_run.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: dllm-rl sft CONFIG.yaml [--set key.path=value ...] [--force] [--quiet]\n"
    "                   [--max-gpu-memory SIZE]\n"
    "       dllm-rl sft --resume RUN_DIR [--set key.path=value ...] [--allow-edited-config]\n"
    "                   [--quiet] [--max-gpu-memory SIZE]\n"
    "\n"
    "SFT on data.train (JSONL lines {\"prompt\": ..., \"answer\": ...}): masked diffusion\n"
    "for a LLaDA model, next-token cross-entropy on the answer for a Qwen3 model.\n"
    "Keys:\n"
    "  experiment, seed, device (cuda: the forward, backward and AdamW on the device)\n"
    "  model.path | model.arch + model.preset, model.dtype, model.trainer_precision,\n"
    "  model.lora.rank, model.lora.alpha, model.lora.targets\n"
    "  data.train, data.max_len, data.answer_length (EOS-pad answers to the sampling\n"
    "    length; masked diffusion only)\n"
    "  sft.steps, sft.batch_size, sft.chat\n"
    "  sft.eval_every (validation accuracy every N steps and at the end; 0: off),\n"
    "    sft.eval_n, sft.eval_seed (the first N held-out items of the task.* task for\n"
    "    that seed, as `dllm-rl eval --n N --seed S`: keep it off the RL seeds),\n"
    "    sft.keep_best (ckpt/best: the checkpoint of the best validation accuracy,\n"
    "    the earliest of equals; never removed by checkpoint.keep)\n"
    "  optim.lr, optim.warmup, optim.betas, optim.eps, optim.weight_decay,\n"
    "  optim.grad_clip, optim.schedule\n"
    "  eval.gen_length, eval.block_length, eval.steps, eval.temperature (the\n"
    "    checkpoints' generation.json when eval.gen_length equals the answer length)\n"
    "  log.dir, log.every (progress every N steps; log.trajectories and\n"
    "  log.grad_cosine are train's), log.tensorboard, checkpoint.every, checkpoint.keep\n"
    "Output: RUN_DIR = log.dir/experiment with config.yaml, sft_log.jsonl and\n"
    "ckpt/step-N (HF weights, tokenizer.json, generation.json, optimizer.safetensors,\n"
    "state.json; ckpt/latest points to the newest); with log.tensorboard: true also\n"
    "events.out.tfevents.* (sft_log.jsonl's values as TensorBoard scalars sft/<name>).\n"
    "An existing non-empty RUN_DIR is refused: --force replaces it (the new run is\n"
    "written beside it, log.dir/.NAME.force, and replaces it once it has its first\n"
    "step; nothing of the old run is kept), --resume RUN_DIR continues it from\n"
    "ckpt/latest with its stored config.yaml (optimizer state, step and data order\n"
    "restored: the result equals an uninterrupted run's). A resumed run keeps its\n"
    "config: --set may change only sft.steps (to extend it), log.every,\n"
    "checkpoint.every and checkpoint.keep, and a config.yaml edited by hand is refused\n"
    "unless --allow-edited-config. experiment is a plain directory name. One process\n"
    "writes a run directory at a time (RUN_DIR/.lock holds its pid); a start that fails\n"
    "before its first step removes what it wrote. Ctrl-C or SIGTERM stops at the next\n"
    "step with a checkpoint and the command that resumes (exit 1).\n"
    "On a device (device: cuda), or with --max-gpu-memory SIZE (default 80GB; GB, GiB,\n"
    "MB, ... as `dllm-rl plan`), the run's device memory -- the model, the device\n"
    "trainer, one batch of data.max_len tokens forward and backward, AdamW, and with\n"
    "validation the evaluated checkpoint's model and rollouts beside it -- recorded as\n"
    "`dllm-rl plan` records a run's, is printed first, and a peak over the cap is refused\n"
    "(exit 2) before anything is written.\n";

typedef struct {
    const dllm_cfg *cfg;
    char run_dir[4096];
    char tok_path[4096]; /* tokenizer.json copied into every checkpoint */
    ckpt_generation gen; /* generation.json of every checkpoint */
} sft_run;

/* Where the run stands after a step: what a checkpoint must hold to resume it. */
typedef struct {
    int step, epoch, cursor;
    double loss_acc, elapsed;
    long tokens_acc;
    int n_acc;
} sft_state;

static int save_state(const char *dir, const sft_state *s, const opt_state *os, dllm_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    int rc = opt_state_save(os, path, err);
    if (rc)
        return rc;
    /* the same step/opt_step keys as the RL trainer's state.json */
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:f, s:I, s:i, s:f}", "kind", "sft", "step",
                          s->step, "opt_step", s->step, "epoch", s->epoch, "cursor", s->cursor,
                          "loss_acc", s->loss_acc, "tokens_acc", (json_int_t)s->tokens_acc,
                          "n_acc", s->n_acc, "elapsed_s", s->elapsed);
    snprintf(path, sizeof path, "%s/state.json", dir);
    rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    return rc ? dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: write failed", path) : 0;
}

static int load_state(const char *dir, sft_state *s, const opt_state *os, dllm_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/state.json", dir);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s", path, je.line, je.column,
                            je.text);
    json_int_t tok = 0;
    const char *kind = "";
    int bad = json_unpack(o, "{s:s, s:i, s:i, s:i, s:F, s:I, s:i, s:F}", "kind", &kind, "step",
                          &s->step, "epoch", &s->epoch, "cursor", &s->cursor, "loss_acc",
                          &s->loss_acc, "tokens_acc", &tok, "n_acc", &s->n_acc, "elapsed_s",
                          &s->elapsed) ||
              strcmp(kind, "sft");
    json_decref(o);
    if (bad)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: not the state of an sft checkpoint (kind, step, epoch, cursor, "
                            "loss_acc, tokens_acc, n_acc, elapsed_s)", path);
    s->tokens_acc = (long)tok;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    return opt_state_load(os, path, err);
}

/* ckpt/step-N written under a temporary name, then renamed; latest re-pointed;
 * older checkpoints beyond checkpoint.keep removed. */
static int save_checkpoint(const sft_run *r, const dllm_policy *m, const sft_state *s,
                           const opt_state *os, dllm_err *err)
{
    char dir[4096], tmp[4200], final_[4200], link[4200], tmplink[4300];
    const int step = s->step;
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    if (cli_mkdirs(dir, err))
        return err->code;
    snprintf(tmp, sizeof tmp, "%s/.step-%d.tmp", dir, step);
    snprintf(final_, sizeof final_, "%s/step-%d", dir, step);
    cli_rm_tree(tmp);
    if (cli_mkdirs(tmp, err))
        return err->code;
    st_dtype dt = r->cfg->model.dtype;
    char tokdst[4300];
    snprintf(tokdst, sizeof tokdst, "%s/tokenizer.json", tmp);
    /* one that cannot be written whole (a full disk) leaves nothing behind: latest
     * still names the last complete one */
    if (dllm_policy_save(m, tmp, dt, err) || cli_copy_file(r->tok_path, tokdst, err) ||
        ckpt_write_generation(tmp, &r->gen, err) || save_state(tmp, s, os, err)) {
        cli_rm_tree(tmp);
        return err->code;
    }
    cli_rm_tree(final_);
    if (rename(tmp, final_))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", final_, strerror(errno));
    snprintf(link, sizeof link, "%s/latest", dir);
    snprintf(tmplink, sizeof tmplink, "%s/.latest.tmp", dir);
    char target[64];
    snprintf(target, sizeof target, "step-%d", step);
    unlink(tmplink);
    if (symlink(target, tmplink) || rename(tmplink, link))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", link, strerror(errno));
    int keep = r->cfg->checkpoint.keep, every = r->cfg->checkpoint.every;
    /* with validation, prune_checkpoints runs once the step's evaluation is known */
    if (keep > 0 && every > 0 && r->cfg->sft.eval_every == 0)
        for (int st = step - keep * every; st > 0; st -= every) {
            char old[4200];
            snprintf(old, sizeof old, "%s/step-%d", dir, st);
            cli_rm_tree(old);
        }
    return 0;
}

/* The model (a policy: masked-diffusion or next-token SFT by its architecture)
 * and its tokenizer (a preset gets the char tokenizer, written to the run). */
static int load_model(const dllm_cfg *cfg, dllm_policy **m, dllm_tokenizer **tok, char *tok_path,
                      size_t tok_len, const char *run_dir, dllm_err *err)
{
    const char *targets[CFG_LIST_MAX];
    for (int i = 0; i < cfg->model.lora.targets.n; i++)
        targets[i] = cfg->model.lora.targets.items[i];
    dllm_policy_cfg pc = {.path = cfg->model.path,
                          .preset = cfg_names_name(&cfg_names_preset, cfg->model.preset),
                          .arch = cfg_names_name(&cfg_names_arch, cfg->model.arch),
                          .seed = (uint64_t)cfg->seed,
                          .lora_rank = cfg->model.lora.rank, .lora_alpha = cfg->model.lora.alpha,
                          .lora_targets = targets, .n_lora_targets = cfg->model.lora.targets.n,
                          .trainer = cfg_names_name(&cfg_names_trainer_precision,
                                                    cfg->model.trainer_precision),
                          .rollout = "trainer",
                          .device = cfg->device == CFG_DEVICE_CUDA ? "cuda" : "cpu",
                          .device_flag = "device"};
    if (dllm_policy_open(m, &pc, err))
        return err->code;
    /* on a device the update runs there too */
    if (dllm_policy_device(*m) && dllm_tf_device_train(dllm_policy_model(*m), err))
        return err->code;
    if (cfg->model.path[0]) {
        snprintf(tok_path, tok_len, "%s/tokenizer.json", cfg->model.path);
    } else {
        snprintf(tok_path, tok_len, "%s/tokenizer.json", run_dir);
        if (dllm_tokenizer_write_char(tok_path, err))
            return err->code;
    }
    return dllm_tokenizer_load(tok, tok_path, err);
}

/* Validation (sft.eval_every) and keep-best (sft.keep_best). */
typedef struct {
    int best_step;   /* 0: no evaluation yet */
    double best_acc;
    int last_step;   /* the last step evaluated */
} sft_valid;

static bool is_eval_step(const dllm_cfg *cfg, int step)
{
    return cfg->sft.eval_every > 0 && (step % cfg->sft.eval_every == 0 || step == cfg->sft.steps);
}

/* The checkpoint ckpt evaluated as `dllm-rl eval --model CKPT --task T --n sft.eval_n
 * --seed sft.eval_seed` evaluates it (the same items, sampler settings from its
 * generation.json, task settings from task.*), so the number is the one a later
 * evaluation of that checkpoint gives, and the model RL starts from. */
static int validate(const sft_run *r, const char *ckpt, double *acc, double *se, double *rew,
                    dllm_err *err)
{
    const dllm_cfg *cfg = r->cfg;
    dllm_cfg ec;
    dllm_cfg_defaults(&ec);
    ec.task = cfg->task;
    ec.eval = cfg->eval;
    ec.device = cfg->device;
    ec.model.trainer_precision = cfg->model.trainer_precision;
    snprintf(ec.model.path, sizeof ec.model.path, "%s", ckpt);
    ec.seed = cfg->sft.eval_seed;
    ec.eval.n = cfg->sft.eval_n;
    ckpt_generation g = r->gen;
    int grc = ckpt_read_generation(ckpt, &g, err);
    if (grc > 0)
        return grc;
    ec.eval.gen_length = g.gen_length;
    ec.eval.block_length = g.block_length;
    ec.eval.steps = g.steps;
    ec.eval.temperature = g.temperature;
    if (g.dream) {
        ec.rollout.dream.alg = g.dcfg.alg;
        ec.rollout.dream.eps = g.dcfg.eps;
        ec.rollout.dream.alg_temp = g.dcfg.alg_temp;
        ec.rollout.dream.top_k = g.dcfg.top_k;
    }
    /* no rollout copy and one training item: only the evaluation is used */
    ec.rollout.precision = CFG_ROLLOUT_TRAINER;
    ec.eval.precision = CFG_EVAL_TRAINER;
    ec.task.train.n = 1;
    ec.grpo.prompts_per_step = 1;
    ec.grpo.steps = 0;
    rl_run run;
    int rc = rl_run_open(&run, &ec, r->run_dir, err);
    if (!rc && run.eval.n == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "sft.eval_every: task %s has no held-out items",
                          cfg_names_name(&cfg_names_task, ec.task.name));
    if (!rc) {
        run.quiet = 1;
        rc = rl_evaluate(&run, acc, se, rew, NULL, err);
    }
    rl_run_close(&run);
    return rc ? dllm_err_prefix(err, "sft.eval_every") : 0;
}

/* ckpt/best -> step-N, replaced atomically. */
static int point_best(const sft_run *r, int step, dllm_err *err)
{
    char link[4200], tmp[4300], target[64];
    snprintf(link, sizeof link, "%s/ckpt/best", r->run_dir);
    snprintf(tmp, sizeof tmp, "%s/ckpt/.best.tmp", r->run_dir);
    snprintf(target, sizeof target, "step-%d", step);
    unlink(tmp);
    if (symlink(target, tmp) || rename(tmp, link))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", link, strerror(errno));
    return 0;
}

/* With validation: the newest checkpoint.keep checkpoints (0: all) stay, and the
 * best one under keep-best; the evaluated checkpoints between are removed. */
static void prune_checkpoints(const sft_run *r, const sft_valid *v)
{
    const int keep = r->cfg->checkpoint.keep;
    if (keep <= 0)
        return;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    int steps[4096], n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) && n < 4096;) {
        int st;
        char tail;
        if (sscanf(e->d_name, "step-%d%c", &st, &tail) == 1)
            steps[n++] = st;
    }
    if (d)
        closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++)
            newer += steps[j] > steps[i];
        if (newer < keep || (r->cfg->sft.keep_best && steps[i] == v->best_step))
            continue;
        char old[4300];
        snprintf(old, sizeof old, "%s/step-%d", dir, steps[i]);
        cli_rm_tree(old);
    }
}

/* Evaluates the checkpoint of step, logs it (a line of its own in sft_log.jsonl and
 * TensorBoard's sft/eval_*), and moves ckpt/best when it is better than every
 * earlier one (the earliest of equals: fewer steps for the same accuracy). */
static int validate_step(const sft_run *r, int step, sft_valid *v, FILE *logf, tb_writer *tb,
                         bool quiet, dllm_err *err)
{
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt/step-%d", r->run_dir, step);
    double acc, se, rew;
    const double t0 = dllm_now();
    int rc = validate(r, ckpt, &acc, &se, &rew, err);
    if (rc)
        return rc;
    if (v->best_step == 0 || acc > v->best_acc) {
        v->best_step = step;
        v->best_acc = acc;
        if (r->cfg->sft.keep_best && (rc = point_best(r, step, err)))
            return rc;
    }
    v->last_step = step;
    char f[3][40];
    snprintf(f[0], sizeof f[0], "%.9g", acc);
    snprintf(f[1], sizeof f[1], "%.9g", se);
    snprintf(f[2], sizeof f[2], "%.9g", rew);
    fprintf(logf,
            "{\"step\": %d, \"eval_accuracy\": %s, \"eval_accuracy_se\": %s, "
            "\"eval_reward\": %s, \"eval_n\": %d, \"best_step\": %d}\n",
            step, f[0], f[1], f[2], r->cfg->sft.eval_n, v->best_step);
    if (fflush(logf) != 0 || ferror(logf))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s/sft_log.jsonl: write failed: %s",
                            r->run_dir, strerror(errno));
    if (tb) {
        static const char *const names[3] = {"eval_accuracy", "eval_accuracy_se", "eval_reward"};
        double x[3] = {acc, se, rew};
        if ((rc = tb_write_scalars(tb, step, "sft/", 3, names, x, err)))
            return rc;
    }
    if (!quiet) {
        printf("eval  %5d  accuracy %.4f +- %.4f (n=%d, seed %ld)  reward %.4f  best %.4f at "
               "step %d  (%.1f s)\n", step, acc, se, r->cfg->sft.eval_n, r->cfg->sft.eval_seed,
               rew, v->best_acc, v->best_step, dllm_now() - t0);
        fflush(stdout);
    }
    prune_checkpoints(r, v);
    return 0;
}

/* A resumed run's validation so far: the evaluation lines of sft_log.jsonl (already cut
 * to the checkpoint's step), and ckpt/best pointed again at their best. */
static int resume_validation(const sft_run *r, const char *logpath, sft_valid *v, dllm_err *err)
{
    FILE *f = fopen(logpath, "r");
    if (!f)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", logpath, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) != -1) {
        json_t *o = json_loads(line, 0, NULL);
        json_t *a = json_object_get(o, "eval_accuracy"), *st = json_object_get(o, "step");
        if (json_is_number(a) && json_is_integer(st)) {
            const int step = (int)json_integer_value(st);
            const double acc = json_number_value(a);
            if (v->best_step == 0 || acc > v->best_acc) {
                v->best_step = step;
                v->best_acc = acc;
            }
            v->last_step = step;
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (r->cfg->sft.keep_best && v->best_step > 0)
        return point_best(r, v->best_step, err);
    return 0;
}

typedef struct {
    int quiet, force, allow_edited, nsets;
    const char *resume; /* RUN_DIR, or NULL */
    const char *max_gpu_memory; /* --max-gpu-memory SIZE, or NULL */
} sft_opts;

/* Keys a resumed sft run may change: they extend it or change what is written
 * about it, never what a step computes. */
static const char *const resume_keys[] = {"sft.steps", "log.every", "checkpoint.every",
                                          "checkpoint.keep"};

static int parse_args(int argc, char **argv, dllm_cfg *cfg, sft_opts *o, dllm_err *err)
{
    static const struct option opts[] = {{"set", required_argument, 0, 's'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"force", no_argument, 0, 'f'},
                                         {"resume", required_argument, 0, 'r'},
                                         {"allow-edited-config", no_argument, 0, 'e'},
                                         {"max-gpu-memory", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *sets[64];
    int nsets = 0;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case 's':
            if (nsets == 64)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "too many --set options");
            sets[nsets++] = optarg;
            break;
        case 'q': o->quiet = 1; break;
        case 'f': o->force = 1; break;
        case 'r': o->resume = optarg; break;
        case 'e': o->allow_edited = 1; break;
        case 'm': {
            int64_t cap;
            if (mem_parse_size(optarg, "--max-gpu-memory", &cap, err))
                return err->code;
            o->max_gpu_memory = optarg;
            break;
        }
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return dllm_err_set(err, DLLM_EXIT_INPUT, "bad option (see --help)");
        }
    }
    char stored[4400];
    const char *path;
    if (o->allow_edited && !o->resume)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--allow-edited-config goes with --resume");
    if (o->resume) {
        if (optind != argc)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "--resume takes the run's stored config.yaml; no CONFIG.yaml "
                                "(see --help)");
        if (o->force)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "--resume and --force exclude each other");
        snprintf(stored, sizeof stored, "%s/config.yaml", o->resume);
        path = stored;
        if (access(path, F_OK))
            return run_dir_not_a_run(o->resume, "sft", err);
        /* the same rules as a resumed train run (src/run/run_dir.h) */
        if (run_dir_resume_config(cfg, NULL, o->resume, sets, nsets, resume_keys,
                                  sizeof resume_keys / sizeof resume_keys[0], "sft", err))
            return err->code;
    } else {
        if (optind != argc - 1)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "expected one CONFIG.yaml (see --help)");
        path = argv[optind];
        dllm_cfg_defaults(cfg);
        dllm_cfg_keys_set count;
        if (dllm_cfg_load_counted(cfg, path, &count, err) ||
            dllm_cfg_require_kind(&count, path, false, err) ||
            run_dir_apply_sets(cfg, sets, nsets, err))
            return err->code;
    }
    o->nsets = nsets;
    if (!cfg->data.train[0])
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: data.train is required", path);
    if (dllm_cfg_absolute_paths(cfg, err)) /* the stored config.yaml means the same anywhere */
        return err->code;
    if (cfg->sft.keep_best && cfg->sft.eval_every == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: sft.keep_best needs sft.eval_every > 0 "
                            "(the validation that chooses the best checkpoint)", path);
    if (cfg->sft.eval_every > 0 && cfg->model.lora.rank > 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: sft.eval_every evaluates full checkpoints; "
                            "LoRA runs (model.lora.rank > 0) are not validated yet", path);
    return dllm_cfg_validate(cfg, err);
}

/* The generation settings of the data: gen_length the padded answer length (or
 * the longest answer, EOS included); eval.* when it names that same length. */
static void generation_of_data(const dllm_cfg *cfg, const sft_dataset *ds, bool diffusion,
                               ckpt_generation *g)
{
    int L = cfg->data.answer_length;
    if (L <= 0)
        for (int i = 0; i < ds->n; i++)
            L = ds->ex[i].len - ds->ex[i].prompt_len > L ? ds->ex[i].len - ds->ex[i].prompt_len : L;
    ckpt_generation_default(g, diffusion, L > 0 ? L : 1);
    if (cfg->eval.gen_length == L) {
        g->block_length = cfg->eval.block_length;
        g->steps = cfg->eval.steps;
        g->temperature = cfg->eval.temperature;
    }
}

/* Truncates RUN_DIR/sft_log.jsonl to the lines of steps <= step (a resumed run
 * rewrites what came after its checkpoint) and opens it for appending. */
static FILE *reopen_log(const char *path, int step, dllm_err *err)
{
    char *data = NULL;
    size_t len = 0;
    if (dllm_read_file(path, &data, &len, err))
        return NULL;
    size_t keep = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(data + i, '\n', len - i);
        if (!nl)
            break;   /* a torn last line */
        int s;
        if (sscanf(data + i, "{\"step\": %d", &s) != 1 || s > step)
            break;
        i = (size_t)(nl - data) + 1;
        keep = i;
    }
    free(data);
    if (truncate(path, (off_t)keep)) {
        dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: %s", path, strerror(errno));
        return NULL;
    }
    FILE *f = fopen(path, "a");
    if (!f)
        dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(errno));
    return f;
}

/* The seeded permutation of epoch e. */
static void epoch_order(const dllm_cfg *cfg, int e, int *order, int n)
{
    dllm_rng r = dllm_rng_make((uint64_t)cfg->seed, DLLM_RNG_DATA, (uint64_t)e, 0);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)dllm_rng_below(&r, (uint64_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* The run's files moved from the staging directory to dir (--force's replacement):
 * a preset's tokenizer, written into the run, moved with them. */
static void rebase_run_dir(sft_run *r, const char *dir)
{
    size_t n = strlen(r->run_dir);
    if (!strncmp(r->tok_path, r->run_dir, n) && r->tok_path[n] == '/') {
        char rest[4096];
        snprintf(rest, sizeof rest, "%s", r->tok_path + n);
        snprintf(r->tok_path, sizeof r->tok_path, "%s%s", dir, rest);
    }
    snprintf(r->run_dir, sizeof r->run_dir, "%s", dir);
}

/* Content in the directory of a new run refuses it; --resume is offered only
 * where it can work (a checkpoint to continue from). */
static int refuse_content(const char *dir, void *ctx, dllm_err *err)
{
    (void)ctx;
    if (!cli_dir_has_entries_except(dir, ".lock"))
        return 0;
    char p[4200];
    snprintf(p, sizeof p, "%s/ckpt/latest/state.json", dir);
    if (access(p, F_OK) == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: the run directory already exists and is not empty; continue it "
                            "with `dllm-rl sft --resume %s`, or pass --force to replace it (once "
                            "the new run has its first step)", dir, dir);
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "%s: the run directory already exists and is not empty, with no "
                        "checkpoint to continue from; pass --force to replace it (once the new "
                        "run has its first step), or set another experiment name", dir);
}

static int write_config(const dllm_cfg *cfg, const char *dir, dllm_err *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    char *text = dllm_cfg_dump(cfg);
    FILE *f = fopen(p, "w");
    int bad = !f || fputs(text, f) < 0;
    if (f && fclose(f))
        bad = 1;
    free(text);
    if (bad)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write", p);
    return run_dir_record_config(dir, err);
}

/* The run's device memory, recorded (src/plan/plan_memory.h: the model, the device
 * trainer, one batch's forward, backward and AdamW, and validation's model and rollouts
 * beside it), on a device or under --max-gpu-memory: printed (unless --quiet and it
 * fits), and refused with what to change when it does not fit the cap (default 80GB).
 * Before anything is written. A host-only architecture has no device plan. */
static int check_memory(const dllm_cfg *cfg, const sft_opts *o, dllm_err *err)
{
    if (cfg->device != CFG_DEVICE_CUDA && !o->max_gpu_memory)
        return 0;
    mem_plan_opts po;
    mem_plan_opts_defaults(&po);
    if (o->max_gpu_memory && mem_parse_size(o->max_gpu_memory, "--max-gpu-memory", &po.cap, err))
        return err->code;
    dllm_model_config mc;
    char model[CFG_STR_MAX + 128];
    if (mem_plan_model(cfg, NULL, &mc, model, sizeof model, err))
        return dllm_err_prefix(err, "memory plan");
    if (!dllm_arch_in_core(dllm_arch_get(mc.arch)))
        return 0;
    /* validation's prompts planned at data.max_len tokens (an upper bound: they are the
     * task's, not the data's) */
    pm_sft_shape s;
    if (pm_sft_shape_of(&s, cfg, &mc, cfg->data.max_len, err))
        return dllm_err_prefix(err, "memory plan");
    pm_plan *p = dllm_malloc(sizeof *p);
    int rc = pm_record_sft(&mc, &s, p, err);
    if (rc)
        dllm_err_prefix(err, "memory plan");
    const bool fits = !rc && p->peak <= po.cap;
    if (!rc && (!o->quiet || !fits)) {
        char what[CFG_STR_MAX + 400];
        snprintf(what, sizeof what, "sft, %s from %s; batches of %d x %d tokens%s",
                 cfg_names_name(&cfg_names_arch, mc.arch), model, s.B, s.T,
                 s.eval ? "; validation's model and rollouts beside it" : "");
        pm_print(p, what, po.cap, o->quiet ? stderr : stdout);
    }
    if (!rc && !fits)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "the device memory does not fit --max-gpu-memory %s: the step peaks "
                          "at %.2f GB (%lld bytes); lower sft.batch_size or data.max_len, train "
                          "LoRA (model.lora.rank), validate less at once (sft.eval_n, or "
                          "sft.eval_every: 0), or use a larger device",
                          o->max_gpu_memory ? o->max_gpu_memory : "80GB (the default)",
                          (double)p->peak / 1e9, (long long)p->peak);
    free(p);
    return rc;
}

int cmd_sft(int argc, char **argv)
{
    dllm_cfg cfg;
    dllm_err err = {0};
    sft_opts opt = {0};
    if (parse_args(argc, argv, &cfg, &opt, &err))
        return cli_fail("sft", &err);
    if (check_memory(&cfg, &opt, &err))
        return cli_fail("sft", &err);
    sft_run run = {.cfg = &cfg};
    char final_dir[4096]; /* the run directory; run.run_dir is where files go */
    if (opt.resume)
        snprintf(final_dir, sizeof final_dir, "%s", opt.resume);
    else
        snprintf(final_dir, sizeof final_dir, "%s/%s", cfg.log.dir, cfg.experiment);
    snprintf(run.run_dir, sizeof run.run_dir, "%s", final_dir);
    run_dir_hold hold;
    run_dir_init(&hold, final_dir);
    char latest[4400];
    snprintf(latest, sizeof latest, "%s/ckpt/latest", run.run_dir);
    sft_state s0 = {.epoch = -1};
    if (opt.resume) {
        json_error_t je;
        char sp[4500];
        snprintf(sp, sizeof sp, "%s/state.json", latest);
        json_t *st = json_load_file(sp, 0, &je);
        int done = 0;
        if (!st) {
            dllm_err_set(&err, DLLM_EXIT_INPUT,
                         "%s: no checkpoint to resume from (%s): start the run again with "
                         "`dllm-rl sft %s/config.yaml --force`", sp, je.text, run.run_dir);
            return cli_fail("sft", &err);
        }
        if (json_unpack(st, "{s:i}", "step", &done) == 0 && done >= cfg.sft.steps) {
            json_decref(st);
            printf("sft: %s is already finished (step %d of sft.steps %d); nothing to do "
                   "(raise sft.steps with --set to train further)\n", run.run_dir, done,
                   cfg.sft.steps);
            return 0;
        }
        json_decref(st);
        if (run_dir_open_resume(&hold, final_dir, &err) ||
            run_dir_check_config(final_dir, "sft", opt.allow_edited, &err) ||
            (opt.nsets && write_config(&cfg, final_dir, &err))) { /* extended, for the next resume */
            run_dir_close(&hold);
            return cli_fail("sft", &err);
        }
    } else {
        /* under --force the old run stays until the new one has a step */
        if (run_dir_open_new(&hold, final_dir, opt.force, refuse_content, NULL, &err))
            return cli_fail("sft", &err);
        snprintf(run.run_dir, sizeof run.run_dir, "%s", hold.path);
        /* the effective config, for the record and for --resume */
        if (write_config(&cfg, run.run_dir, &err)) {
            run_dir_close(&hold);
            return cli_fail("sft", &err);
        }
    }
    run_stop_catch();
    if (!cfg.model.path[0])
        cli_warn_random_model("sft", cfg_names_name(&cfg_names_arch, cfg.model.arch),
                              cfg_names_name(&cfg_names_preset, cfg.model.preset));
    dllm_policy *m = NULL;
    dllm_tokenizer *tok = NULL;
    sft_dataset ds = {0};
    int rc = load_model(&cfg, &m, &tok, run.tok_path, sizeof run.tok_path, run.run_dir, &err);
    if (!rc && cfg.data.answer_length > 0 && !dllm_policy_is_diffusion(m))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "data.answer_length pads answers for masked diffusion; an "
                          "autoregressive model stops at its EOS (leave it at 0)");
    if (!rc)
        rc = sft_data_load(&ds, cfg.data.train, tok, dllm_policy_config(m), cfg.data.max_len,
                           cfg.data.answer_length, cfg.sft.chat, &err);
    if (rc) {
        dllm_policy_free(m);
        dllm_tokenizer_free(tok);
        run_dir_close(&hold); /* a failed start leaves nothing that blocks its retry */
        return cli_fail("sft", &err);
    }
    generation_of_data(&cfg, &ds, dllm_policy_is_diffusion(m), &run.gen);
    /* a config that says which task its data are (task.*) records it, for `eval` */
    dllm_cfg defaults;
    dllm_cfg_defaults(&defaults);
    if (cfg.task.name != defaults.task.name ||
        cfg.task.format != defaults.task.format || cfg.task.max_blanks != defaults.task.max_blanks ||
        cfg.task.n_numbers != defaults.task.n_numbers || cfg.task.reward.kind != defaults.task.reward.kind)
        ckpt_generation_set_task(&run.gen, &cfg);
    if (dllm_policy_sampler(m) == DLLM_SAMPLER_DREAM)
        ckpt_generation_set_dream(&run.gen, &cfg);
    const dllm_model_config *mc = dllm_policy_config(m);
    const bool trainer_bf16 = cfg.model.trainer_precision == CFG_TRAINER_BF16;
    /* the update on the device: its trainable copy is the one the forward reads (updated
     * in place), so no copy is rebuilt after a step there */
    const bool dev = dllm_policy_model(m) && dllm_tf_device_trains(dllm_policy_model(m));
    size_t nparam;
    dllm_optim_trainable(dllm_policy_optim(m), &nparam);
    int *lens = dllm_malloc(sizeof *lens * (size_t)cfg.sft.batch_size);
    /* the optimizer state is the model's, streamed to and from checkpoints */
    const opt_state os = {.n = nparam, .p = m};
    int B = cfg.sft.batch_size;
    int32_t *tokens = dllm_malloc(sizeof *tokens * (size_t)B * (size_t)ds.max_len);
    int32_t *prompt_len = dllm_malloc(sizeof *prompt_len * (size_t)B);
    uint8_t *mask = dllm_malloc((size_t)B * (size_t)ds.max_len);
    double *p_mask = dllm_malloc(sizeof *p_mask * (size_t)B);
    int *order = dllm_malloc(sizeof *order * (size_t)ds.n);
    int *batch = dllm_malloc(sizeof *batch * (size_t)B);
    sft_state s = s0;
    s.cursor = ds.n;
    FILE *logf = NULL;
    tb_writer *tb = NULL;
    char logpath[4200];
    snprintf(logpath, sizeof logpath, "%s/sft_log.jsonl", run.run_dir);
    if (opt.resume) {
        if ((rc = load_state(latest, &s, &os, &err)))
            goto done;
        if (s.epoch < 0 || s.cursor < 0 || s.cursor > ds.n) {
            rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s/state.json: data position (epoch %d, "
                              "cursor %d) does not fit data.train (%d examples)", latest, s.epoch,
                              s.cursor, ds.n);
            goto done;
        }
        epoch_order(&cfg, s.epoch, order, ds.n);
        /* the loaded parameters into the copies the forward reads (the device's too) */
        if ((trainer_bf16 || dev) && (rc = dllm_policy_sync_rollout(m, NULL, &err)))
            goto done;
        logf = reopen_log(logpath, s.step, &err);
    } else {
        logf = fopen(logpath, "w");
        if (!logf)
            dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: %s", logpath, strerror(errno));
    }
    if (!logf) {
        rc = err.code;
        goto done;
    }
    /* a resumed run's event file restarts after the checkpoint, as sft_log.jsonl does */
    if (cfg.log.tensorboard &&
        (rc = tb_writer_open(&tb, run.run_dir, opt.resume ? s.step + 1 : -1, &err)))
        goto done;
    sft_valid valid = {0};
    if (opt.resume && cfg.sft.eval_every > 0) {
        if ((rc = resume_validation(&run, logpath, &valid, &err)))
            goto done;
        /* stopped between a checkpoint and its evaluation: evaluate it now */
        if (is_eval_step(&cfg, s.step) && valid.last_step < s.step &&
            (rc = validate_step(&run, s.step, &valid, logf, tb, opt.quiet, &err)))
            goto done;
    }
    if (!opt.quiet) {
        printf("sft: %d examples, %s model (%zu trainable parameters%s), %d steps of %d%s\n",
               ds.n,
               cfg.model.path[0] ? cfg.model.path : cfg_names_name(&cfg_names_preset, cfg.model.preset),
               nparam, cfg.model.lora.rank ? ", LoRA" : "", cfg.sft.steps, B,
               dev ? ", on the device" : "");
        if (opt.resume)
            printf("sft: resuming %s from step %d\n", run.run_dir, s.step);
    }
    double t0 = dllm_now() - s.elapsed;
    for (int step = s.step + 1; step <= cfg.sft.steps; step++) {
        /* batch: the next B examples of a seeded per-epoch permutation */
        int T = 0;
        for (int b = 0; b < B; b++) {
            if (s.cursor == ds.n) {
                epoch_order(&cfg, ++s.epoch, order, ds.n);
                s.cursor = 0;
            }
            const sft_example *e = &ds.ex[order[s.cursor++]];
            prompt_len[b] = e->prompt_len;
            batch[b] = (int)(e - ds.ex);
            if (e->len > T)
                T = e->len;
        }
        for (int b = 0; b < B; b++) {
            const sft_example *e = &ds.ex[batch[b]];
            lens[b] = e->len;
            int32_t *row = tokens + (size_t)b * (size_t)T;
            memcpy(row, e->ids, sizeof *row * (size_t)e->len);
            for (int t = e->len; t < T; t++)
                row[t] = mc->eos_token_id;
            dllm_rng r = dllm_rng_make((uint64_t)cfg.seed, DLLM_RNG_SFT, (uint64_t)step, (uint64_t)b);
            sft_draw_mask(&r, prompt_len[b], T, mask + (size_t)b * (size_t)T, &p_mask[b]);
        }
        dllm_optim_zero_grad(dllm_policy_optim(m));
        double loss;
        if ((rc = dllm_policy_sft_loss(m, tokens, mask, p_mask, prompt_len, lens, B, T, true,
                                       &loss, &err)))
            goto done;
        double lr = dllm_cfg_lr(&cfg, step, cfg.sft.steps);
        /* norm, clip and AdamW where the model trains (a device's copy is the master) */
        const dllm_adamw_args opt_args = {
            step, (float)lr, (float)cfg.optim.betas[0], (float)cfg.optim.betas[1],
            (float)cfg.optim.eps, (float)cfg.optim.weight_decay,
            cfg.optim.grad_clip > 0 ? cfg.optim.grad_clip : 0.0};
        double norm = dllm_optim_step(dllm_policy_optim(m), &opt_args);
        /* a bf16 trainer computes with a bf16 copy of the weights: rebuild it (on the
         * device the LoRA copy the forward reads was updated in place) */
        if (trainer_bf16 && !dev && (rc = dllm_policy_sync_rollout(m, NULL, &err)))
            goto done;
        if (!isfinite(loss)) {
            dllm_err_set(&err, DLLM_EXIT_INTERNAL, "step %d: loss is not finite (lr too high?)", step);
            rc = err.code;
            goto done;
        }
        if (!isfinite(norm)) { /* the step left the weights as they were */
            rc = dllm_err_set(&err, DLLM_EXIT_INTERNAL, "step %d: the gradient norm is not "
                              "finite (%g): the weights were not updated (lower optim.lr, or "
                              "set optim.grad_clip)", step, norm);
            goto done;
        }
        if (!hold.started) {
            /* the first step of a new run: under --force it replaces the old run now */
            if ((rc = run_dir_started(&hold, &err)))
                goto done;
            rebase_run_dir(&run, hold.path);
        }
        s.step = step;
        s.loss_acc += loss;
        s.tokens_acc += (long)B * T;
        s.n_acc++;
        s.elapsed = dllm_now() - t0;
        if (step % cfg.log.every == 0 || step == cfg.sft.steps) {
            double el = s.elapsed;
            char f[5][40]; /* the line's numbers as written; TensorBoard gets the same */
            snprintf(f[0], sizeof f[0], "%.9g", s.loss_acc / s.n_acc);
            snprintf(f[1], sizeof f[1], "%.6g", norm);
            snprintf(f[2], sizeof f[2], "%.6g", lr);
            snprintf(f[3], sizeof f[3], "%.1f", s.tokens_acc / (el > 0 ? el : 1));
            snprintf(f[4], sizeof f[4], "%.3f", el);
            fprintf(logf,
                    "{\"step\": %d, \"loss\": %s, \"grad_norm\": %s, \"lr\": %s, "
                    "\"tokens_per_s\": %s, \"elapsed_s\": %s}\n",
                    step, f[0], f[1], f[2], f[3], f[4]);
            if (fflush(logf) != 0 || ferror(logf)) {
                int e = errno;
                dllm_err_set(&err, DLLM_EXIT_INTERNAL, "%s/sft_log.jsonl: write failed: %s%s",
                             run.run_dir, strerror(e),
                             e == ENOSPC || e == EFBIG ? " (the disk is full or a file-size "
                                                         "limit, ulimit -f, was reached)" : "");
                rc = err.code;
                goto done;
            }
            if (tb) {
                static const char *const names[5] = {"loss", "grad_norm", "lr", "tokens_per_s",
                                                      "elapsed_s"};
                double v[5];
                for (int i = 0; i < 5; i++)
                    v[i] = strtod(f[i], NULL);
                if ((rc = tb_write_scalars(tb, step, "sft/", 5, names, v, &err)))
                    goto done;
            }
            if (!opt.quiet)
                printf("step %5d/%d  loss %.4f  grad_norm %.3f  lr %.2e  %.0f tok/s  ETA %.0fs\n",
                       step, cfg.sft.steps, s.loss_acc / s.n_acc, norm, lr,
                       s.tokens_acc / (el > 0 ? el : 1),
                       el / step * (cfg.sft.steps - step));
            fflush(stdout);
            s.loss_acc = 0;
            s.n_acc = 0;
        }
        bool saved = (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0) ||
                     step == cfg.sft.steps || is_eval_step(&cfg, step);
        if (saved && (rc = save_checkpoint(&run, m, &s, &os, &err)))
            goto done;
        if (is_eval_step(&cfg, step)) {
            const double te = dllm_now();
            if ((rc = validate_step(&run, step, &valid, logf, tb, opt.quiet, &err)))
                goto done;
            t0 += dllm_now() - te; /* elapsed_s and tokens/s count training alone */
        }
        if (step < cfg.sft.steps && run_stop_requested()) {
            if (!saved && (rc = save_checkpoint(&run, m, &s, &os, &err)))
                goto done;
            rc = dllm_err_set(&err, DLLM_EXIT_INTERNAL,
                              "stopped by a signal after step %d of %d, checkpoint written "
                              "(%s/ckpt/step-%d): continue with `dllm-rl sft --resume %s`", step,
                              cfg.sft.steps, final_dir, step, final_dir);
            goto done;
        }
    }
    if (!hold.started) { /* a run of no steps */
        if ((rc = run_dir_started(&hold, &err)))
            goto done;
        rebase_run_dir(&run, hold.path);
    }
    if (!opt.quiet)
        printf("done: %s/ckpt/latest\n", run.run_dir);
    if (!opt.quiet && valid.best_step > 0) {
        if (cfg.sft.keep_best)
            printf("best: %s/ckpt/best (step %d), validation accuracy %.4f\n", run.run_dir,
                   valid.best_step, valid.best_acc);
        else
            printf("best: validation accuracy %.4f at step %d (sft.keep_best keeps its "
                   "checkpoint)\n", valid.best_acc, valid.best_step);
    }
done:
    if (logf)
        fclose(logf);
    tb_writer_close(tb);
    free(tokens);
    free(prompt_len);
    free(mask);
    free(p_mask);
    free(order);
    free(batch);
    free(lens);
    sft_data_free(&ds);
    dllm_tokenizer_free(tok);
    dllm_policy_free(m);
    /* stopped part way (not by a signal, which said so): what it can continue from */
    if (rc && s.step > 0 && !run_stop_requested()) {
        char msg[sizeof err.msg];
        snprintf(msg, sizeof msg, "%s", err.msg);
        if (access(latest, F_OK) == 0)
            dllm_err_set(&err, rc, "%s\n  stopped at step %d; the last complete checkpoint is "
                         "kept (%s): once the cause is fixed, `dllm-rl sft --resume %s` continues "
                         "from it", msg, s.step, latest, run.run_dir);
    }
    run_dir_close(&hold);
    return rc ? cli_fail("sft", &err) : 0;
}
