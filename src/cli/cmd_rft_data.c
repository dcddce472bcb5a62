/* dllm-rl rft-data: the data of the rejection-sampling fine-tuning baseline
 * (docs/REPRODUCTION.md, "The quickstart's claim"). It samples what an RL config's run
 * would sample at its steps 1..grpo.steps -- the same prompts (the seeded sample of
 * the training items per step) and group_size completions each from the rollout copy,
 * with the run's sampler and random streams -- but every step from the starting model
 * (model.path), and keeps the completions the task's verifier calls correct as SFT
 * pairs {"prompt", "answer"}. Its step 1 is the RL run's step 1 bit for bit; later
 * steps differ from the RL run's only in the model RL has updated. So the baseline sees
 * the same fresh puzzles with the same verifier and the same number of samples as RL,
 * and learns from them by SFT instead. */
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"
#include "src/rl/rl.h"
#include "src/rl/rl_run.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: dllm-rl rft-data CONFIG.yaml --out FILE [--set key.path=value ...] [--all]\n"
    "         [--force] [--quiet]\n"
    "\n"
    "Rejection-sampling data from an RL config (`train`'s): for each step 1..grpo.steps\n"
    "the prompts that run samples at that step (grpo.prompts_per_step of the training\n"
    "items, by its seed), rollout.group_size completions of each from the rollout copy\n"
    "of model.path (rollout.precision, the run's sampler and random streams), and the\n"
    "completions the task's verifier calls correct written to FILE as SFT pairs, one\n"
    "JSON line {\"prompt\": ..., \"answer\": ...} each (the prompt as task.format shows\n"
    "it, the answer the completion up to its EOS), duplicates kept: `dllm-rl sft` with\n"
    "data.train=FILE trains on them. The model is never updated, so step 1 samples what\n"
    "the RL run's step 1 samples, bit for bit, and every step the same prompts.\n"
    "--all writes every completion, each with its \"reward\" and \"correct\" (0/1), for\n"
    "a look at what the model samples (the step's mean reward is train's reward_mean).\n"
    "A FILE that exists is refused unless --force (written beside it, then renamed).\n"
    "Prints the completions sampled, the correct ones and their share.\n"
    "\n"
    "exit status: 0 success, 2 bad input, 1 internal failure\n";

typedef struct {
    const char *config, *out;
    const char *sets[64];
    int nsets, force, quiet, all;
} rft_args;

static int parse_args(int argc, char **argv, rft_args *a, dllm_err *err)
{
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"set", required_argument, 0, 's'},
                                         {"force", no_argument, 0, 'f'},
                                         {"all", no_argument, 0, 'a'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case 'o': a->out = optarg; break;
        case 's':
            if (a->nsets == 64)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "too many --set options");
            a->sets[a->nsets++] = optarg;
            break;
        case 'f': a->force = 1; break;
        case 'a': a->all = 1; break;
        case 'q': a->quiet = 1; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return dllm_err_set(err, DLLM_EXIT_INPUT, "bad option (see --help)");
        }
    }
    if (optind != argc - 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "expected one CONFIG.yaml (see --help)");
    a->config = argv[optind];
    if (!a->out)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--out FILE is required (see --help)");
    if (!a->force && access(a->out, F_OK) == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--out %s: the file exists; pass --force to "
                            "replace it", a->out);
    return 0;
}

/* One step's batch: its prompts, G completions each from the rollout copy, the correct
 * ones written to f. *n_ok counts them. */
