/* dllm-rl train: GRPO with rollout/trainer mismatch corrections (AIS) from a
 * YAML experiment; dllm-rl export: adapters or merged weights of a run. */
#include "config.h"
#include "src/cli_util.h"
#include "src/comm.h"
#include "src/commands.h"
#include "src/eval_outcomes.h"
#include "src/rl_run.h"

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
    "usage: dllm-rl train CONFIG.yaml [--set key.path=value ...] [--quiet | --jsonl]\n"
    "       dllm-rl train --resume RUN_DIR [--set key.path=value ...] [--quiet | --jsonl]\n"
    "\n"
    "Runs GRPO on the task of the config with rollouts at rollout.precision and the\n"
    "correction of correction.method (none|is|tis|mis|fixed|ais). The run directory\n"
    "log.dir/experiment receives config.yaml (the effective config), log.h5 (every\n"
    "step metric, AIS diagnostic and trajectory; flushed every step) and checkpoints\n"
    "ckpt/step-N (ckpt/latest: the newest complete one). --resume continues a run\n"
    "from its latest checkpoint with its stored config, in the same log.h5; on the\n"
    "CPU it reproduces an uninterrupted run bit for bit. Under mpirun each rank takes\n"
    "grpo.prompts_per_step / ranks prompts; rank 0 writes the log.\n"
    "One progress line per step (--quiet: none; --jsonl: one JSON object per step).\n";

/* ---- trajectories: packed per completion so ranks can send them to rank 0 ---- */

typedef struct {
    int P, G;
} traj_dims;

static size_t traj_record_size(traj_dims d)
{
    return 2 * sizeof(int64_t) + 2 * sizeof(int32_t) + 6 * sizeof(double) +
           (size_t)d.P * sizeof(int32_t) + (size_t)d.G * (sizeof(int32_t) + 2 * sizeof(float) + sizeof(int16_t));
}

static void put(char **p, const void *x, size_t n)
{
    memcpy(*p, x, n);
    *p += n;
}

static char *pack_trajectories(const rl_run *run, const rl_batch *b, traj_dims d, size_t *len)
{
    size_t rs = traj_record_size(d);
    char *buf = dllm_malloc(rs * (size_t)(b->N ? b->N : 1)), *p = buf;
    int32_t *ptok = dllm_malloc(sizeof *ptok * (size_t)d.P);
    int32_t *ctok = dllm_malloc(sizeof *ctok * (size_t)d.G);
    float *lr = dllm_malloc(sizeof *lr * (size_t)d.G), *cp = dllm_malloc(sizeof *cp * (size_t)d.G);
    int16_t *cs = dllm_malloc(sizeof *cs * (size_t)d.G);
    for (int i = 0; i < b->N; i++) {
        int64_t pidx = b->prompt_index[i / b->G];
        int64_t group = (int64_t)run->rank * b->n_prompts + i / b->G;
        int32_t plen = b->prompt_len[i] < d.P ? b->prompt_len[i] : d.P, clen = b->L[i];
        const int32_t *prow = b->prompts + (size_t)i * b->P + (b->P - b->prompt_len[i]);
        for (int t = 0; t < d.P; t++)
            ptok[t] = t < plen ? prow[t] : run->mc->eos_token_id;
        for (int t = 0; t < d.G; t++) {
            size_t k = (size_t)i * b->Gen + t;
            ctok[t] = t < b->Gen ? b->gen[k] : run->mc->eos_token_id;
            lr[t] = t < b->L[i] ? (float)b->d[k] : NAN;
            cp[t] = t < b->Gen ? b->ro.commit_prob[k] : NAN;
            cs[t] = t < b->Gen ? b->ro.commit_step[k] : -1;
        }
        double v[6] = {b->reward[i], b->adv[i], b->l_mu[i], b->l_pi[i], b->log_w[i], b->coef[i]};
        put(&p, &pidx, sizeof pidx);
        put(&p, &group, sizeof group);
        put(&p, &plen, sizeof plen);
        put(&p, &clen, sizeof clen);
        put(&p, v, sizeof v);
        put(&p, ptok, sizeof *ptok * (size_t)d.P);
        put(&p, ctok, sizeof *ctok * (size_t)d.G);
        put(&p, lr, sizeof *lr * (size_t)d.G);
        put(&p, cp, sizeof *cp * (size_t)d.G);
        put(&p, cs, sizeof *cs * (size_t)d.G);
    }
    free(ptok);
    free(ctok);
    free(lr);
    free(cp);
    free(cs);
    *len = (size_t)(p - buf);
    return buf;
}

