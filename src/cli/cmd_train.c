/* dllm-rl train: GRPO with rollout/trainer mismatch corrections (AIS) from a
 * YAML experiment. (export: cmd_export.c; bench rl-step: bench_rl_step.c) */
#include "config.h"
#include "src/cli/cli_util.h"
#include "dllm/arch.h"
#include "src/comm/comm.h"
#include "src/cli/commands.h"
#include "src/log/eval_outcomes.h"
#include "src/plan/mem_plan.h"
#include "src/plan/mem_plan_run.h"
#include "src/plan/plan_memory.h"
#include "src/log/rl_log.h"
#include "src/rl/rl_run.h"
#include "src/run/run_dir.h"
#include "src/run/run_stop.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <omp.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: dllm-rl train CONFIG.yaml [--set key.path=value ...] [--force] [--quiet | --jsonl]\n"
    "       dllm-rl train [CONFIG.yaml] --resume RUN_DIR [--set key.path=value ...]\n"
    "                     [--allow-edited-config] [--quiet | --jsonl]\n"
    "       dllm-rl train CONFIG.yaml [--set ...] --print-config\n"
    "       (any of them: [--max-gpu-memory SIZE])\n"
    "\n"
    "Runs GRPO on the task of the config with rollouts at rollout.precision and the\n"
    "correction of correction.method (none|is|tis|mis|fixed|ais). The run directory\n"
    "log.dir/experiment receives config.yaml (the effective config), log.h5 (every\n"
    "step metric, AIS diagnostic and trajectory; flushed every step) and checkpoints\n"
    "ckpt/step-N (ckpt/latest: the newest complete one); with log.tensorboard: true\n"
    "also events.out.tfevents.* (the step metrics and evaluations as TensorBoard\n"
    "scalars; a resumed run adds a file). --resume continues a run\n"
    "from its latest checkpoint with its stored config, in the same log.h5; on the\n"
    "CPU it reproduces an uninterrupted run bit for bit. Under mpirun each rank takes\n"
    "grpo.prompts_per_step / ranks prompts; rank 0 writes the log.\n"
    "A config that sets sft.*/data.* keys and no task.*, rollout.*, likelihood.*,\n"
    "grpo.* or correction.* key is refused (run it with sft). A resumed run keeps its\n"
    "config: a CONFIG given beside --resume must equal it, and --set may change only\n"
    "grpo.steps (to extend a finished run), eval.every, log.every, checkpoint.every,\n"
    "checkpoint.keep and task.reward.timeout_s; a config.yaml edited by hand since\n"
    "the run wrote it is refused unless --allow-edited-config. --resume takes the\n"
    "run directory, not a checkpoint in it. --force starts again: the new run is written beside the old\n"
    "one (log.dir/.NAME.force) and replaces it once it has its first step; a new run\n"
    "that fails before then leaves the old one as it was. experiment is a plain\n"
    "directory name. One process writes a run directory at a time (it holds\n"
    "RUN_DIR/.lock, with its pid): a second is refused. A start that fails before\n"
    "its first step removes what it wrote. Ctrl-C or SIGTERM stops at the next step\n"
    "with a checkpoint and the command that resumes (exit 1).\n"
    "--print-config prints the effective config (YAML) and exits.\n"
    "One progress line per step (--quiet: none; --jsonl: one JSON object per step);\n"
    "evaluation reports its progress on stderr.\n"
    "On a device (device: cuda), or with --max-gpu-memory SIZE (default 80GB; GB, GiB,\n"
    "MB, ... as `dllm-rl plan`), the run's device memory, recorded as `dllm-rl plan`\n"
    "records it, is printed first, and a peak over the cap is refused (exit 2, naming\n"
    "what to change) before anything is written.\n";

/* ---- output for people -------------------------------------------------------------- */

