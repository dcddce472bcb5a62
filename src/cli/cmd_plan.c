/* cmd_plan.c: `dllm-rl plan CONFIG.yaml`: the device memory of the run on the GPU path,
 * recorded from the code's own allocations (src/plan/plan_memory.h), and whether it fits a
 * cap; --device cpu, the host's buffers (src/plan/mem_plan.h); --time, the modelled step
 * (src/plan/plan_time.h). */
#include "src/cli/commands.h"
#include "src/cli/cli_util.h"
#include "src/plan/mem_plan.h"
#include "src/plan/mem_plan_run.h"
#include "src/plan/plan_memory.h"
#include "src/plan/plan_time.h"

#include "dllm/arch.h"
#include "dllm/policy_model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl plan CONFIG.yaml [--set key.path=value ...] [--device cuda|cpu]\n"
    "                    [--max-gpu-memory SIZE] [--ranks N] [--prompt-tokens N]\n"
    "                    [--micro-batch N] [--rollout-batch N] [--recompute none|layer|every:K]\n"
    "                    [--preset NAME] [--json] [--phase rollout|score|train]\n"
    "                    [--time [--gpu h100|h200]]\n\n"
    "Prints the device memory of CONFIG's RL run on the GPU path: the run's device work\n"
    "(the model and its views put on the device, a step's rollout, its scoring at the\n"
    "rollout copy and at the trainer, the update and the rollout copy's rebuild, the next\n"
    "rollout) runs at the run's shapes on a recording backend that allocates nothing real\n"
    "and computes nothing, and the plan is the code's own allocations: the peak (the most\n"
    "device bytes at once) and the bytes live at that moment by the work that allocated\n"
    "them, in about a second at 8B. Under the CUDA emulation the emulated allocator's peak\n"
    "equals it to the byte (tests/unit/test_plan_device.c). `train` refuses a run by the\n"
    "same number.\n"
    "  --device cuda|cpu      default: the config's device. cuda: the recorded plan; cpu:\n"
    "                         the CPU backend's buffers today (LLaDA, and Qwen3.5 with its\n"
    "                         recurrent and KV state; no cap). Qwen3.5 on cuda: the arrays\n"
    "                         its model allocates there, counted from its shapes (no\n"
    "                         --time, --phase)\n"
    "  --max-gpu-memory SIZE  the cap (default 80GB = 80e9 bytes = 74.5 GiB, which\n"
    "                         leaves about 5 GiB of an 80 GB H100 for the CUDA context);\n"
    "                         KB MB GB TB (and bare K M G T) are powers of 1000,\n"
    "                         KiB MiB GiB TiB powers of 1024\n"
    "  --ranks N              data-parallel ranks (divides grpo.prompts_per_step; default 1)\n"
    "  --prompt-tokens N      prompt tokens per sequence (default 200, d1's GSM8K prompts)\n"
    "  --micro-batch N        canvases per scoring and update forward (default: the\n"
    "                         config's train.micro_batch, 64 by default)\n"
    "  --rollout-batch N      sequences decoded together (default: the config's\n"
    "                         rollout.batch; 0 there: all of the rank's)\n"
    "  --recompute MODE       activations kept for backward: none, layer (the layer\n"
    "                         inputs and one layer's activations), every:K (default: the\n"
    "                         config's train.recompute, itself layer by default)\n"
    "  --preset NAME          plan with a preset's dimensions (tiny, small, llada-8b,\n"
    "                         qwen3-8b, dream-7b) instead of model.path's config.json\n"
    "  --json                 the plan as one JSON object\n"
    "  --phase PHASE          record one phase's work only: rollout (one rollout of\n"
    "                         --rollout-batch sequences), score (one scoring forward of\n"
    "                         --micro-batch canvases at the rollout copy), train (the\n"
    "                         whole step: the default)\n"
    "  --time                 instead of memory: a MODELLED time per phase of one step\n"
    "                         (rollout_step: one denoising step; score: the step's old\n"
    "                         log-probs; update_step: one inner step's forward, backward,\n"
    "                         clip and AdamW) from the CUDA backend's calls recorded\n"
    "                         without a device (a roofline with fixed constants, never a\n"
    "                         measurement: docs/PLAN.md), with launches, host syncs,\n"
    "                         transfers, FLOPs by unit, and FP8 over BF16 for the rollout\n"
    "                         step; with --json as one JSON object. Needs --device cuda\n"
    "                         or a cuda config. With --max-gpu-memory: exit 2 when the\n"
    "                         recorded plan's peak does not fit\n"
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
        {"preset", required_argument, 0, 'P'},
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

/* The run's recorded device memory (plan_memory.h): printed, and refused over the cap. */
static int plan_cuda(const plan_args *a, const dllm_cfg *cfg, const dllm_model_config *mc,
                     const char *model, dllm_err *err)
{
    pm_shape s;
    if (pm_shape_of_run(&s, cfg, mc, &a->o, err))
        return err->code;
    const pm_phase ph = !a->phase                     ? PM_TRAIN
                        : !strcmp(a->phase, "rollout") ? PM_ROLLOUT
                        : !strcmp(a->phase, "score")   ? PM_SCORE
                                                       : PM_TRAIN;
    pm_plan *p = dllm_malloc(sizeof *p);
    if (pm_record(mc, &s, ph, p, err)) {
        free(p);
        return err->code;
    }
    char what[2 * CFG_STR_MAX + 384], rec[32];
    if (s.recompute > 1)
        snprintf(rec, sizeof rec, "every:%d", s.recompute);
    else
        snprintf(rec, sizeof rec, "%s", s.recompute ? "layer" : "none");
    snprintf(what, sizeof what, "%s, %s %.2fB parameters from %s; %d rank%s: %d sequences per "
             "rank of %d + %d tokens, %d decoded together%s; %d canvases per scoring and update "
             "forward; recompute %s; rollout %s", a->config,
             cfg_names_name(&cfg_names_arch, mc->arch), (double)dllm_config_num_params(mc) / 1e9,
             model, a->o.ranks, a->o.ranks > 1 ? "s" : "", s.S, s.P, s.sc.gen_length, s.B,
             s.sc.cfg_scale > 0 ? " (CFG: two canvases each)" : "", s.mb < s.S ? s.mb : s.S, rec,
             s.pc.rollout);
    if (a->json)
        pm_print_json(p, what, a->o.cap, stdout);
    else
        pm_print(p, what, a->o.cap, stdout);
    int rc = p->peak > a->o.cap ? pm_does_not_fit(p, mc, &s, a->o.cap, err) : 0;
    free(p);
    return rc;
}