static int log_trajectories(rl_run *run, const rl_batch *b, int64_t step, traj_dims d, dllm_err *err)
{
    size_t len;
    char *mine = pack_trajectories(run, b, d, &len);
    void *all = NULL;
    size_t total = comm_gather_bytes(mine, len, &all);
    free(mine);
    if (run->rank != 0)
        return 0;
    size_t rs = traj_record_size(d);
    int n = (int)(total / rs);
    int64_t *pidx = dllm_malloc(sizeof *pidx * (size_t)n), *grp = dllm_malloc(sizeof *grp * (size_t)n);
    int32_t *plen = dllm_malloc(sizeof *plen * (size_t)n), *clen = dllm_malloc(sizeof *clen * (size_t)n);
    double *v[6];
    for (int j = 0; j < 6; j++)
        v[j] = dllm_malloc(sizeof(double) * (size_t)n);
    int32_t *ptok = dllm_malloc(sizeof *ptok * (size_t)n * d.P);
    int32_t *ctok = dllm_malloc(sizeof *ctok * (size_t)n * d.G);
    float *lr = dllm_malloc(sizeof *lr * (size_t)n * d.G), *cp = dllm_malloc(sizeof *cp * (size_t)n * d.G);
    int16_t *cs = dllm_malloc(sizeof *cs * (size_t)n * d.G);
    const char *p = all;
    for (int i = 0; i < n; i++) {
        memcpy(&pidx[i], p, sizeof *pidx), p += sizeof *pidx;
        memcpy(&grp[i], p, sizeof *grp), p += sizeof *grp;
        memcpy(&plen[i], p, sizeof *plen), p += sizeof *plen;
        memcpy(&clen[i], p, sizeof *clen), p += sizeof *clen;
        for (int j = 0; j < 6; j++)
            memcpy(&v[j][i], p, sizeof(double)), p += sizeof(double);
        memcpy(ptok + (size_t)i * d.P, p, sizeof *ptok * (size_t)d.P), p += sizeof *ptok * (size_t)d.P;
        memcpy(ctok + (size_t)i * d.G, p, sizeof *ctok * (size_t)d.G), p += sizeof *ctok * (size_t)d.G;
        memcpy(lr + (size_t)i * d.G, p, sizeof *lr * (size_t)d.G), p += sizeof *lr * (size_t)d.G;
        memcpy(cp + (size_t)i * d.G, p, sizeof *cp * (size_t)d.G), p += sizeof *cp * (size_t)d.G;
        memcpy(cs + (size_t)i * d.G, p, sizeof *cs * (size_t)d.G), p += sizeof *cs * (size_t)d.G;
    }
    h5log_traj_batch tb = {.n = n, .step = step, .prompt_index = pidx, .group = grp,
                           .prompt_tokens = ptok, .prompt_len = plen, .prompt_stride = d.P,
                           .completion_tokens = ctok, .completion_len = clen, .completion_stride = d.G,
                           .reward = v[0], .advantage = v[1], .l_mu = v[2], .l_pi = v[3],
                           .log_w = v[4], .coef = v[5], .token_log_ratio = lr,
                           .commit_step = cs, .commit_prob = cp};
    int rc = h5log_append_trajectories(run->log, &tb, err);
    free(all);
    free(pidx);
    free(grp);
    free(plen);
    free(clen);
    for (int j = 0; j < 6; j++)
        free(v[j]);
    free(ptok);
    free(ctok);
    free(lr);
    free(cp);
    free(cs);
    return rc;
}

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
               "%.0f tok/s  ETA %s\n",
               (long long)step, run->cfg.grpo.steps, m[H5LOG_M(reward_mean)], m[H5LOG_M(accuracy)],
               m[H5LOG_M(alpha)], m[H5LOG_M(rho_ess)], m[H5LOG_M(delta)],
               m[H5LOG_M(tokens_per_s)], eta);
    }
    fflush(stdout);
}