static void fmt_duration(double s, char *out, size_t n)
{
    if (!isfinite(s) || s < 0)
        snprintf(out, n, "?");
    else if (s < 60)
        snprintf(out, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(out, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(out, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

static void progress(const rl_run *run, int64_t step, const double *m, double elapsed, int steps_done)
{
    if (run->rank != 0 || run->quiet)
        return;
    if (run->jsonl) {
        printf("{\"step\": %lld", (long long)step);
        for (int i = 0; i < H5LOG_N_METRICS; i++) {
            printf(", \"%s\": ", h5log_metric_name(i));
            cli_print_json_number(stdout, m[i], 9);
        }
        printf("}\n");
    } else {
        char eta[32];
        int left = run->cfg.grpo.steps - (int)step;
        fmt_duration(steps_done > 0 ? elapsed / steps_done * left : NAN, eta, sizeof eta);
        printf("step %lld/%d  reward %.3f  acc %.3f  alpha %.3f  ess %.3f  |logw| %.2g  "
               "masked %.3f  %.0f tok/s  ETA %s\n",
               (long long)step, run->cfg.grpo.steps, m[H5LOG_M(reward_mean)], m[H5LOG_M(accuracy)],
               m[H5LOG_M(alpha)], m[H5LOG_M(rho_ess)], m[H5LOG_M(delta)],
               m[H5LOG_M(frac_masked_left)], m[H5LOG_M(tokens_per_s)], eta);
    }
    fflush(stdout);
}

static int evaluate_one(rl_run *run, int64_t step, const char *name, dllm_err *err);

/* One evaluation, or with eval.gen_lengths one per length (d1: steps = length / 2, or
 * eval.gen_steps), each
 * logged under its own name (rl_eval_names). */
static int evaluate_and_log(rl_run *run, int64_t step, dllm_err *err)
{
    const cfg_int_list *gl = &run->cfg.eval.gen_lengths;
    char names[CFG_INT_LIST_MAX][RL_EVAL_NAME_MAX];
    const int n = rl_eval_names(run, names);
    const dllm_sampler_cfg keep = run->eval_sampler;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (gl->n) {
            run->eval_sampler.gen_length = gl->v[i];
            run->eval_sampler.steps = run->cfg.eval.gen_steps.n ? run->cfg.eval.gen_steps.v[i]
                                                                : gl->v[i] / 2;
            if (!run->quiet && !run->jsonl && run->rank == 0)
                printf("eval at gen_length %d (block %d, %d steps)\n", gl->v[i],
                       run->eval_sampler.block_length, run->eval_sampler.steps);
        }
        rc = evaluate_one(run, step, names[i], err);
    }
    run->eval_sampler = keep;
    return rc;
}

static int evaluate_one(rl_run *run, int64_t step, const char *name, dllm_err *err)
{
    double acc, se, rew;
    uint8_t *ok = dllm_malloc(run->eval.n ? run->eval.n : 1);
    if (rl_evaluate(run, &acc, &se, &rew, ok, err) ||
        (run->rank == 0 && eval_outcomes_write(run->run_dir, name, (long long)step, ok,
                                               run->eval.n, rl_eval_items_hash(run), err))) {
        free(ok);
        return err->code;
    }
    free(ok);
    if (run->rank != 0)
        return 0;
    if (!run->quiet && !run->jsonl)
        printf("eval step %lld%s%s: accuracy %.4f +- %.4f (n=%zu)  reward %.4f\n", (long long)step,
               strcmp(name, run->task->name) ? " " : "", strcmp(name, run->task->name) ? name : "",
               acc, se, run->eval.n, rew);
    else if (run->jsonl)
        printf("{\"eval_step\": %lld, \"eval\": \"%s\", \"accuracy\": %.6f, \"accuracy_se\": %.6f, "
               "\"reward_mean\": %.6f, \"n\": %zu}\n", (long long)step, name, acc, se, rew,
               run->eval.n);
    fflush(stdout);
    if (h5log_append_eval(run->log, name, step, acc, se, rew, err) ||
        h5log_flush(run->log, err))
        return err->code;
    if (run->tb) { /* tagged as the log's datasets: eval/<task>/<name> */
        static const char *const names[3] = {"accuracy", "accuracy_se", "reward_mean"};
        const double v[3] = {acc, se, rew};
        char prefix[128];
        snprintf(prefix, sizeof prefix, "eval/%s/", run->task->name);
        if (tb_write_scalars(run->tb, step, prefix, 3, names, v, err))
            return err->code;
    }
    return 0;
}

typedef struct {
    const char *config, *resume;
    const char *sets[64];
    int nsets, quiet, jsonl, force, print_config, allow_edited;
    const char *max_gpu_memory; /* --max-gpu-memory SIZE, or NULL */
} train_args;

/* ---- the run directory --------------------------------------------------------------- */

static int write_config(const dllm_cfg *cfg, const char *run_dir, dllm_err *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/config.yaml", run_dir);
    char *yaml = dllm_cfg_dump(cfg);
    FILE *f = fopen(p, "w");
    int bad = !f || fputs(yaml, f) < 0;
    if (f && fclose(f))
        bad = 1;
    free(yaml);
    return bad ? dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write", p) : 0;
}

/* A directory that holds a run is refused for a new one (the message names the
 * command that continues or restarts it); other content (a sweep's train.log) is
 * left beside the run. */
static int refuse_run(const char *run_dir, void *ctx, dllm_err *err)
{
    const train_args *a = ctx;
    char p[4200], ckpt[4200];
    snprintf(p, sizeof p, "%s/log.h5", run_dir);
    if (access(p, F_OK))
        return 0;
    if (rl_latest_checkpoint(run_dir, ckpt, sizeof ckpt) == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s already holds a run: continue it with `dllm-rl train --resume %s`, "
                            "or start it again with `dllm-rl train %s --force` (replaces it once "
                            "the new run has its first step), or set another experiment name",
                            run_dir, run_dir, a->config);
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "%s already holds a run with no checkpoint to continue from: start it "
                        "again with `dllm-rl train %s --force` (replaces it once the new run has "
                        "its first step), or set another experiment name", run_dir, a->config);
}

/* A new run's directory, locked (hold->path: the run directory, or under --force
 * the staging one beside it); then the effective config and the tokenizer, so the
 * run directory alone decodes its trajectories. */
static int fresh_run_dir(const train_args *a, const dllm_cfg *cfg, const char *run_dir,
                         run_dir_hold *hold, dllm_err *err)
{
    if (run_dir_open_new(hold, run_dir, a->force, refuse_run, (void *)a, err))
        return err->code;
    if (write_config(cfg, hold->path, err) || run_dir_record_config(hold->path, err))
        return err->code;
    if (cfg->model.path[0]) {
        char from[4200], to[4200];
        snprintf(from, sizeof from, "%s/tokenizer.json", cfg->model.path);
        snprintf(to, sizeof to, "%s/tokenizer.json", hold->path);
        if (access(from, F_OK) == 0 && cli_copy_file(from, to, err))
            return err->code;
    }
    return 0;
}

/* -1 (after saying so) when the run to resume has reached grpo.steps: nothing
 * to do, and the way to extend it. */
static int finished_run(const train_args *a, const dllm_cfg *cfg, const char *run_dir)
{
    char ckpt[4200];
    if (rl_latest_checkpoint(run_dir, ckpt, sizeof ckpt))
        return 0;
    int step = rl_run_step_of(ckpt);
    if (step < cfg->grpo.steps)
        return 0;
    if (comm_rank() == 0 && !a->jsonl)
        printf("%s is finished (step %d of grpo.steps %d): nothing to do; extend it with "
               "`dllm-rl train --resume %s --set grpo.steps=N` (N > %d)\n",
               run_dir, step, cfg->grpo.steps, run_dir, step);
    fflush(stdout);
    return -1;
}

/* ---- the command ------------------------------------------------------------------ */

static int parse_args(int argc, char **argv, train_args *a, dllm_err *err)
{
    static const struct option opts[] = {
        {"set", required_argument, 0, 's'}, {"resume", required_argument, 0, 'r'},
        {"quiet", no_argument, 0, 'q'},     {"jsonl", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},      {"force", no_argument, 0, 'f'},
        {"print-config", no_argument, 0, 'p'}, {"max-gpu-memory", required_argument, 0, 'm'},
        {"allow-edited-config", no_argument, 0, 'e'}, {0, 0, 0, 0}};
    memset(a, 0, sizeof *a);
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 's':
            if (a->nsets == 64)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "too many --set options");
            a->sets[a->nsets++] = optarg;
            break;
        case 'r': a->resume = optarg; break;
        case 'q': a->quiet = 1; break;
        case 'j': a->jsonl = 1; break;
        case 'f': a->force = 1; break;
        case 'p': a->print_config = 1; break;
        case 'm': a->max_gpu_memory = optarg; break;
        case 'e': a->allow_edited = 1; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return dllm_err_set(err, DLLM_EXIT_INPUT, "bad option (see --help)");
        }
    }
    if (optind < argc)
        a->config = argv[optind++];
    if (optind < argc || (!a->config && !a->resume))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "expected CONFIG.yaml or --resume RUN_DIR (see --help)");
    if (a->force && a->resume)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--force and --resume exclude each other");
    if (a->quiet && a->jsonl)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--quiet and --jsonl exclude each other (--jsonl: one JSON line per "
                            "step; --quiet: no progress)");
    if (a->allow_edited && !a->resume)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--allow-edited-config goes with --resume");
    if (a->resume) {
        char p[4200];
        snprintf(p, sizeof p, "%s/config.yaml", a->resume);
        if (access(p, F_OK))
            return run_dir_not_a_run(a->resume, "train", err);
    }
    return 0;
}