/* --time: the step's phases recorded at the config's shapes (plan_time.h); the device peak
 * is the recorded plan's. */
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
    pm_shape ms;
    if (pm_shape_of_run(&ms, cfg, mc, &a->o, err))
        return err->code;
    s.lora_rank = cfg->model.lora.rank;
    s.lora_alpha = (float)cfg->model.lora.alpha;
    s.S = ms.B;
    s.P = ms.P;
    s.G = cfg->rollout.gen_length;
    s.block_length = cfg->rollout.block_length;
    s.steps = cfg->rollout.steps;
    s.cfg = cfg->rollout.cfg_scale > 0;
    s.cache = cfg->rollout.cache;
    s.cache_refresh = cfg->rollout.cache_refresh;
    s.micro_batch = ms.mb;
    s.recompute = ms.recompute;
    s.sc = ms.sc;
    s.grad_clip = cfg->optim.grad_clip;
    pt_result *r = dllm_malloc(sizeof *r);
    pm_plan *pm = dllm_malloc(sizeof *pm);
    pt_gpu gpu = a->gpu && !strcmp(a->gpu, "h200") ? PT_GPU_H200 : PT_GPU_H100;
    if (plan_time_run(mc, &s, gpu, r, err) || pm_record(mc, &ms, PM_TRAIN, pm, err)) {
        free(r), free(pm);
        return err->code;
    }
    r->peak_bytes = pm->peak;
    char what[2 * CFG_STR_MAX + 320];
    snprintf(what, sizeof what, "%s, %s from %s; %d sequences x (%d + %d) tokens%s, rollout %s, "
             "micro-batch %d", a->config, cfg_names_name(&cfg_names_arch, mc->arch), model, s.S,
             s.P, s.G, s.cfg ? " (CFG: twice)" : "",
             cfg_names_name(&cfg_names_rollout_precision, cfg->rollout.precision), s.micro_batch);
    if (a->json)
        plan_time_print_json(r, what, stdout);
    else
        plan_time_print(r, what, stdout);
    int rc = a->cap_given && pm->peak > a->o.cap ? pm_does_not_fit(pm, mc, &ms, a->o.cap, err) : 0;
    free(r), free(pm);
    return rc;
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
    if (!dllm_arch_in_core(dllm_arch_get(mc.arch)) && (a.time || a.phase)) {
        dllm_err_set(&err, DLLM_EXIT_INPUT,
                     "%s: a %s model's device step is not recorded (its device memory is "
                     "counted from its shapes: plan without %s; docs/QWEN35.md)",
                     a.time ? "--time" : "--phase", dllm_arch_get(mc.arch)->name,
                     a.time ? "--time" : "--phase");
        return cli_fail("plan", &err);
    }
    if (!a.recompute_given) /* the run's train.recompute */
        mem_run_recompute(&cfg, &mc, &a.o);
    if (a.o.recompute == MEM_RECOMPUTE_EVERY && a.o.recompute_every > mc.n_layers) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "--recompute every:%d: K must be in [1, %d] (the "
                     "layers)", a.o.recompute_every, mc.n_layers);
        return cli_fail("plan", &err);
    }
    if ((a.time || a.phase) && cpu && a.device) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "%s plans the cuda device path: give --device "
                     "cuda (or leave --device out), not --device cpu",
                     a.time ? "--time" : "--phase");
        return cli_fail("plan", &err);
    }
    const bool own = !dllm_arch_in_core(dllm_arch_get(mc.arch));
    if (a.time)
        return plan_time_now(&a, &cfg, &mc, model, &err) ? cli_fail("plan", &err) : 0;
    if (!own && (!cpu || a.phase))
        return plan_cuda(&a, &cfg, &mc, model, &err) ? cli_fail("plan", &err) : 0;
    mem_plan *p = dllm_malloc(sizeof *p);
    qwen35_config qc;
    if (own && (qwen35_config_for(&mc, cfg.model.path, &qc, &err) ||
                mem_plan_build_qwen35(p, &mc, &qc, &cfg, &a.o, !cpu, &err))) {
        free(p);
        return cli_fail("plan", &err);
    } else if (dllm_arch_in_core(dllm_arch_get(mc.arch)) &&
               mem_plan_build_cpu(p, &mc, &cfg, &a.o, &err)) {
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
    if (!p->fits) /* a device plan over the cap (the recorded plan refuses it the same way) */
        dllm_err_set(&err, DLLM_EXIT_INPUT,
                     "--max-gpu-memory %.2f GB: the plan's peak %.2f GB does not fit (LoRA, "
                     "model.lora.rank, or a smaller --micro-batch / --rollout-batch)",
                     (double)a.o.cap / 1e9, (double)p->peak / 1e9);
    int rc = p->fits ? 0 : cli_fail("plan", &err);
    free(p);
    return rc;
}