static int evaluate_and_log(rl_run *run, int64_t step, dllm_err *err)
{
    double acc, se, rew;
    uint8_t *ok = dllm_malloc(run->eval.n ? run->eval.n : 1);
    if (rl_evaluate(run, &acc, &se, &rew, ok, err) ||
        (run->rank == 0 && eval_outcomes_write(run->run_dir, run->task->name, (long long)step, ok,
                                               run->eval.n, rl_eval_items_hash(run), err))) {
        free(ok);
        return err->code;
    }
    free(ok);
    if (run->rank != 0)
        return 0;
    if (!run->quiet && !run->jsonl)
        printf("eval step %lld: accuracy %.4f +- %.4f (n=%zu)  reward %.4f\n", (long long)step, acc,
               se, run->eval.n, rew);
    else if (run->jsonl)
        printf("{\"eval_step\": %lld, \"accuracy\": %.6f, \"accuracy_se\": %.6f, \"reward_mean\": %.6f, "
               "\"n\": %zu}\n", (long long)step, acc, se, rew, run->eval.n);
    fflush(stdout);
    if (h5log_append_eval(run->log, run->task->name, step, acc, se, rew, err) ||
        h5log_flush(run->log, err))
        return err->code;
    return 0;
}

/* ---- the command ------------------------------------------------------------------ */

static int read_latest(const char *run_dir, char *ckpt, size_t n)
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

typedef struct {
    const char *config, *resume;
    const char *sets[64];
    int nsets, quiet, jsonl;
} train_args;

static int parse_args(int argc, char **argv, train_args *a, dllm_err *err)
{
    static const struct option opts[] = {
        {"set", required_argument, 0, 's'}, {"resume", required_argument, 0, 'r'},
        {"quiet", no_argument, 0, 'q'},     {"jsonl", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},      {0, 0, 0, 0}};
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
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return dllm_err_set(err, DLLM_EXIT_INPUT, "bad option (see --help)");
        }
    }
    if (optind < argc)
        a->config = argv[optind++];
    if (optind < argc || (!a->config && !a->resume))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "expected CONFIG.yaml or --resume RUN_DIR (see --help)");
    return 0;
}

static int load_config(const train_args *a, dllm_cfg *cfg, char *run_dir, size_t n, dllm_err *err)
{
    dllm_cfg_defaults(cfg);
    char stored[4200];
    const char *path = a->config;
    if (a->resume) {
        snprintf(stored, sizeof stored, "%s/config.yaml", a->resume);
        path = stored;
    }
    if (dllm_cfg_load(cfg, path, err))
        return err->code;
    for (int i = 0; i < a->nsets; i++)
        if (dllm_cfg_set(cfg, a->sets[i], err))
            return err->code;
    if (dllm_cfg_validate(cfg, err))
        return err->code;
    if (a->resume)
        snprintf(run_dir, n, "%s", a->resume);
    else
        snprintf(run_dir, n, "%s/%s", cfg->log.dir, cfg->experiment);
    return 0;
}