static int sample_step(rl_run *run, int64_t step, bool all, FILE *f, long *n_ok, dllm_err *err)
{
    const dllm_cfg *cfg = &run->cfg;
    const int G = cfg->rollout.group_size, Gen = cfg->rollout.gen_length;
    const int np = cfg->grpo.prompts_per_step, N = np * G;
    const uint64_t seed = (uint64_t)cfg->seed;
    size_t *idx = dllm_malloc(sizeof *idx * (size_t)np);
    dllm_task_sample_indices(run->train.n, (size_t)np, seed, (uint64_t)step, idx);
    const rl_prompt **ps = dllm_malloc(sizeof *ps * (size_t)np);
    for (int i = 0; i < np; i++)
        ps[i] = &run->train_prompts[idx[i]];
    int32_t *prompts, *lens;
    uint8_t *pm;
    const int P = rl_pad_prompts(ps, np, G, run->mc->eos_token_id, &prompts, &pm, &lens);
    free(ps);
    dllm_sampler_cfg sc = run->sampler;
    sc.seq_offset = 0; /* one rank: the batch's row 0 is global row 0, as in rl_step */
    dllm_rollout ro;
    /* the rollout stream of rl_step's step */
    int rc = rl_generate(run->pol, DLLM_PREC_ROLLOUT, prompts, pm, N, P, &sc, cfg->rollout.top_p,
                         seed ^ ((uint64_t)step * 0x9e3779b97f4a7c15ULL), &ro, err);
    const bool generated = rc == 0;
    for (int i = 0; i < N && !rc; i++) {
        const int32_t *g = ro.tokens + (size_t)i * (P + Gen) + P;
        const int L = dllm_completion_length(g, Gen, run->mc->eos_token_id);
        char *text = rl_completion_text(run, g, L, err);
        if (!text) {
            rc = err->code;
            break;
        }
        const dllm_task_item *it = &run->train.items[idx[i / G]];
        double r;
        int ok = 0;
        rc = rl_task_score(run, it, text, strlen(text), &r, &ok, err);
        const bool keep = !rc && (ok || all);
        char *prompt = keep ? rl_task_format(run, it, err) : NULL;
        if (keep && !prompt)
            rc = err->code;
        if (prompt) {
            /* the reward as train takes it (task.reward: correct is the 0/1 outcome) */
            const double rew = cfg->task.reward.kind == CFG_REWARD_CORRECT ? ok : r;
            json_t *o = all ? json_pack("{s:s, s:s, s:f, s:i}", "prompt", prompt, "answer", text,
                                        "reward", rew, "correct", ok)
                            : json_pack("{s:s, s:s}", "prompt", prompt, "answer", text);
            if (!o || json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER) || fputc('\n', f) == EOF)
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "write failed: %s", strerror(errno));
            json_decref(o);
            free(prompt);
            *n_ok += ok != 0;
        }
        free(text);
    }
    if (generated)
        dllm_rollout_free(&ro);
    free(prompts);
    free(pm);
    free(lens);
    free(idx);
    return rc;
}

int cmd_rft_data(int argc, char **argv)
{
    rft_args a = {0};
    dllm_err err = {0};
    dllm_cfg cfg;
    if (parse_args(argc, argv, &a, &err) ||
        rl_config_load(&cfg, a.config, NULL, a.sets, a.nsets, &err))
        return cli_fail("rft-data", &err);
    if (!cfg.model.path[0]) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: model.path is required (the model to sample "
                     "from: the RL run's starting model)", a.config);
        return cli_fail("rft-data", &err);
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", a.out);
    rl_run run;
    int rc = rl_run_open(&run, &cfg, ".", &err);
    FILE *f = rc ? NULL : fopen(tmp, "w");
    if (!rc && !f)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--out %s: %s", tmp, strerror(errno));
    long n_ok = 0;
    const long per_step = (long)cfg.grpo.prompts_per_step * cfg.rollout.group_size;
    const double t0 = dllm_now();
    for (int64_t step = 1; !rc && step <= cfg.grpo.steps; step++) {
        rc = sample_step(&run, step, a.all, f, &n_ok, &err);
        if (!rc && !a.quiet)
            fprintf(stderr, "rft-data: step %lld/%d, %ld of %lld correct, %.1f s\n",
                    (long long)step, cfg.grpo.steps, n_ok, (long long)step * per_step,
                    dllm_now() - t0);
    }
    if (f && fclose(f) && !rc)
        rc = dllm_err_set(&err, DLLM_EXIT_INTERNAL, "%s: write failed", tmp);
    if (!rc && rename(tmp, a.out))
        rc = dllm_err_set(&err, DLLM_EXIT_INTERNAL, "%s: %s", a.out, strerror(errno));
    if (rc && f)
        unlink(tmp);
    rl_run_close(&run);
    if (rc)
        return cli_fail("rft-data", &err);
    const long total = (long)cfg.grpo.steps * per_step;
    printf("rft-data: %ld completions (%d steps x %d prompts x %d), %ld correct (%.4f), %s in %s\n",
           total, cfg.grpo.steps, cfg.grpo.prompts_per_step, cfg.rollout.group_size, n_ok,
           total ? (double)n_ok / (double)total : 0.0, a.all ? "all" : "the correct ones",
           a.out);
    return 0;
}