static int load_config(const train_args *a, dllm_cfg *cfg, char *run_dir, size_t n, dllm_err *err)
{
    if (rl_config_load(cfg, a->config, a->resume, a->sets, a->nsets, err))
        return err->code;
    if (a->resume)
        snprintf(run_dir, n, "%s", a->resume);
    else
        snprintf(run_dir, n, "%s/%s", cfg->log.dir, cfg->experiment);
    return 0;
}

/* The run's device memory, recorded (src/plan/plan_memory.h: `dllm-rl plan` prints the
 * same), on a device or under --max-gpu-memory: printed (stderr under --jsonl; under
 * --quiet only when it does not fit), and refused with what to change when its peak does
 * not fit the cap. Nothing is written before. A host-only architecture has no device plan. */
static int check_memory_plan(const train_args *a, const dllm_cfg *cfg, dllm_err *err)
{
    if (cfg->device != CFG_DEVICE_CUDA && !a->max_gpu_memory)
        return 0;
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    o.ranks = comm_size();
    if (a->max_gpu_memory && mem_parse_size(a->max_gpu_memory, "--max-gpu-memory", &o.cap, err))
        return err->code;
    dllm_model_config mc;
    char model[CFG_STR_MAX + 128];
    if (mem_plan_model(cfg, NULL, &mc, model, sizeof model, err))
        return dllm_err_prefix(err, "memory plan");
    if (!dllm_arch_in_core(dllm_arch_get(mc.arch)))
        return 0;
    mem_run_recompute(cfg, &mc, &o);
    pm_shape s;
    if (pm_shape_of_run(&s, cfg, &mc, &o, err))
        return dllm_err_prefix(err, "memory plan");
    pm_plan *p = dllm_malloc(sizeof *p);
    int rc = pm_record(&mc, &s, PM_TRAIN, p, err);
    if (rc)
        dllm_err_prefix(err, "memory plan");
    const bool fits = !rc && p->peak <= o.cap;
    if (!rc && comm_rank() == 0 && (!a->quiet || !fits)) {
        char what[2 * CFG_STR_MAX + 256];
        snprintf(what, sizeof what, "train %s, %s from %s (plan's default %d prompt tokens)",
                 a->config ? a->config : a->resume, cfg_names_name(&cfg_names_arch, mc.arch),
                 model, o.prompt_tokens);
        pm_print(p, what, o.cap, a->jsonl || a->quiet ? stderr : stdout);
    }
    if (!rc && !fits) {
        pm_does_not_fit(p, &mc, &s, o.cap, err);
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "the memory plan does not fit --max-gpu-memory "
                          "%s (`dllm-rl plan %s` itemises it; its flags are the changes named "
                          "here): %s", a->max_gpu_memory ? a->max_gpu_memory : "80GB (the default)",
                          a->config ? a->config : "CONFIG", msg);
    }
    free(p);
    return rc;
}