static int run_training(rl_run *run, const train_args *a, const char *run_dir, dllm_err *err)
{
    const dllm_cfg *cfg = &run->cfg;
    char logpath[4200], ckpt[4200];
    snprintf(logpath, sizeof logpath, "%s/log.h5", run_dir);
    int64_t first = 1;
    traj_dims td = {.P = rl_max_prompt(run), .G = cfg->rollout.gen_length};
    if (a->resume) {
        if (read_latest(run_dir, ckpt, sizeof ckpt))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: no checkpoint to resume from (ckpt/latest)",
                                run_dir);
        if (rl_checkpoint_load(run, ckpt, err))
            return err->code;
        first = run->step + 1;
        if (run->rank == 0 && h5log_resume(&run->log, logpath, run->step, err))
            return err->code;
        if (run->rank == 0 && !run->quiet && !run->jsonl)
            printf("resuming %s at step %lld\n", run_dir, (long long)first);
    } else if (run->rank == 0) {
        char *yaml = dllm_cfg_dump(cfg);
        char started[64];
        time_t now = time(NULL);
        strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        const char *tasks[1] = {run->task->name};
        h5log_meta meta = {.config_yaml = yaml, .version = PACKAGE_VERSION,
                           .git_revision = getenv("DLLM_GIT_REVISION") ? getenv("DLLM_GIT_REVISION")
                                                                         : dllm_git_revision,
                           .device = cfg_names_name(&cfg_names_device, cfg->device), .started = started, .seed = cfg->seed};
        h5log_dims dims = {.max_prompt = td.P, .max_completion = td.G,
                           .denoise_steps = cfg->rollout.steps, .n_eval_tasks = 1, .eval_tasks = tasks};
        int rc = h5log_create(&run->log, logpath, &meta, &dims, err);
        free(yaml);
        if (rc)
            return rc;
    }
    if (run->rank == 0 && !run->quiet && !run->jsonl)
        printf("train: %s, %s on %s (%zu train / %zu eval items), %d ranks, rollout %s, correction %s\n",
               run_dir, cfg->model.path[0] ? cfg->model.path : cfg_names_name(&cfg_names_preset, cfg->model.preset),
               run->task->name, run->train.n, run->eval.n, run->size,
               cfg_names_name(&cfg_names_rollout_precision, cfg->rollout.precision),
               cfg_names_name(&cfg_names_corr_method, cfg->correction.c.method));
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
            return rc;
        }
        double tl = dllm_now();
        if (cfg->log.trajectories)
            rc = log_trajectories(run, &b, step, td, err);
        if (!rc && run->rank == 0)
            rc = h5log_append_mismatch(run->log, step, b.mismatch, err);
        m[H5LOG_M(t_log)] = dllm_now() - tl;
        if (!rc && run->rank == 0 &&
            (rc = h5log_append_step(run->log, step, m, err)) == 0)
            rc = h5log_flush(run->log, err);
        rl_batch_free(&b);
        if (rc)
            return rc;
        run->step = step;
        done++;
        progress(run, step, m, dllm_now() - t0, done);
        if (cfg->grpo.ref_sync_every > 0 && run->ref_params && step % cfg->grpo.ref_sync_every == 0) {
            size_t n;
            memcpy(run->ref_params, dllm_policy_trainable(run->pol, &n), sizeof(float) * n);
            run->ref_synced_at = step;
        }
        bool last = step == cfg->grpo.steps;
        if (cfg->eval.every > 0 && (step % cfg->eval.every == 0 || last) &&
            evaluate_and_log(run, step, err))
            return err->code;
        if (((cfg->checkpoint.every > 0 && step % cfg->checkpoint.every == 0) || last) &&
            rl_checkpoint_save(run, step, err))
            return err->code;
    }
    if (run->rank == 0 && !run->quiet && !run->jsonl)
        printf("done: %s (%.1f s)\n", run_dir, dllm_now() - run->t_start);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    train_args a;
    dllm_err err = {0};
    dllm_cfg cfg;
    char run_dir[4096];
    comm_init(&argc, &argv);
    int rc = parse_args(argc, argv, &a, &err);
    if (!rc)
        rc = load_config(&a, &cfg, run_dir, sizeof run_dir, &err);
    if (!rc && !a.resume && comm_rank() == 0) {
        char p[4200];
        snprintf(p, sizeof p, "%s/log.h5", run_dir);
        if (access(p, F_OK) == 0)
            rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                              "%s already holds a run: use --resume %s, or another experiment name",
                              run_dir, run_dir);
        if (!rc)
            rc = cli_mkdirs(run_dir, &err);
        if (!rc) {
            snprintf(p, sizeof p, "%s/config.yaml", run_dir);
            char *yaml = dllm_cfg_dump(&cfg);
            FILE *f = fopen(p, "w");
            if (!f || fputs(yaml, f) < 0 || fclose(f))
                rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: cannot write", p);
            free(yaml);
        }
    }
    /* every rank agrees on the outcome of rank 0's checks */
    double ok = rc;
    comm_max_d(&ok, 1);
    if (!rc && ok != 0)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "rank 0 failed to set up the run");
    rl_run run;
    memset(&run, 0, sizeof run);
    if (!rc)
        rc = rl_run_open(&run, &cfg, run_dir, &err);
    run.quiet = a.quiet;
    run.jsonl = a.jsonl;
    if (!rc)
        rc = run_training(&run, &a, run_dir, &err);
    rl_run_close(&run);
    if (rc)
        cli_fail("train", &err);
    comm_finalize();
    return rc;
}

