/* cmd_plan.c: `dllm-rl plan CONFIG.yaml`: the itemised device-memory plan of
 * the run on the GPU path (src/plan/mem_plan.h), and whether it fits a cap; --time, the
 * modelled step (src/plan/plan_time.h). */
#include "src/cli/commands.h"
#include "src/cli/cli_util.h"
#include "src/plan/mem_plan.h"
#include "src/plan/mem_plan_device.h"
#include "src/plan/mem_plan_run.h"
#include "dllm/policy_model.h"
#include "src/plan/plan_time.h"

#include "dllm/arch.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl plan CONFIG.yaml [--set key.path=value ...] [--device cuda|cpu]\n"
    "                    [--max-gpu-memory SIZE] [--ranks N] [--prompt-tokens N]\n"
    "                    [--micro-batch N] [--rollout-batch N] [--recompute none|layer|every:K]\n"
    "                    [--head-chunk ROWS] [--preset NAME] [--json]\n"
    "                    [--phase rollout|score|train] [--time [--gpu h100|h200]]\n\n"
    "Prints the itemised device-memory plan of CONFIG's RL run on the GPU path: every\n"
    "buffer (resident, rollout, likelihood, update) with its size and formula, the peak\n"
    "per phase (resident + the phase's transient buffers), and whether the peak fits.\n"
    "  --device cuda|cpu      default: the config's device. cuda: the GPU path's plan;\n"
    "                         cpu: the CPU backend's buffers today (LLaDA, and Qwen3.5\n"
    "                         -- host only -- with its recurrent and KV state; no cap)\n"
    "  --max-gpu-memory SIZE  the cap (default 80GB = 80e9 bytes = 74.5 GiB, which\n"
    "                         leaves about 5 GiB of an 80 GB H100 for the CUDA context);\n"
    "                         KB MB GB TB (and bare K M G T) are powers of 1000,\n"
    "                         KiB MiB GiB TiB powers of 1024\n"
    "  --ranks N              data-parallel ranks (divides grpo.prompts_per_step; default 1)\n"
    "  --prompt-tokens N      prompt tokens per sequence (default 200, d1's GSM8K prompts)\n"
    "  --micro-batch N        canvases per forward in the likelihood and update phases\n"
    "                         (default 64, as the RL loop chunks them)\n"
    "  --rollout-batch N      sequences decoded together (default: all of the rank's)\n"
    "  --recompute MODE       activations kept for backward: none, layer (the layer\n"
    "                         inputs and one layer's activations), every:K (default: the\n"
    "                         config's train.recompute, itself layer by default)\n"
    "  --head-chunk ROWS      rows of one fused head + log-softmax chunk (default 1024)\n"
    "  --preset NAME          plan with a preset's dimensions (tiny, small, llada-8b,\n"
    "                         qwen3-8b) instead of model.path's config.json\n"
    "  --json                 the plan as one JSON object\n"
    "  --phase PHASE          instead of the full GPU design: what the device path holds on\n"
    "                         the device now, allocation by allocation: rollout (one\n"
    "                         rollout of --rollout-batch sequences, default all of the\n"
    "                         rank's), score (one forward of --micro-batch canvases, default\n"
    "                         min(64, the rank's sequences), at the rollout copy, every\n"
    "                         generated row scored), train (both, at both views, and the\n"
    "                         update on the device: gradients, AdamW moments, the kept\n"
    "                         forward of --micro-batch canvases at --recompute and its\n"
    "                         backward; the device keeps every buffer it grew). Under\n"
    "                         the CUDA emulation this matches the allocator's measured peak\n"
    "                         (tests/unit/test_plan_device.c). With --max-gpu-memory: exit 2\n"
    "                         when it does not fit\n"
    "  --time                 instead of memory: a MODELLED time per phase of one step\n"
    "                         (rollout_step: one denoising step; score: the step's old\n"
    "                         log-probs; update_step: one inner step's forward, backward,\n"
    "                         clip and AdamW) from the CUDA backend's calls recorded\n"
    "                         without a device (a roofline with fixed constants, never a\n"
    "                         measurement: docs/PLAN.md), with launches, host syncs,\n"
    "                         transfers, FLOPs by unit, and FP8 over BF16 for the rollout\n"
    "                         step; with --json as one JSON object. Needs --device cuda\n"
    "                         or a cuda config. With --max-gpu-memory: exit 2 when the\n"
    "                         recorded device peak does not fit\n"
    "  --gpu h100|h200        the constants of --time (default h100: H100 SXM; h200:\n"
    "                         its 4.8 TB/s HBM)\n\n"
    "The model's dimensions come from model.path/config.json; a published checkpoint\n"
    "directory that is not there (LLaDA-8B-Instruct, LLaDA-8B-Base, Qwen3-8B) is planned\n"
    "with its preset. Without model.path: model.preset and model.arch.\n\n"
    "exit status: 0 the plan fits, 2 it does not (the message names what to change)\n"
    "or bad input, 1 internal failure\n";