/* A run that fails part way (a full disk, a step that diverged) says where it
 * stopped and what it can continue from: its checkpoints are only ever replaced
 * by complete ones. Returns err's code. */
static int stopped_at(const rl_run *run, int64_t step, const run_dir_hold *hold, dllm_err *err)
{
    /* before its first step is written a new run is removed (src/run/run_dir.h): the
     * message stands as it is */
    if (run->rank != 0 || !hold->started)
        return err->code;
    const char *run_dir = hold->final_;
    char ckpt[4200], msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    if (rl_latest_checkpoint(run_dir, ckpt, sizeof ckpt) == 0)
        dllm_err_set(err, err->code,
                     "%s\n  stopped at step %lld; the last complete checkpoint is kept (%s): "
                     "once the cause is fixed, `dllm-rl train --resume %s` continues from it",
                     msg, (long long)step, ckpt, run_dir);
    else
        dllm_err_set(err, err->code,
                     "%s\n  stopped at step %lld, before the first checkpoint: once the cause is "
                     "fixed, `dllm-rl train %s/config.yaml --force` starts the run again",
                     msg, (long long)step, run_dir);
    return err->code;
}

/* Ctrl-C or SIGTERM on any rank: every rank stops after the same step. */
static bool stop_requested(void)
{
    double sig = run_stop_requested();
    if (comm_size() > 1)
        comm_max_d(&sig, 1);
    return sig != 0;
}

/* After the first step of a new run: under --force the new run replaces the old one
 * now, and the run's files are found at the run directory from here on. */
