/* dllm-rl score: the sequence log-likelihood of a completion under a model,
 * with any estimator of dllm/estimators.h (METHOD.md §3). one_step (LLaDA's
 * default) is deterministic; elbo and one_step with prompt masking draw their
 * masks from the stream keyed by --seed, so two models scored with the same
 * seed see identical masks. */
#include "dllm/estimators.h"
#include "dllm/llada.h"
#include "src/cli_util.h"
#include "src/commands.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl score --model DIR --prompt-ids 1,2,3 --completion-ids 4,5,6\n"
    "         [--estimator one_step|elbo|trajectory] [--mc K] [--p-mask-prompt P]\n"
    "         [--commit-steps 0,3,1,...] [--shrink S] [--temperature T] [--seed N]\n"
    "         [--precision fp32|bf16|fp8]\n"
    "\n"
    "Prints {\"seq_logp\": x, \"token_logp\": [...], \"estimator\": ...}; elbo adds\n"
    "\"mc_se\" (standard error of the estimate) and a token's value is its mean over the\n"
    "samples that masked it (null if none). one_step: completion fully masked, prompt\n"
    "clean unless --p-mask-prompt; elbo: --mc samples (default 32) with stratified mask\n"
    "counts; trajectory: replay of --commit-steps (one per completion token), --shrink\n"
    "steps per forward pass. --precision: fp32 computes as the trainer; bf16 with a\n"
    "bf16 copy of the weights; fp8 with an FP8 (E4M3, 128x128 blockwise W8A8) copy of\n"
    "the block linears.\n";

static int forward_fn(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                      const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward_rollout(m, tokens, keymask, B, T, rows, n_rows, logits);
}