typedef struct {
    const char *config, *device, *preset, *phase, *gpu;
    const char *sets[64];
    int nsets, json, cap_given, recompute_given, time;
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
        {"phase", required_argument, 0, 'F'},         {"time", no_argument, 0, 't'},
        {"gpu", required_argument, 0, 'g'},
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
            a->cap_given = 1;
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
            a->recompute_given = 1;
            break;
        case 'H':
            if (cli_parse_int(optarg, "--head-chunk", 1, 1 << 22, &v, err))
                return err->code;
            a->o.head_chunk = (int)v;
            break;
        case 'P': a->preset = optarg; break;
        case 'F':
            if (strcmp(optarg, "rollout") && strcmp(optarg, "score") && strcmp(optarg, "train"))
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "--phase: expected rollout, score or train, got '%s'", optarg);
            a->phase = optarg;
            break;
        case 'j': a->json = 1; break;
        case 't': a->time = 1; break;
        case 'g':
            if (strcmp(optarg, "h100") && strcmp(optarg, "h200"))
                return dllm_err_set(err, DLLM_EXIT_INPUT, "--gpu: expected h100 or h200, got '%s'",
                                    optarg);
            a->gpu = optarg;
            break;
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
    if (a->gpu && !a->time)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--gpu sets the constants of --time: give --time");
    if (a->time && a->phase)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--time and --phase are two different plans: "
                            "give one");
    return 0;
}

/* The config's numerics: trainer and rollout precision, FP8's format and scaling, INT8's
 * scaling. */
/* --time: the step's phases recorded at the config's shapes (plan_time.h). */
static int plan_time_now(const plan_args *a, const dllm_cfg *cfg, const dllm_model_config *mc,
                         const char *model, dllm_err *err)
{
    pt_shape s = {0};
    if (mem_run_precision(cfg, mc, &s.prec, &s.lora_mask, err))
        return err->code;
    if (dllm_arch_get(mc->arch)->sampler != DLLM_SAMPLER_BLOCK)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan --time: model.arch %s: the rollout step "
                            "is modelled for the block-wise masked-diffusion sampler (llada) only",
                            cfg_names_name(&cfg_names_arch, mc->arch));
    if (a->o.ranks < 1 || cfg->grpo.prompts_per_step % a->o.ranks)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--ranks %d must divide grpo.prompts_per_step %d (groups never split)",
                            a->o.ranks, cfg->grpo.prompts_per_step);
    s.lora_rank = cfg->model.lora.rank;
    s.lora_alpha = (float)cfg->model.lora.alpha;
    s.S = cfg->grpo.prompts_per_step / a->o.ranks * cfg->rollout.group_size;
    if (a->o.rollout_batch)
        s.S = a->o.rollout_batch;
    s.P = a->o.prompt_tokens;
    s.G = cfg->rollout.gen_length;
    s.block_length = cfg->rollout.block_length;
    s.steps = cfg->rollout.steps;
    s.cfg = cfg->rollout.cfg_scale > 0;
    s.cache = cfg->rollout.cache;
    s.micro_batch = a->o.micro_batch ? a->o.micro_batch : 64;
    s.recompute = a->o.recompute == MEM_RECOMPUTE_NONE    ? 0
                  : a->o.recompute == MEM_RECOMPUTE_LAYER ? 1
                                                          : a->o.recompute_every;
    s.grad_clip = cfg->optim.grad_clip;
    pt_result *r = dllm_malloc(sizeof *r);
    pt_gpu gpu = a->gpu && !strcmp(a->gpu, "h200") ? PT_GPU_H200 : PT_GPU_H100;
    if (plan_time_run(mc, &s, gpu, r, err)) {
        free(r);
        return err->code;
    }
    char what[2 * CFG_STR_MAX + 320];
    snprintf(what, sizeof what, "%s, %s from %s; %d sequences x (%d + %d) tokens%s, rollout %s, "
             "micro-batch %d", a->config, cfg_names_name(&cfg_names_arch, mc->arch), model, s.S,
             s.P, s.G, s.cfg ? " (CFG: twice)" : "",
             cfg_names_name(&cfg_names_rollout_precision, cfg->rollout.precision), s.micro_batch);
    if (a->json)
        plan_time_print_json(r, what, stdout);
    else
        plan_time_print(r, what, stdout);
    int64_t peak = r->peak_bytes;
    free(r);
    if (a->cap_given && peak > a->o.cap) /* the recorded peak: what `train` would allocate */
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "does not fit: the recorded device peak is %.2f GB over "
                            "--max-gpu-memory %.2f GB; lower --rollout-batch or --micro-batch, "
                            "recompute (--recompute layer), or add ranks (--ranks)",
                            (double)peak / 1e9, (double)a->o.cap / 1e9);
    return 0;
}