static const char export_usage[] =
    "usage: dllm-rl export RUN_DIR (--adapter | --merged) --out DIR [--dtype f32|bf16]\n"
    "\n"
    "Writes the latest checkpoint of a run as a PEFT LoRA adapter (--adapter:\n"
    "adapter_model.safetensors + adapter_config.json) or as merged Hugging Face\n"
    "weights (--merged: config.json + safetensors + tokenizer.json).\n";

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"adapter", no_argument, 0, 'a'}, {"merged", no_argument, 0, 'm'},
        {"out", required_argument, 0, 'o'}, {"dtype", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int adapter = 0, merged = 0;
    const char *out = NULL, *dtype = "f32";
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'a': adapter = 1; break;
        case 'm': merged = 1; break;
        case 'o': out = optarg; break;
        case 'd': dtype = optarg; break;
        case 'h': fputs(export_usage, stdout); return 0;
        default: fputs(export_usage, stderr); return DLLM_EXIT_INPUT;
        }
    }
    if (optind != argc - 1 || adapter + merged != 1 || !out ||
        (strcmp(dtype, "f32") && strcmp(dtype, "bf16"))) {
        fputs(export_usage, stderr);
        return DLLM_EXIT_INPUT;
    }
    const char *run_dir = argv[optind];
    dllm_err err = {0};
    train_args a = {.resume = run_dir};
    dllm_cfg cfg;
    char rd[4096], ckpt[4200];
    int rc = load_config(&a, &cfg, rd, sizeof rd, &err);
    if (!rc && read_latest(run_dir, ckpt, sizeof ckpt))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: no checkpoint (ckpt/latest)", run_dir);
    rl_run run;
    memset(&run, 0, sizeof run);
    if (!rc)
        rc = rl_run_open(&run, &cfg, run_dir, &err);
    if (!rc)
        rc = rl_checkpoint_load(&run, ckpt, &err);
    if (!rc && adapter && !dllm_policy_has_lora(run.pol))
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s was trained without LoRA: use --merged", run_dir);
    if (!rc)
        rc = cli_mkdirs(out, &err);
    if (!rc)
        rc = adapter ? dllm_policy_save_adapter(run.pol, out, &err)
                     : dllm_policy_save(run.pol, out, strcmp(dtype, "bf16") ? ST_F32 : ST_BF16, &err);
    if (!rc && merged) {
        char from[4200], to[4200];
        snprintf(from, sizeof from, "%s/tokenizer.json", ckpt);
        snprintf(to, sizeof to, "%s/tokenizer.json", out);
        char *data;
        size_t len;
        if (dllm_read_file(from, &data, &len, &err) == 0) {
            FILE *f = fopen(to, "wb");
            if (!f || fwrite(data, 1, len, f) != len || fclose(f))
                rc = dllm_err_set(&err, DLLM_EXIT_INTERNAL, "%s: write failed", to);
            free(data);
        }
    }
    rl_run_close(&run);
    if (rc)
        return cli_fail("export", &err);
    printf("wrote %s (%s)\n", out, adapter ? "PEFT adapter" : "merged weights");
    return 0;
}