int cmd_score(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt_s = NULL, *compl_s = NULL, *est_s = "one_step";
    const char *steps_s = NULL, *precision = "fp32";
    long mc = 32, shrink = 1, seed = 0;
    double pmp = 0, temp = 1;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},         {"prompt-ids", required_argument, 0, 'p'},
        {"completion-ids", required_argument, 0, 'c'}, {"estimator", required_argument, 0, 'e'},
        {"mc", required_argument, 0, 'k'},            {"p-mask-prompt", required_argument, 0, 'q'},
        {"commit-steps", required_argument, 0, 's'},  {"shrink", required_argument, 0, 'r'},
        {"temperature", required_argument, 0, 't'},   {"seed", required_argument, 0, 'S'},
        {"precision", required_argument, 0, 'P'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompt_s = optarg; break;
        case 'c': compl_s = optarg; break;
        case 'e': est_s = optarg; break;
        case 'k': bad = cli_parse_int(optarg, "--mc", 1, 1 << 20, &mc, &err); break;
        case 'q': bad = cli_parse_double(optarg, "--p-mask-prompt", &pmp, &err); break;
        case 's': steps_s = optarg; break;
        case 'r': bad = cli_parse_int(optarg, "--shrink", 1, 1 << 20, &shrink, &err); break;
        case 't': bad = cli_parse_double(optarg, "--temperature", &temp, &err); break;
        case 'S': bad = cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &seed, &err); break;
        case 'P': precision = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
        if (bad)
            return cli_fail("score", &err);
    }
    if (optind < argc || !model_dir || !prompt_s || !compl_s) {
        fputs(usage_text, stderr);
        return DLLM_EXIT_INPUT;
    }
    dllm_lik_cfg lc = {.mc = (int)mc, .p_mask_prompt = pmp, .shrink = (int)shrink, .temperature = temp};
    if (dllm_estimator_parse(est_s, &lc.kind)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--estimator %s: expected one_step, elbo or trajectory", est_s);
        return cli_fail("score", &err);
    }
    if (!(pmp >= 0 && pmp <= 1) || !(temp > 0)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--p-mask-prompt must be in [0, 1] and --temperature > 0");
        return cli_fail("score", &err);
    }
    /* --precision: fp32 = the trainer's numerics, bf16 = the bf16 copy, fp8 = the
     * E4M3 blockwise W8A8 copy (dllm/precision.h) */
    dllm_precision prec;
    if ((strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "fp8")) ||
        dllm_precision_parse(&prec, "fp32", strcmp(precision, "fp32") ? precision : "trainer",
                              "e4m3", "block", false, &err)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--precision %s: expected fp32, bf16 or fp8", precision);
        return cli_fail("score", &err);
    }
    int32_t *prompt = NULL, *compl = NULL, *steps = NULL;
    int np = 0, nc = 0, ns = 0;
    if (cli_parse_ids(prompt_s, "--prompt-ids", &prompt, &np, &err) ||
        cli_parse_ids(compl_s, "--completion-ids", &compl, &nc, &err) ||
        (steps_s && cli_parse_ids(steps_s, "--commit-steps", &steps, &ns, &err)))
        return cli_fail("score", &err);
    int16_t *commit = NULL;
    if (lc.kind == EST_TRAJECTORY) {
        if (!steps_s || ns != nc) {
            dllm_err_set(&err, DLLM_EXIT_INPUT,
                         "trajectory needs --commit-steps with one step per completion token (%d given, %d tokens)",
                         ns, nc);
            return cli_fail("score", &err);
        }
        commit = dllm_malloc(sizeof *commit * (size_t)nc);
        for (int i = 0; i < nc; i++) {
            if (steps[i] > 32767) {
                dllm_err_set(&err, DLLM_EXIT_INPUT, "--commit-steps: %d is too large", steps[i]);
                return cli_fail("score", &err);
            }
            commit[i] = (int16_t)steps[i];
        }
    }
    if (nc == 0) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--completion-ids: empty completion");
        return cli_fail("score", &err);
    }
    dllm_tf *m;
    if (dllm_tf_load(&m, model_dir, &err))
        return cli_fail("score", &err);
    if (dllm_tf_rollout_sync(m, &prec, NULL, &err)) {
        dllm_tf_free(m);
        return cli_fail("score", &err);
    }
    const dllm_model_config *cfg = dllm_tf_config(m);
    lc.mask_id = cfg->mask_token_id;
    lc.vocab = cfg->embedding_size;
    int rc = 0;
    for (int i = 0; i < np + nc && !rc; i++) {
        int32_t id = i < np ? prompt[i] : compl[i - np];
        if (id >= cfg->vocab_size)
            rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s id %d is outside the vocabulary (%d tokens)",
                              i < np ? "--prompt-ids:" : "--completion-ids:", id, cfg->vocab_size);
    }
    if (!rc && np + nc > cfg->max_seq_len)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%d tokens exceed max_sequence_length %d", np + nc,
                          cfg->max_seq_len);
    dllm_lik_result r = {0};
    if (!rc)
        rc = dllm_seq_logprob(forward_fn, m, prompt, np, compl, nc, commit, &lc,
                              dllm_rng_make((uint64_t)seed, DLLM_RNG_MASKS, 0, 0), &r, &err);
    if (!rc) {
        printf("{\"seq_logp\": ");
        cli_print_json_number(stdout, r.seq_logp, 17);
        printf(", \"token_logp\": [");
        for (int i = 0; i < nc; i++) {
            if (i)
                printf(", ");
            cli_print_json_number(stdout, r.token_logp[i], 9);
        }
        printf("], \"estimator\": \"%s\"", dllm_estimator_name(lc.kind));
        if (lc.kind == EST_ELBO) {
            printf(", \"mc\": %d, \"mc_se\": ", lc.mc);
            cli_print_json_number(stdout, r.mc_se, 9);
        }
        printf("}\n");
    }
    dllm_lik_result_free(&r);
    free(prompt);
    free(compl);
    free(steps);
    free(commit);
    dllm_tf_free(m);
    return rc ? cli_fail("score", &err) : 0;
}