/* --phase: the shapes of the config's run on today's device path (mem_plan_device.h). */
static int plan_device_now(const plan_args *a, const dllm_cfg *cfg, const dllm_model_config *mc,
                           const char *model, dllm_err *err)
{
    mem_dev_shape s;
    if (mem_dev_shape_of_run(&s, cfg, mc, &a->o, err))
        return err->code;
    mem_dev_phase ph = !strcmp(a->phase, "rollout") ? MEM_DEV_ROLLOUT
                       : !strcmp(a->phase, "score") ? MEM_DEV_SCORE
                                                    : MEM_DEV_TRAIN;
    mem_dev_plan *p = dllm_malloc(sizeof *p);
    if (mem_plan_device(p, mc, &s, ph, err)) {
        free(p);
        return err->code;
    }
    char what[2 * CFG_STR_MAX + 320];
    char rec[32] = "";
    if (ph == MEM_DEV_TRAIN && s.update && s.recompute > 1)
        snprintf(rec, sizeof rec, ", update recompute every:%d", s.recompute);
    else if (ph == MEM_DEV_TRAIN && s.update)
        snprintf(rec, sizeof rec, ", update recompute %s", s.recompute ? "layer" : "none");
    snprintf(what, sizeof what, "%s, %s from %s; rollout %d x (%d + %d) tokens%s, score %d "
             "canvases of %d tokens, %d rows%s", a->config,
             cfg_names_name(&cfg_names_arch, mc->arch), model, s.B, s.P, s.G,
             s.cfg ? " (CFG: twice)" : "", s.sB, s.sT, s.sR, rec);
    mem_plan_device_print(p, what, a->cap_given ? a->o.cap : 0, stdout);
    int rc = 0;
    if (a->cap_given && p->peak > a->o.cap)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "does not fit: the device path's %s phase peaks at %.2f GB over "
                          "--max-gpu-memory %.2f GB; lower %s", a->phase, (double)p->peak / 1e9,
                          (double)a->o.cap / 1e9,
                          ph == MEM_DEV_ROLLOUT ? "--rollout-batch (sequences decoded together)"
                          : ph == MEM_DEV_SCORE ? "--micro-batch (canvases per forward)"
                          : s.update && s.recompute != 1
                              ? "--rollout-batch or --micro-batch, or recompute more "
                                "(--recompute layer)"
                              : "--rollout-batch or --micro-batch, or add ranks (--ranks)");
    free(p);
    return rc;
}

/* Beside the design: what today's device path allocates for the run's train phase (the
 * number `train` also checks), so that one output tells both. */
static void print_device_now(const dllm_cfg *cfg, const dllm_model_config *mc,
                             const mem_plan_opts *o)
{
    dllm_err e = {0};
    mem_dev_shape s;
    mem_dev_plan *p = dllm_malloc(sizeof *p);
    if (!mem_dev_shape_of_run(&s, cfg, mc, o, &e) && !mem_plan_device(p, mc, &s, MEM_DEV_TRAIN, &e))
        printf("today's device path (fp32 activations, not yet the design's bf16): its train "
               "phase peaks at %.2f GB%s; `--phase train` itemises it, and `train` refuses a run "
               "over the cap by it\n",
               (double)p->peak / 1e9, p->peak > o->cap ? ", over the cap" : "");
    free(p);
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
    if (!dllm_arch_in_core(dllm_arch_get(mc.arch)) && (!cpu || a.time || a.phase)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT,
                     "%s: a %s model runs on the host only so far (no device kernels for its "
                     "layers, docs/QWEN35.md): plan it with --device cpu",
                     a.time ? "--time" : a.phase ? "--phase" : a.device ? "--device cuda" : "device cuda",
                     dllm_arch_get(mc.arch)->name);
        return cli_fail("plan", &err);
    }
    if (!a.recompute_given) /* the run's train.recompute */
        mem_run_recompute(&cfg, &mc, &a.o);
    if (a.time) {
        if (cpu) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--time models the cuda device path: give "
                         "--device cuda (the config's device is cpu)");
            return cli_fail("plan", &err);
        }
        return plan_time_now(&a, &cfg, &mc, model, &err) ? cli_fail("plan", &err) : 0;
    }
    if (a.phase) {
        if (a.json) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--phase prints a table only: not with --json");
            return cli_fail("plan", &err);
        }
        if (cpu && a.device) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--phase plans the cuda device path: not with "
                         "--device cpu");
            return cli_fail("plan", &err);
        }
        return plan_device_now(&a, &cfg, &mc, model, &err) ? cli_fail("plan", &err) : 0;
    }
    mem_plan *p = dllm_malloc(sizeof *p);
    qwen35_config qc;
    if (!dllm_arch_in_core(dllm_arch_get(mc.arch)) &&
        (qwen35_config_for(&mc, cfg.model.path, &qc, &err) ||
         mem_plan_build_qwen35(p, &mc, &qc, &cfg, &a.o, &err))) {
        free(p);
        return cli_fail("plan", &err);
    } else if (dllm_arch_in_core(dllm_arch_get(mc.arch)) &&
               (cpu ? mem_plan_build_cpu(p, &mc, &cfg, &a.o, &err)
                    : mem_plan_build(p, &mc, &cfg, &a.o, &err))) {
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
    if (!a.json && !cpu && dllm_arch_in_core(dllm_arch_get(mc.arch)))
        print_device_now(&cfg, &mc, &a.o);
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