/* ---- dllm-rl bench rl-step ---------------------------------------------------------- */

static const char bench_usage[] =
    "usage: dllm-rl bench rl-step [CONFIG.yaml] [--set key.path=value ...] [--steps N]\n"
    "\n"
    "Times RL steps of a config (default: the built-in defaults on the tiny preset,\n"
    "sudoku, FP8 rollouts, AIS) split into rollout / likelihood / correction /\n"
    "update / sync / logging, with the HDF5 log written to a temporary directory.\n"
    "The first step is a warm-up and is not counted. No evaluation, no checkpoints.\n";

int bench_rl_step(int argc, char **argv)
{
    train_args a;
    dllm_err err = {0};
    long steps = 3;
    /* --steps is ours; the rest is train's syntax */
    char **rest = dllm_malloc(sizeof *rest * (size_t)(argc + 1));
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], "--steps", 1, 100000, &steps, &err)) {
                free(rest);
                return cli_fail("bench rl-step", &err);
            }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(bench_usage, stdout);
            free(rest);
            return 0;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    rest[nrest] = NULL;
    char tmpdir[] = "/tmp/dllm-bench-XXXXXX";
    if (!mkdtemp(tmpdir)) {
        free(rest);
        dllm_err_set(&err, DLLM_EXIT_INTERNAL, "cannot create a temporary directory");
        return cli_fail("bench rl-step", &err);
    }
    dllm_cfg cfg;
    char run_dir[4096];
    int rc = 0;
    memset(&a, 0, sizeof a);
    optind = 1;
    static const struct option opts[] = {{"set", required_argument, 0, 's'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(nrest, rest, "", opts, NULL)) != -1;) {
        if (c != 's' || a.nsets == 64) {
            fputs(bench_usage, stderr);
            free(rest);
            return DLLM_EXIT_INPUT;
        }
        a.sets[a.nsets++] = optarg;
    }
    if (optind < nrest)
        a.config = rest[optind];
    dllm_cfg_defaults(&cfg);
    if (a.config)
        rc = dllm_cfg_load(&cfg, a.config, &err);
    else
        rc = dllm_cfg_set(&cfg, "task.name=sudoku", &err) ||
             dllm_cfg_set(&cfg, "task.format=plain", &err) ||
             dllm_cfg_set(&cfg, "rollout.gen_length=40", &err) ||
             dllm_cfg_set(&cfg, "rollout.block_length=40", &err) ||
             dllm_cfg_set(&cfg, "rollout.steps=20", &err);
    for (int i = 0; !rc && i < a.nsets; i++)
        rc = dllm_cfg_set(&cfg, a.sets[i], &err);
    char setdir[4200];
    snprintf(setdir, sizeof setdir, "log.dir=%s", tmpdir);
    if (!rc)
        rc = dllm_cfg_set(&cfg, setdir, &err) || dllm_cfg_set(&cfg, "eval.every=0", &err) ||
             dllm_cfg_validate(&cfg, &err);
    snprintf(run_dir, sizeof run_dir, "%s/bench", tmpdir);
    rl_run run;
    memset(&run, 0, sizeof run);
    if (!rc)
        rc = cli_mkdirs(run_dir, &err);
    if (!rc)
        rc = rl_run_open(&run, &cfg, run_dir, &err);
    traj_dims td = {.P = rc ? 1 : rl_max_prompt(&run), .G = cfg.rollout.gen_length};
    if (!rc) {
        char *yaml = dllm_cfg_dump(&cfg);
        const char *tasks[1] = {run.task->name};
        h5log_meta meta = {.config_yaml = yaml, .version = PACKAGE_VERSION, .git_revision = "bench",
                           .device = cfg_names_name(&cfg_names_device, cfg.device), .started = "bench", .seed = cfg.seed};
        h5log_dims dims = {.max_prompt = td.P, .max_completion = td.G,
                           .denoise_steps = cfg.rollout.steps, .n_eval_tasks = 1, .eval_tasks = tasks};
        char logpath[4200];
        snprintf(logpath, sizeof logpath, "%s/log.h5", run_dir);
        rc = h5log_create(&run.log, logpath, &meta, &dims, &err);
        free(yaml);
    }
    enum { R, LK, C, U, S, LG, NT };
    double tsum[NT] = {0}, toks = 0;
    for (long step = 1; !rc && step <= steps + 1; step++) {
        double m[H5LOG_N_METRICS];
        rl_batch b;
        rc = rl_step(&run, step, &b, m, &err);
        double tl = dllm_now();
        if (!rc)
            rc = log_trajectories(&run, &b, step, td, &err);
        if (!rc)
            rc = h5log_append_mismatch(run.log, step, b.mismatch, &err);
        if (!rc)
            rc = h5log_append_step(run.log, step, m, &err);
        m[H5LOG_M(t_log)] = dllm_now() - tl;
        if (!rc && step > 1) {
            tsum[R] += m[H5LOG_M(t_rollout)];
            tsum[LK] += m[H5LOG_M(t_likelihood)];
            tsum[C] += m[H5LOG_M(t_correction)];
            tsum[U] += m[H5LOG_M(t_update)];
            tsum[S] += m[H5LOG_M(t_sync)];
            tsum[LG] += m[H5LOG_M(t_log)];
            toks += m[H5LOG_M(tokens_per_s)] *
                    (m[H5LOG_M(t_rollout)] + m[H5LOG_M(t_likelihood)] + m[H5LOG_M(t_correction)] +
                     m[H5LOG_M(t_update)] + m[H5LOG_M(t_sync)]);
        }
        rl_batch_free(&b);
    }
    if (!rc) {
        double total = 0;
        for (int i = 0; i < NT; i++)
            total += tsum[i];
        static const char *names[NT] = {"rollout", "likelihood", "correction (AIS)", "update", "sync",
                                        "logging"};
        printf("bench rl-step: %s, task %s, %d prompts x %d completions, gen %d (%d steps), "
               "rollout %s, correction %s, %d threads; mean over %ld steps after 1 warm-up\n",
               cfg.model.path[0] ? cfg.model.path : cfg_names_name(&cfg_names_preset, cfg.model.preset),
               run.task->name, cfg.grpo.prompts_per_step, cfg.rollout.group_size,
               cfg.rollout.gen_length, cfg.rollout.steps,
               cfg_names_name(&cfg_names_rollout_precision, cfg.rollout.precision),
               cfg_names_name(&cfg_names_corr_method, cfg.correction.c.method),
               omp_get_max_threads(), steps);
        for (int i = 0; i < NT; i++)
            printf("  %-18s %9.4f s  %6.2f%%\n", names[i], tsum[i] / steps, 100 * tsum[i] / total);
        printf("  %-18s %9.4f s  (AIS + logging %.3f%% of the step; %.0f generated tokens/s)\n",
               "step", total / steps, 100 * (tsum[C] + tsum[LG]) / total, toks / total);
    }
    rl_run_close(&run);
    free(rest);
    char rm[256];
    snprintf(rm, sizeof rm, "rm -rf %s", tmpdir);
    if (system(rm) != 0)
        fprintf(stderr, "dllm-rl bench: could not remove %s\n", tmpdir);
    return rc ? cli_fail("bench rl-step", &err) : 0;
}
