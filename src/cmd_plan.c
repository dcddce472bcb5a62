/* cmd_plan.c: `dllm-rl plan CONFIG.yaml`: the itemised device-memory plan of
 * the run on the GPU path (src/mem_plan.h), and whether it fits a cap. */
#include "src/commands.h"
#include "src/cli_util.h"
#include "src/mem_plan.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl plan CONFIG.yaml [--set key.path=value ...] [--device cuda|cpu]\n"
    "                    [--max-gpu-memory SIZE] [--ranks N] [--prompt-tokens N]\n"
    "                    [--micro-batch N] [--rollout-batch N] [--recompute none|layer|every:K]\n"
    "                    [--head-chunk ROWS] [--preset NAME] [--json]\n\n"
    "Prints the itemised device-memory plan of CONFIG's RL run on the GPU path: every\n"
    "buffer (resident, rollout, likelihood, update) with its size and formula, the peak\n"
    "per phase (resident + the phase's transient buffers), and whether the peak fits.\n"
    "  --device cuda|cpu      default: the config's device. cuda: the GPU path's plan;\n"
    "                         cpu: the CPU backend's buffers today (LLaDA only; no cap)\n"
    "  --max-gpu-memory SIZE  the cap (default 80GB = 80e9 bytes = 74.5 GiB, which\n"
    "                         leaves about 5 GiB of an 80 GB H100 for the CUDA context);\n"
    "                         KB MB GB TB (and bare K M G T) are powers of 1000,\n"
    "                         KiB MiB GiB TiB powers of 1024\n"
    "  --ranks N              data-parallel ranks (divides grpo.prompts_per_step; default 1)\n"
    "  --prompt-tokens N      prompt tokens per sequence (default 200, d1's GSM8K prompts)\n"
    "  --micro-batch N        canvases per forward in the likelihood and update phases\n"
    "                         (default 64, as the RL loop chunks them)\n"
    "  --rollout-batch N      sequences decoded together (default: all of the rank's)\n"
    "  --recompute MODE       activations kept for backward: none, layer (default: the\n"
    "                         layer inputs and one layer's activations), every:K\n"
    "  --head-chunk ROWS      rows of one fused head + log-softmax chunk (default 1024)\n"
    "  --preset NAME          plan with a preset's dimensions (tiny, small, llada-8b,\n"
    "                         qwen3-8b) instead of model.path's config.json\n"
    "  --json                 the plan as one JSON object\n\n"
    "The model's dimensions come from model.path/config.json; a published checkpoint\n"
    "directory that is not there (LLaDA-8B-Instruct, LLaDA-8B-Base, Qwen3-8B) is planned\n"
    "with its preset. Without model.path: model.preset and model.arch.\n\n"
    "exit status: 0 the plan fits, 2 it does not (the message names what to change)\n"
    "or bad input, 1 internal failure\n";

typedef struct {
    const char *config, *device, *preset;
    const char *sets[64];
    int nsets, json;
    mem_plan_opts o;
} plan_args;

static int parse_recompute(const char *s, mem_plan_opts *o, dllm_err *err)
{
    if (!strcmp(s, "none")) {
        o->recompute = MEM_RECOMPUTE_NONE;
    } else if (!strcmp(s, "layer")) {
        o->recompute = MEM_RECOMPUTE_LAYER;
    } else if (!strncmp(s, "every:", 6)) {
        long k;
        if (cli_parse_int(s + 6, "--recompute every:K", 1, 100000, &k, err))
            return err->code;
        o->recompute = MEM_RECOMPUTE_EVERY;
        o->recompute_every = (int)k;
    } else {
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--recompute: expected none, layer or every:K, got '%s'",
                            s);
    }
    return 0;
}

