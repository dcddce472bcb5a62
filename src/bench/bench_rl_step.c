/* dllm-rl bench rl-step: where the time of an RL step goes. */
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"
#include "src/log/rl_log.h"
#include "src/rl/rl_run.h"
#include "kernels/backend.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char bench_usage[] =
    "usage: dllm-rl bench rl-step [CONFIG.yaml] [--set key.path=value ...] [--steps N]\n"
    "                             [--device cpu|cuda] [--preset NAME]\n"
    "\n"
    "Times RL steps of a config (default: the built-in defaults on the tiny preset,\n"
    "sudoku, FP8 rollouts, AIS) split into rollout / likelihood / correction /\n"
    "update / sync / logging, with the HDF5 log written to a temporary directory.\n"
    "The first step is a warm-up and is not counted. No evaluation, no checkpoints.\n"
    "--device cuda (the key device: cuda) runs the rollouts, the likelihoods and, where\n"
    "the device code can, the update on the GPU, and adds the bytes the step moved\n"
    "between host and device; --preset NAME is model.preset=NAME (e.g. llada-8b, a\n"
    "random model of that shape built on the host).\n";

int bench_rl_step(int argc, char **argv)
{
    const char *config = NULL;
    const char *sets[64];
    int nsets = 0;
    dllm_err err = {0};
    long steps = 3;
    const char *device = NULL, *preset = NULL;
    /* --steps, --device and --preset are ours; the rest is train's syntax */
    char **rest = dllm_malloc(sizeof *rest * (size_t)(argc + 1));
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], "--steps", 1, 100000, &steps, &err)) {
                free(rest);
                return cli_fail("bench rl-step", &err);
            }
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            device = argv[++i];
        } else if (!strcmp(argv[i], "--preset") && i + 1 < argc) {
            preset = argv[++i];
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
    optind = 1;
    static const struct option opts[] = {{"set", required_argument, 0, 's'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(nrest, rest, "", opts, NULL)) != -1;) {
        if (c != 's' || nsets == 64) {
            fputs(bench_usage, stderr);
            free(rest);
            return DLLM_EXIT_INPUT;
        }
        sets[nsets++] = optarg;
    }
    if (optind < nrest)
        config = rest[optind];
    dllm_cfg_defaults(&cfg);
    if (config)
        rc = dllm_cfg_load(&cfg, config, &err);
    else
        rc = dllm_cfg_set(&cfg, "task.name=sudoku", &err) ||
             dllm_cfg_set(&cfg, "task.format=plain", &err) ||
             dllm_cfg_set(&cfg, "rollout.gen_length=40", &err) ||
             dllm_cfg_set(&cfg, "rollout.block_length=40", &err) ||
             dllm_cfg_set(&cfg, "rollout.steps=20", &err);
    for (int i = 0; !rc && i < nsets; i++)
        rc = dllm_cfg_set(&cfg, sets[i], &err);
    /* the flags as the keys they stand for (an unknown value: the key's own error) */
    char kv[300];
    if (!rc && device) {
        snprintf(kv, sizeof kv, "device=%s", device);
        if ((rc = dllm_cfg_set(&cfg, kv, &err)))
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--device %s: expected cpu or cuda", device);
    }
    if (!rc && preset) {
        snprintf(kv, sizeof kv, "model.preset=%s", preset);
        if ((rc = dllm_cfg_set(&cfg, kv, &err))) { /* the key's reason, under the flag's name */
            char why[sizeof err.msg];
            const char *c = strstr(err.msg, ": ");
            snprintf(why, sizeof why, "--preset %s%s", preset, c ? c : "");
            dllm_err_set(&err, DLLM_EXIT_INPUT, "%s", why);
        }
    }
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
    if (!rc) {
        char logpath[4200];
        snprintf(logpath, sizeof logpath, "%s/log.h5", run_dir);
        rc = rl_log_create(&run, logpath, "bench", "bench", &err);
    }
    enum { R, LK, C, U, S, LG, NT };
    double tsum[NT] = {0}, toks = 0;
    unsigned long long up0 = 0, down0 = 0, up = 0, down = 0; /* host<->device bytes */
    const bool dev = !rc && dllm_policy_device(run.pol) != NULL;
    for (long step = 1; !rc && step <= steps + 1; step++) {
        double m[H5LOG_N_METRICS];
        rl_batch b;
        if (step == 2 && dev)
            dllm_backend_cuda_transfers(&up0, &down0);
        rc = rl_step(&run, step, &b, m, &err);
        if (!rc)
            rc = rl_log_step(&run, &b, step, m, &err);
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
    if (!rc && dev) {
        dllm_backend_cuda_transfers(&up, &down);
        up -= up0, down -= down0;
    }
    if (!rc) {
        double total = 0;
        for (int i = 0; i < NT; i++)
            total += tsum[i];
        static const char *names[NT] = {"rollout", "likelihood", "correction (AIS)", "update", "sync",
                                        "logging"};
        printf("bench rl-step: %s, task %s, %d prompts x %d completions, gen %d (%d steps), "
               "rollout %s, correction %s, %d threads%s; mean over %ld steps after 1 warm-up\n",
               cfg.model.path[0] ? cfg.model.path : cfg_names_name(&cfg_names_preset, cfg.model.preset),
               run.task->name, cfg.grpo.prompts_per_step, cfg.rollout.group_size,
               cfg.rollout.gen_length, cfg.rollout.steps,
               cfg_names_name(&cfg_names_rollout_precision, cfg.rollout.precision),
               cfg_names_name(&cfg_names_corr_method, cfg.correction.c.method),
               omp_get_max_threads(),
               dev ? ", device cuda (update on the device)" : "",
               steps);
        for (int i = 0; i < NT; i++)
            printf("  %-18s %9.4f s  %6.2f%%\n", names[i], tsum[i] / steps, 100 * tsum[i] / total);
        printf("  %-18s %9.4f s  (AIS + logging %.3f%% of the step; %.0f generated tokens/s)\n",
               "step", total / steps, 100 * (tsum[C] + tsum[LG]) / total, toks / total);
        if (dev) /* the backend table's upload / download entries, logging included */
            printf("  %-18s %9.2f MB up (host -> device), %.2f MB down per step\n", "transfers",
                   up / 1e6 / steps, down / 1e6 / steps);
    }
    rl_run_close(&run);
    free(rest);
    char rm[256];
    snprintf(rm, sizeof rm, "rm -rf %s", tmpdir);
    if (system(rm) != 0)
        fprintf(stderr, "dllm-rl bench: could not remove %s\n", tmpdir);
    return rc ? cli_fail("bench rl-step", &err) : 0;
}