static int first_step_written(rl_run *run, run_dir_hold *hold, dllm_err *err)
{
    if (run->rank != 0)
        return 0;
    if (run_dir_started(hold, err))
        return err->code;
    snprintf(run->run_dir, sizeof run->run_dir, "%s", hold->path);
    return 0;
}

static int run_training(rl_run *run, const train_args *a, run_dir_hold *hold, dllm_err *err)
{
    const dllm_cfg *cfg = &run->cfg;
    const char *run_dir = hold->final_; /* what people are told; files go to hold->path */
    char logpath[4200], ckpt[4200];
    snprintf(logpath, sizeof logpath, "%s/log.h5", hold->path);
    int64_t first = 1;
    if (a->resume) {
        if (rl_latest_checkpoint(run_dir, ckpt, sizeof ckpt))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: no checkpoint to resume from (ckpt/latest; the run stopped "
                                "before its first checkpoint, checkpoint.every = %d): start it again "
                                "with `dllm-rl train %s/config.yaml --force`",
                                run_dir, cfg->checkpoint.every, run_dir);
        if (rl_checkpoint_load(run, ckpt, err))
            return err->code;
        first = run->step + 1;
        if (run->rank == 0 && h5log_resume(&run->log, logpath, run->step, err)) {
            if (err->code == DLLM_EXIT_INPUT) { /* the log, not the checkpoint, is at fault */
                char msg[sizeof err->msg];
                snprintf(msg, sizeof msg, "%s", err->msg);
                dllm_err_set(err, err->code, "%s\n  `dllm-rl train %s/config.yaml --force` starts "
                             "the run again", msg, run_dir);
            }
            return err->code;
        }
        if (run->rank == 0 && !run->quiet && !run->jsonl)
            printf("resuming %s at step %lld\n", run_dir, (long long)first);
        fflush(stdout);
    } else {
        char started[64];
        time_t now = time(NULL);
        strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        const char *rev = getenv("DLLM_GIT_REVISION") ? getenv("DLLM_GIT_REVISION") : dllm_git_revision;
        if (rl_log_create(run, logpath, rev, started, err))
            return err->code;
    }
    /* a resumed run's event file restarts at its first step: TensorBoard drops what an
     * earlier file holds from there on, as h5log_resume dropped those rows */
    if (run->rank == 0 && cfg->log.tensorboard &&
        tb_writer_open(&run->tb, run_dir, a->resume ? first : -1, err))
        return err->code;
    if (run->rank == 0 && !run->quiet && !run->jsonl)
        printf("train: %s, %s on %s (%zu train / %zu eval items), %d ranks, rollout %s, correction %s\n",
               run_dir, cfg->model.path[0] ? cfg->model.path : cfg_names_name(&cfg_names_preset, cfg->model.preset),
               run->task->name, run->train.n, run->eval.n, run->size,
               cfg_names_name(&cfg_names_rollout_precision, cfg->rollout.precision),
               cfg_names_name(&cfg_names_corr_method, cfg->correction.c.method));
    fflush(stdout); /* the header reaches a redirected stdout before the first step */
    if (first == 1 && cfg->eval.every > 0 && evaluate_and_log(run, 0, err))
        return err->code;
    double t0 = dllm_now();
    int done = 0;
    for (int64_t step = first; step <= cfg->grpo.steps; step++) {
        double m[H5LOG_N_METRICS];
        rl_batch b;
        int rc = rl_step(run, step, &b, m, err);
        if (rc) {
            rl_batch_free(&b);
            return stopped_at(run, step, hold, err);
        }
        rc = rl_log_step(run, &b, step, m, err);
        rl_batch_free(&b);
        if (rc)
            return stopped_at(run, step, hold, err);
        if (step == first && (rc = first_step_written(run, hold, err)))
            return rc;
        run->step = step;
        done++;
        progress(run, step, m, dllm_now() - t0, done);
        bool last = step == cfg->grpo.steps;
        if (cfg->eval.every > 0 && (step % cfg->eval.every == 0 || last) &&
            evaluate_and_log(run, step, err))
            return stopped_at(run, step, hold, err);
        bool saved = (cfg->checkpoint.every > 0 && step % cfg->checkpoint.every == 0) || last;
        if (saved && rl_checkpoint_save(run, step, err))
            return stopped_at(run, step, hold, err);
        if (!last && stop_requested()) {
            if (!saved && rl_checkpoint_save(run, step, err))
                return stopped_at(run, step, hold, err);
            return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                "stopped by a signal after step %lld of %d, checkpoint written "
                                "(%s/ckpt/step-%lld): continue with `dllm-rl train --resume %s`",
                                (long long)step, cfg->grpo.steps, run_dir, (long long)step,
                                run_dir);
        }
    }
    /* a run of no steps (grpo.steps 0: evaluation only) is complete here */
    if (first_step_written(run, hold, err))
        return err->code;
    if (run->rank == 0 && !run->quiet && !run->jsonl)
        printf("done: %s (%.1f s)\n", run_dir, dllm_now() - run->t_start);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    train_args a;
    dllm_err err = {0};
    dllm_cfg cfg;
    char run_dir[4096] = ""; /* read by run_dir_init even when the config never loaded */
    comm_init(&argc, &argv);
    int rc = parse_args(argc, argv, &a, &err);
    if (!rc)
        rc = load_config(&a, &cfg, run_dir, sizeof run_dir, &err);
    if (!rc && a.print_config) {
        char *yaml = comm_rank() == 0 ? dllm_cfg_dump(&cfg) : NULL;
        if (yaml)
            fputs(yaml, stdout);
        free(yaml);
        comm_finalize();
        return 0;
    }
    if (!rc)
        rc = check_memory_plan(&a, &cfg, &err);
    if (!rc && a.resume && (rc = finished_run(&a, &cfg, run_dir)) < 0) {
        comm_finalize();
        return 0;
    }
    run_dir_hold hold;
    run_dir_init(&hold, run_dir);
    if (!rc && !a.resume && comm_rank() == 0)
        rc = fresh_run_dir(&a, &cfg, run_dir, &hold, &err);
    if (!rc && a.resume && comm_rank() == 0)
        rc = run_dir_open_resume(&hold, run_dir, &err) ||
                     run_dir_check_config(run_dir, "train", a.allow_edited, &err)
                 ? err.code
                 : 0;
    if (!rc && a.resume && a.nsets && comm_rank() == 0) /* the extended settings, for the next resume */
        rc = write_config(&cfg, run_dir, &err) || run_dir_record_config(run_dir, &err) ? err.code : 0;
    if (!rc && !cfg.model.path[0] && comm_rank() == 0)
        cli_warn_random_model("train", cfg_names_name(&cfg_names_arch, cfg.model.arch),
                              cfg_names_name(&cfg_names_preset, cfg.model.preset));
    if (!rc && comm_rank() == 0)
        cli_note_rollout_product("train", cfg_names_name(&cfg_names_rollout_precision,
                                                         cfg.rollout.precision),
                                 cfg.device == CFG_DEVICE_CUDA ? "cuda" : "cpu");
    /* every rank agrees on the outcome of rank 0's checks */
    double ok = rc;
    comm_max_d(&ok, 1);
    if (!rc && ok != 0)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "rank 0 failed to set up the run");
    comm_bcast_bytes(hold.path, sizeof hold.path); /* under --force: the staging directory */
    rl_run run;
    memset(&run, 0, sizeof run);
    /* opening a large model and generating the items takes a while: say so (stderr,
     * beside the evaluation's progress) */
    if (!rc && comm_rank() == 0 && !a.quiet)
        fprintf(stderr, "train: opening %s and %s items...\n",
                cfg.model.path[0] ? cfg.model.path : "the preset",
                cfg_names_name(&cfg_names_task, cfg.task.name));
    double t_open = dllm_now();
    if (!rc)
        run_stop_catch();
    if (!rc)
        rc = rl_run_open(&run, &cfg, hold.path, &err);
    if (!rc && comm_rank() == 0 && !a.quiet)
        fprintf(stderr, "train: opened in %.1f s\n", dllm_now() - t_open);
    run.quiet = a.quiet;
    run.jsonl = a.jsonl;
    if (!rc)
        rc = run_training(&run, &a, &hold, &err);
    if (rc && ok == 0 && comm_size() > 1) {
        /* past the agreement above a rank can fail alone (its model, its device, NCCL):
         * the others would wait for it in their next collective, so the job ends here */
        cli_fail("train", &err);
        fprintf(stderr, "dllm-rl train: rank %d of %d failed: ending every rank\n", comm_rank(),
                comm_size());
        comm_abort(rc);
    }
    rl_run_close(&run);
    if (comm_rank() == 0)
        run_dir_close(&hold); /* before its first step a run leaves nothing behind */
    if (rc)
        cli_fail("train", &err);
    comm_finalize();
    return rc;
}

