/* dllm-rl score: the sequence log-likelihood of a completion under a model of
 * either architecture, through the policy interface (dllm/policy_infer.h).
 * Masked diffusion (LLaDA): any estimator of dllm/estimators.h (docs/METHOD.md §3);
 * one_step (the default) is deterministic; elbo and one_step with prompt
 * masking draw their masks from the stream keyed by --seed, so two models
 * scored with the same seed see identical masks. Autoregressive (Qwen3): the
 * exact sum of next-token log-probs, the only estimator it takes. */
#include "dllm/estimators.h"
#include "dllm/policy_infer.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl score --model DIR --prompt-ids 1,2,3 --completion-ids 4,5,6\n"
    "         [--estimator one_step|elbo|trajectory|exact] [--mc K] [--p-mask-prompt P]\n"
    "         [--commit-steps 0,3,1,...] [--shrink S] [--temperature T] [--seed N]\n"
    "         [--precision fp32|bf16|fp8|fp8-exact|nvfp4|int8]\n"
    "         [--nvfp4-scaling block16|block32|channel|tensor] [--device cpu|cuda]\n"
    "\n"
    "Prints {\"seq_logp\": x, \"token_logp\": [...], \"estimator\": ...}; elbo adds\n"
    "\"mc_se\" (standard error of the estimate) and a token's value is its mean over the\n"
    "samples that masked it (null if none).\n"
    "Masked-diffusion (llada) models: one_step (the default): completion fully masked,\n"
    "prompt clean unless --p-mask-prompt; elbo: --mc samples (default 32) with\n"
    "stratified mask counts; trajectory: replay of --commit-steps (one per completion\n"
    "token), --shrink steps per forward pass.\n"
    "Autoregressive (qwen3, qwen3.5) models: exact (the default and the only one):\n"
    "token_logp[i] = log softmax(logits at position P+i-1 / T)[completion[i]];\n"
    "the masking flags (--mc, --p-mask-prompt, --commit-steps, --shrink) do not apply.\n"
    CLI_PRECISION_HELP
    "--device cuda computes the forwards on the CUDA backend (the estimator on the\n"
    "host, reading the logits of the rows it scores); cpu (the default) on the host.\n"
    "Without a usable CUDA device (or in a build without CUDA) cuda is refused.\n";

int cmd_score(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt_s = NULL, *compl_s = NULL, *est_s = NULL;
    const char *steps_s = NULL, *precision = "fp32", *device = "cpu", *nvfp4 = NULL;
    long mc = 32, shrink = 1, seed = 0;
    double pmp = 0, temp = 1;
    /* flags of the masking estimators, given explicitly (refused for AR models) */
    const char *mask_flag = NULL;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},         {"prompt-ids", required_argument, 0, 'p'},
        {"completion-ids", required_argument, 0, 'c'}, {"estimator", required_argument, 0, 'e'},
        {"mc", required_argument, 0, 'k'},            {"p-mask-prompt", required_argument, 0, 'q'},
        {"commit-steps", required_argument, 0, 's'},  {"shrink", required_argument, 0, 'r'},
        {"temperature", required_argument, 0, 't'},   {"seed", required_argument, 0, 'S'},
        {"precision", required_argument, 0, 'P'},     {"device", required_argument, 0, 'U'},
        {"nvfp4-scaling", required_argument, 0, 'N'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompt_s = optarg; break;
        case 'c': compl_s = optarg; break;
        case 'e': est_s = optarg; break;
        case 'k': bad = cli_parse_int(optarg, "--mc", 1, 1 << 20, &mc, &err); mask_flag = "--mc"; break;
        case 'q':
            bad = cli_parse_double(optarg, "--p-mask-prompt", &pmp, &err);
            mask_flag = "--p-mask-prompt";
            break;
        case 's': steps_s = optarg; mask_flag = "--commit-steps"; break;
        case 'r':
            bad = cli_parse_int(optarg, "--shrink", 1, 1 << 20, &shrink, &err);
            mask_flag = "--shrink";
            break;
        case 't': bad = cli_parse_double(optarg, "--temperature", &temp, &err); break;
        case 'S': bad = cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &seed, &err); break;
        case 'P': precision = optarg; break;
        case 'U': device = optarg; break;
        case 'N': nvfp4 = optarg; break;
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
    if (est_s && dllm_estimator_parse(est_s, &lc.kind)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--estimator %s: expected one_step, elbo, trajectory or exact",
                     est_s);
        return cli_fail("score", &err);
    }
    if (!(pmp >= 0 && pmp <= 1) || !(temp > 0)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--p-mask-prompt must be in [0, 1] and --temperature > 0");
        return cli_fail("score", &err);
    }
    dllm_policy_cfg pc = {.path = model_dir, .device = device, .device_flag = "--device"};
    dllm_backend *dev_be;
    if (dllm_policy_infer_cfg(&pc, precision, "--precision", &err) ||
        dllm_policy_infer_nvfp4(&pc, nvfp4, "--nvfp4-scaling", &err) ||
        dllm_policy_device_parse(device, "--device", &dev_be, &err))
        return cli_fail("score", &err);
    cli_note_rollout_product("score", pc.rollout, device);
    int32_t *prompt = NULL, *compl = NULL, *steps = NULL;
    int np = 0, nc = 0, ns = 0;
    if (cli_parse_ids(prompt_s, "--prompt-ids", &prompt, &np, &err) ||
        cli_parse_ids(compl_s, "--completion-ids", &compl, &nc, &err) ||
        (steps_s && cli_parse_ids(steps_s, "--commit-steps", &steps, &ns, &err))) {
        free(prompt);
        free(compl);
        return cli_fail("score", &err);
    }
    dllm_policy *pol = NULL;
    int16_t *commit = NULL;
    int rc = 0;
    if (nc == 0)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--completion-ids: empty completion");
    if (!rc)
        rc = dllm_policy_open(&pol, &pc, &err);
    if (!rc && !est_s)
        lc.kind = dllm_policy_default_estimator(pol);
    if (!rc)
        rc = dllm_policy_check_estimator(pol, lc.kind, "--estimator", &err);
    if (!rc && !dllm_policy_is_diffusion(pol) && mask_flag)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                          "%s: a flag of the masked-diffusion estimators; an autoregressive "
                          "(%s) model is scored exactly, without masks", mask_flag,
                          dllm_arch_get(dllm_policy_arch(pol))->name);
    if (!rc && lc.kind == EST_TRAJECTORY) {
        if (!steps_s || ns != nc) {
            rc = dllm_err_set(&err, DLLM_EXIT_INPUT,
                              "trajectory needs --commit-steps with one step per completion token "
                              "(%d given, %d tokens)", ns, nc);
        } else {
            commit = dllm_malloc(sizeof *commit * (size_t)nc);
            for (int i = 0; i < nc && !rc; i++) {
                if (steps[i] > 32767)
                    rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "--commit-steps: %d is too large",
                                      steps[i]);
                commit[i] = (int16_t)steps[i];
            }
        }
    }
    dllm_lik_result r = {0};
    if (!rc)
        rc = dllm_policy_score(pol, DLLM_PREC_ROLLOUT, prompt, np, compl, nc, commit, &lc,
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
    dllm_policy_free(pol);
    return rc ? cli_fail("score", &err) : 0;
}