static int parse_args(int argc, char **argv, plan_args *a, dllm_err *err)
{
    static const struct option opts[] = {
        {"set", required_argument, 0, 's'},           {"device", required_argument, 0, 'd'},
        {"max-gpu-memory", required_argument, 0, 'm'}, {"ranks", required_argument, 0, 'r'},
        {"prompt-tokens", required_argument, 0, 'p'},  {"micro-batch", required_argument, 0, 'b'},
        {"rollout-batch", required_argument, 0, 'R'},  {"recompute", required_argument, 0, 'c'},
        {"head-chunk", required_argument, 0, 'H'},     {"preset", required_argument, 0, 'P'},
        {"json", no_argument, 0, 'j'},                 {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    memset(a, 0, sizeof *a);
    mem_plan_opts_defaults(&a->o);
    optind = 1;
    opterr = 0; /* our own messages, naming the flag */
    for (int c; (c = getopt_long(argc, argv, ":", opts, NULL)) != -1;) {
        long v;
        switch (c) {
        case 's':
            if (a->nsets == 64)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "too many --set options");
            a->sets[a->nsets++] = optarg;
            break;
        case 'd':
            if (strcmp(optarg, "cuda") && strcmp(optarg, "cpu"))
                return dllm_err_set(err, DLLM_EXIT_INPUT, "--device: expected cuda or cpu, got '%s'", optarg);
            a->device = optarg;
            break;
        case 'm':
            if (mem_parse_size(optarg, "--max-gpu-memory", &a->o.cap, err))
                return err->code;
            break;
        case 'r':
            if (cli_parse_int(optarg, "--ranks", 1, 1 << 20, &v, err))
                return err->code;
            a->o.ranks = (int)v;
            break;
        case 'p':
            if (cli_parse_int(optarg, "--prompt-tokens", 1, 1 << 22, &v, err))
                return err->code;
            a->o.prompt_tokens = (int)v;
            break;
        case 'b':
            if (cli_parse_int(optarg, "--micro-batch", 1, 1 << 20, &v, err))
                return err->code;
            a->o.micro_batch = (int)v;
            break;
        case 'R':
            if (cli_parse_int(optarg, "--rollout-batch", 1, 1 << 20, &v, err))
                return err->code;
            a->o.rollout_batch = (int)v;
            break;
        case 'c':
            if (parse_recompute(optarg, &a->o, err))
                return err->code;
            break;
        case 'H':
            if (cli_parse_int(optarg, "--head-chunk", 1, 1 << 22, &v, err))
                return err->code;
            a->o.head_chunk = (int)v;
            break;
        case 'P': a->preset = optarg; break;
        case 'j': a->json = 1; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        case ':':
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s needs a value (see --help)", argv[optind - 1]);
        default:
            return dllm_err_set(err, DLLM_EXIT_INPUT, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        a->config = argv[optind++];
    if (optind < argc || !a->config)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "expected one CONFIG.yaml (see --help)");
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    dllm_err err = {0};
    plan_args a;
    if (parse_args(argc, argv, &a, &err))
        return cli_fail("plan", &err);
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    if (dllm_cfg_load(&cfg, a.config, &err))
        return cli_fail("plan", &err);
    for (int i = 0; i < a.nsets; i++)
        if (dllm_cfg_set(&cfg, a.sets[i], &err))
            return cli_fail("plan", &err);
    const bool cpu = a.device ? strcmp(a.device, "cuda") != 0 : cfg.device != CFG_DEVICE_CUDA;
    dllm_model_config mc;
    char model[CFG_STR_MAX + 128];
    if (mem_plan_model(&cfg, a.preset, &mc, model, sizeof model, &err))
        return cli_fail("plan", &err);
    mem_plan *p = dllm_malloc(sizeof *p);
    if (cpu ? mem_plan_build_cpu(p, &mc, &cfg, &a.o, &err) : mem_plan_build(p, &mc, &cfg, &a.o, &err)) {
        free(p);
        return cli_fail("plan", &err);
    }
    char what[2 * CFG_STR_MAX + 256];
    snprintf(what, sizeof what, "%s, %s %.2fB parameters from %s", a.config,
             cfg_names_name(&cfg_names_arch, mc.arch), (double)p->n_params / 1e9, model);
    if (a.json)
        mem_plan_print_json(p, what, stdout);
    else
        mem_plan_print(p, what, stdout);
    int rc = 0;
    if (!p->fits) {
        char advice[900], fix[128];
        mem_plan_advice(p, advice, sizeof advice);
        bool one = mem_plan_suggest(&mc, &cfg, p, fix, sizeof fix);
        dllm_err_set(&err, DLLM_EXIT_INPUT, "does not fit: %s%s%s", advice, one ? ". This fits: " : "",
                     one ? fix : "");
        rc = cli_fail("plan", &err);
    }
    free(p);
    return rc;
}
