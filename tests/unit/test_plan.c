/* test_plan.c: `dllm-rl plan` and the plans behind it.
 *
 *  - sizes: GB/GiB/G/MB... parsed to exact byte counts, bad sizes refused naming the flag;
 *  - the recorded plan (src/plan/plan_memory.h) of tiny LLaDA and Qwen3 runs: its items
 *    sum to its peak; recomputation, micro-batch, rollout batch, ranks and generation
 *    length move it the way they must; the suggestion it makes fits; bad options name
 *    the flag or key (the emulated allocator's check of it: test_plan_device.c);
 *  - the CPU backend's buffers for a tiny LLaDA (src/plan/mem_plan.h);
 *  - the binary: the d1 LLaDA-8B recipe's recorded peak fits 80 GB with per-layer
 *    recomputation and not without it, is refused at 40 GB with a message naming what to
 *    change, gives the same plan from the published config.json as from the preset; the
 *    Qwen3-8B recipe is planned; --phase; bad flags are exit 2 naming the flag;
 *  - train with --max-gpu-memory: refused by the recorded plan's number (one byte under it
 *    refused, at it accepted) before anything is written, the plan printed first; sft
 *    with --max-gpu-memory likewise. */
#include "src/plan/mem_plan.h"
#include "src/plan/plan_memory.h"
#include "kernels/fp8.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers -------------------------------------------------------------------------- */

static const mem_item *item(const mem_plan *p, mem_phase ph, const char *name)
{
    for (int i = 0; i < p->n_items; i++)
        if (p->items[i].phase == ph && !strcmp(p->items[i].name, name))
            return &p->items[i];
    return NULL;
}

static int64_t bytes_of(const mem_plan *p, mem_phase ph, const char *name)
{
    const mem_item *it = item(p, ph, name);
    ck_assert_msg(it != NULL, "no item '%s' in phase %s", name, mem_phase_names[ph]);
    return it->bytes;
}

static void cfg_with(dllm_cfg *cfg, const char *const *sets)
{
    dllm_err err = {0};
    dllm_cfg_defaults(cfg);
    for (int i = 0; sets && sets[i]; i++)
        ck_assert_msg(dllm_cfg_set(cfg, sets[i], &err) == 0, "%s: %s", sets[i], err.msg);
}

/* ---- sizes ---------------------------------------------------------------------------- */

START_TEST(test_parse_size)
{
    static const struct { const char *s; int64_t want; } ok[] = {
        {"80GB", 80000000000LL},      {"80GiB", 80LL << 30},     {"40G", 40000000000LL},
        {"81920MB", 81920000000LL},   {"512MiB", 512LL << 20},   {"1.5TB", 1500000000000LL},
        {"79.6gib", 85469849190LL},   {"123B", 123},             {"2k", 2000},
        {"3KiB", 3072},               {"1TiB", 1LL << 40}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t b = -1;
        dllm_err err = {0};
        ck_assert_msg(mem_parse_size(ok[i].s, "--max-gpu-memory", &b, &err) == 0, "%s: %s", ok[i].s,
                      err.msg);
        ck_assert_msg(b == ok[i].want, "%s: %lld, want %lld", ok[i].s, (long long)b, (long long)ok[i].want);
    }
    static const char *const bad[] = {"80", "GB", "-1GB", "0GB", "80XB", "80 G B", "", "1e30GB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t b = 0;
        dllm_err err = {0};
        ck_assert_msg(mem_parse_size(bad[i], "--max-gpu-memory", &b, &err) == DLLM_EXIT_INPUT,
                      "'%s' was accepted", bad[i]);
        ck_assert_msg(strstr(err.msg, "--max-gpu-memory"), "message does not name the flag: %s", err.msg);
    }
}
END_TEST

/* ---- the recorded plan of tiny runs --------------------------------------------------- */

/* LLaDA tiny: C 64, L 2, NH = NKV 4, HD 16, F 176, V 128. The config: LoRA r 4 on all
 * seven linears, 8 prompts x 8 completions, 64 generated tokens in blocks of 16, FP8
 * block-scaled rollouts; 10 prompt tokens. */
static const char *const tiny_sets[] = {"model.lora.rank=4", "grpo.prompts_per_step=8",
                                        "rollout.group_size=8", "rollout.gen_length=64",
                                        "rollout.block_length=16", "rollout.steps=32", NULL};

/* The tiny run's recorded plan of phase ph under options o and extra config keys; 0 or the
 * input error's code (err set). */
static int tiny_recorded(dllm_arch arch, pm_plan *p, mem_plan_opts *o, pm_phase ph,
                         const char *const *extra, dllm_err *err)
{
    dllm_model_config mc;
    ck_assert_int_eq(dllm_config_preset(&mc, arch, "tiny", err), 0);
    dllm_cfg cfg;
    cfg_with(&cfg, tiny_sets);
    char set[64];
    snprintf(set, sizeof set, "model.arch=%s", dllm_arch_get(arch)->name);
    ck_assert_int_eq(dllm_cfg_set(&cfg, set, err), 0);
    for (int i = 0; extra && extra[i]; i++)
        ck_assert_msg(dllm_cfg_set(&cfg, extra[i], err) == 0, "%s", err->msg);
    o->prompt_tokens = 10;
    pm_shape s;
    int rc = pm_shape_of_run(&s, &cfg, &mc, o, err);
    return rc ? rc : pm_record(&mc, &s, ph, p, err);
}

static int64_t tiny_peak(dllm_arch arch, mem_plan_opts *o, pm_phase ph, const char *const *extra)
{
    pm_plan p;
    dllm_err err = {0};
    ck_assert_msg(tiny_recorded(arch, &p, o, ph, extra, &err) == 0, "%s", err.msg);
    return p.peak;
}

static int64_t item_bytes(const pm_plan *p, const char *tag)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->items[i].tag, tag))
            return p->items[i].bytes;
    return 0;
}

START_TEST(test_recorded_tiny)
{
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    pm_plan p;
    dllm_err err = {0};
    ck_assert_msg(tiny_recorded(DLLM_ARCH_LLADA, &p, &o, PM_TRAIN, NULL, &err) == 0, "%s", err.msg);
    /* the items are the bytes live at the peak: they sum to it */
    int64_t sum = 0;
    for (int i = 0; i < p.n; i++)
        sum += p.items[i].bytes;
    ck_assert_int_eq(sum, p.peak);
    ck_assert(p.update); /* LoRA under the fp32 trainer: the update on the device */
    ck_assert_int_eq(item_bytes(&p, "cuBLASLt workspace"), 32 << 20);
    ck_assert(item_bytes(&p, "model: weights, views, LoRA, rollout copy") > 0);
    ck_assert(item_bytes(&p, "update: kept forward") > 0);
    ck_assert(item_bytes(&p, "update: gradients, AdamW moments, trainer view") > 0);
    /* a phase's work is a part of the step's */
    const int64_t train = p.peak;
    ck_assert(tiny_peak(DLLM_ARCH_LLADA, &o, PM_ROLLOUT, NULL) <= train);
    ck_assert(tiny_peak(DLLM_ARCH_LLADA, &o, PM_SCORE, NULL) <= train);
    /* recomputation: every layer kept holds more than one layer's inputs */
    mem_plan_opts on = o;
    on.recompute = MEM_RECOMPUTE_NONE;
    ck_assert(tiny_peak(DLLM_ARCH_LLADA, &on, PM_TRAIN, NULL) > train);
    /* fewer canvases per forward, fewer sequences decoded together, more ranks: less */
    mem_plan_opts om = o;
    om.micro_batch = 8;
    ck_assert(tiny_peak(DLLM_ARCH_LLADA, &om, PM_TRAIN, NULL) < train);
    mem_plan_opts orb = o;
    orb.rollout_batch = 4;
    ck_assert(tiny_peak(DLLM_ARCH_LLADA, &orb, PM_ROLLOUT, NULL) <
              tiny_peak(DLLM_ARCH_LLADA, &o, PM_ROLLOUT, NULL));
    mem_plan_opts o2 = o;
    o2.ranks = 2;
    ck_assert(tiny_peak(DLLM_ARCH_LLADA, &o2, PM_TRAIN, NULL) < train);
    /* a bf16 trainer's full fine-tuning updates on the device too, its fp32 masters beside
     * the rounded copy: more than the fp32 trainer's update holds */
    static const char *const full[] = {"model.lora.rank=0", "model.trainer_precision=bf16", NULL};
    static const char *const full32[] = {"model.lora.rank=0", NULL};
    ck_assert_msg(tiny_recorded(DLLM_ARCH_LLADA, &p, &o, PM_TRAIN, full, &err) == 0, "%s", err.msg);
    ck_assert(p.update);
    ck_assert(item_bytes(&p, "update: kept forward") > 0);
    pm_plan p32;
    ck_assert_msg(tiny_recorded(DLLM_ARCH_LLADA, &p32, &o, PM_TRAIN, full32, &err) == 0, "%s",
                  err.msg);
    ck_assert(p32.update);
    ck_assert_msg(p.peak > p32.peak, "bf16 full %lld, fp32 full %lld", (long long)p.peak,
                  (long long)p32.peak);
    /* Qwen3 decodes with a KV cache: a longer generation holds more */
    static const char *const g16[] = {"rollout.gen_length=16", "rollout.block_length=16",
                                      "rollout.steps=16", NULL};
    ck_assert(tiny_peak(DLLM_ARCH_QWEN3, &o, PM_ROLLOUT, g16) <
              tiny_peak(DLLM_ARCH_QWEN3, &o, PM_ROLLOUT, NULL));
    /* Dream: its sampler's steps, the update on the device */
    ck_assert_msg(tiny_recorded(DLLM_ARCH_DREAM, &p, &o, PM_TRAIN, NULL, &err) == 0, "%s", err.msg);
    ck_assert(p.update && item_bytes(&p, "rollout: sampler, activations, logits") > 0);
}
END_TEST

/* The single change pm_suggest finds fits, and bad options name the flag or key. */
START_TEST(test_recorded_suggest_and_bad_options)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    dllm_cfg cfg;
    cfg_with(&cfg, tiny_sets);
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    o.prompt_tokens = 10;
    o.recompute = MEM_RECOMPUTE_NONE;
    pm_shape s;
    ck_assert_int_eq(pm_shape_of_run(&s, &cfg, &mc, &o, &err), 0);
    pm_plan none, layer;
    ck_assert_int_eq(pm_record(&mc, &s, PM_TRAIN, &none, &err), 0);
    s.recompute = 1;
    ck_assert_int_eq(pm_record(&mc, &s, PM_TRAIN, &layer, &err), 0);
    s.recompute = 0;
    ck_assert(layer.peak < none.peak);
    char fix[128];
    ck_assert_int_eq(pm_suggest(&mc, &s, PM_TRAIN, layer.peak, fix, sizeof fix), 1);
    ck_assert_msg(!strncmp(fix, "--recompute layer", 17), "%s", fix);
    /* under the peak of micro-batches of 1 nothing single fits */
    s.recompute = 1;
    ck_assert_int_eq(pm_suggest(&mc, &s, PM_TRAIN, 1000, fix, sizeof fix), 0);
    /* the refusal names the peak, the largest items, the flags, and the change that fits */
    s.recompute = 0;
    ck_assert_int_eq(pm_does_not_fit(&none, &mc, &s, layer.peak, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "does not fit: the train phase peaks at") &&
                      strstr(err.msg, "update: kept forward") && strstr(err.msg, "--micro-batch") &&
                      strstr(err.msg, "--rollout-batch") && strstr(err.msg, "--ranks") &&
                      strstr(err.msg, "This fits: --recompute layer"), "%s", err.msg);
    static const struct { int ranks, rb; const char *set, *want; } bad[] = {
        {3, 0, NULL, "--ranks"},
        {1, 65, NULL, "--rollout-batch"},
        {1, 0, "rollout.precision=nvfp4", "rollout.precision"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cfg_with(&cfg, tiny_sets);
        if (bad[i].set)
            ck_assert_int_eq(dllm_cfg_set(&cfg, bad[i].set, &err), 0);
        mem_plan_opts_defaults(&o);
        o.ranks = bad[i].ranks, o.rollout_batch = bad[i].rb;
        ck_assert_int_eq(pm_shape_of_run(&s, &cfg, &mc, &o, &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, bad[i].want), "%zu: %s", i, err.msg);
    }
}
END_TEST

/* The CPU backend's buffers for the tiny LLaDA: fp32 copies and full attention. */
START_TEST(test_tiny_llada_cpu)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    dllm_cfg cfg;
    cfg_with(&cfg, tiny_sets);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "model.trainer_precision=bf16", &err), 0);
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    o.prompt_tokens = 10;
    o.cap = 1; /* ignored: no cap on the host */
    o.recompute = MEM_RECOMPUTE_NONE; /* every layer's activations kept */
    mem_plan p;
    ck_assert_msg(mem_plan_build_cpu(&p, &mc, &cfg, &o, &err) == 0, "%s", err.msg);
    ck_assert(p.cpu && p.fits);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "weights (fp32)"), 4 * 117056);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "bf16 trainer copy (stored fp32)"), 4 * 117056);
    /* the fast FP8 product keeps the codes widened to bf16 where the CPU has bf16 dot
     * products, else (as fp8-exact) a dequantised fp32 cache */
    if (fp8_fast_blocks())
        ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "FP8 copy: codes as bf16 (fast product)"), 2 * 100352);
    else
        ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "FP8 copy: dequantised cache (fp32)"), 4 * 100352);
    mem_plan pe;
    ck_assert_int_eq(dllm_cfg_set(&cfg, "rollout.precision=fp8-exact", &err), 0);
    ck_assert_msg(mem_plan_build_cpu(&pe, &mc, &cfg, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(bytes_of(&pe, MEM_RESIDENT, "FP8 copy: dequantised cache (fp32)"), 4 * 100352);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "rollout.precision=fp8", &err), 0);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "FP8 copy: other weights (bf16 stored fp32)"),
                     4 * (117056 - 100352));
    /* softmax probabilities of every layer: 2 x 64 canvases x 4 heads x 74 x 74 floats */
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "trainer attention probabilities"), 4LL * 2 * 64 * 4 * 74 * 74);
    /* kept per layer: 4C + 2QD + 2KD + 3F + 2 = 1042 floats, 7 r = 28 LoRA, plus 3 residual slots */
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "trainer activations (2 layers)"),
                     4LL * 4736 * (3 * 64 + 2 * (1042 + 28)));
    /* recomputation (train.recompute layer, the default): one layer's activations and
     * probabilities, the same 3 residual slots (the layers' inputs and x_L) */
    mem_plan pr;
    o.recompute = MEM_RECOMPUTE_LAYER;
    ck_assert_msg(mem_plan_build_cpu(&pr, &mc, &cfg, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(bytes_of(&pr, MEM_RESIDENT, "trainer activations (1 layer)"),
                     4LL * 4736 * (3 * 64 + 1042 + 28));
    ck_assert_int_eq(bytes_of(&pr, MEM_RESIDENT, "trainer attention probabilities"),
                     4LL * 64 * 4 * 74 * 74);
    ck_assert_int_eq(bytes_of(&p, MEM_LIKELIHOOD, "chunk logits (fp32)"), 4LL * 64 * 64 * 128);
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "sampler logits (fp32)"), 4LL * 64 * 16 * 128);
    ck_assert_ptr_null(item(&p, MEM_RESIDENT, "trainer weights (bf16)"));
    /* the Qwen3 model's CPU buffers are not planned */
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_QWEN3, "tiny", &err), 0);
    ck_assert_int_eq(mem_plan_build_cpu(&p, &mc, &cfg, &o, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "--device cpu"), "%s", err.msg);
}
END_TEST

/* ---- the binary ------------------------------------------------------------------------- */

static char configs[1024];

/* The recorded plan as JSON: its items sum to its peak, fits is the cap's verdict and the
 * exit status's. */
static json_t *rec_json(const char *args, int *rc_out)
{
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s --json", args);
    ck_assert_msg(rc == 0 || rc == 2, "exit %d: %s", rc, errs);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", je.text, out);
    ck_assert(json_is_true(json_object_get(j, "recorded")));
    ck_assert_int_eq(json_is_true(json_object_get(j, "fits")), rc == 0);
    json_int_t sum = 0;
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(j, "items"), i, it)
        sum += json_integer_value(json_object_get(it, "bytes"));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "peak_bytes")), sum);
    if (rc_out)
        *rc_out = rc;
    free(out);
    free(errs);
    return j;
}

static long long peak_of(const char *args)
{
    json_t *j = rec_json(args, NULL);
    long long v = json_integer_value(json_object_get(j, "peak_bytes"));
    json_decref(j);
    return v;
}

START_TEST(test_bin_d1_recipe)
{
    char *out, *errs;
    /* fits 80 GB with recomputation per layer (the default) */
    int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --device cuda", configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(out, "device memory (train phase, recorded)") &&
                      strstr(out, "fits in 80.00 GB (74.51 GiB): yes") &&
                      strstr(out, "recompute layer") && strstr(out, "update: kept forward") &&
                      strstr(out, "model: weights, views, LoRA, rollout copy"), "%s", out);
    free(out);
    free(errs);
    char args[2048];
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --device cuda", configs);
    const long long train = peak_of(args);
    ck_assert(train > 40LL * 1000000000 && train <= 80LL * 1000000000);
    /* --phase train is the same plan; a phase's part is at most the step's */
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --device cuda --phase train", configs);
    ck_assert_int_eq(peak_of(args), train);
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --phase rollout", configs);
    ck_assert(peak_of(args) < train);
    /* not without recomputation: refused with the change that fits */
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --device cuda --recompute none", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out, "fits in 80.00 GB (74.51 GiB): no"), "%s", out);
    ck_assert_msg(strstr(errs, "update: kept forward") && strstr(errs, "This fits: --recompute layer"),
                  "%s", errs);
    free(out);
    free(errs);
    /* 40 GB: refused, naming what to change */
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --device cuda --max-gpu-memory 40GB", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out, "fits in 40.00 GB (37.25 GiB): no"), "%s", out);
    ck_assert_msg(strstr(errs, "does not fit") && strstr(errs, "--micro-batch") &&
                      strstr(errs, "--recompute") && strstr(errs, "model.lora.rank") &&
                      strstr(errs, "--ranks") && strstr(errs, "--rollout-batch"),
                  "%s", errs);
    free(out);
    free(errs);
    /* 60 GB: the one change the message proposes fits, twice its micro-batch does not */
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --max-gpu-memory 60GB", configs);
    ck_assert_int_eq(rc, 2);
    const char *fix = strstr(errs, "This fits: --micro-batch ");
    ck_assert_msg(fix != NULL, "%s", errs);
    int mb = atoi(fix + strlen("This fits: --micro-batch "));
    ck_assert_int_eq(mb, 32);
    free(out);
    free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --max-gpu-memory 60GB --micro-batch %d",
                      configs, mb);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    free(out);
    free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --max-gpu-memory 60GB --micro-batch %d",
                      configs, 2 * mb);
    ck_assert_int_eq(rc, 2);
    free(out);
    free(errs);
    /* full fine-tuning of 8B under an fp32 trainer: its fp32 weights, gradients and moments
     * on the device are beyond 80 GB, and the message says LoRA */
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --set model.lora.rank=0 "
                      "--set model.trainer_precision=fp32", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "LoRA (model.lora.rank > 0"), "%s", errs);
    free(out);
    free(errs);
}
END_TEST

/* The host plans as JSON: the phases are resident + their items. */
static json_t *plan_json(const char *args)
{
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s --json", args);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", je.text, out);
    json_int_t sum[MEM_NPHASE] = {0};
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(j, "items"), i, it) {
        const char *ph = json_string_value(json_object_get(it, "phase"));
        for (int k = 0; k < MEM_NPHASE; k++)
            if (!strcmp(ph, mem_phase_names[k]))
                sum[k] += json_integer_value(json_object_get(it, "bytes"));
    }
    json_t *phases = json_object_get(j, "phases");
    json_int_t peak = 0;
    for (int k = 0; k < MEM_NPHASE; k++) {
        json_int_t v = json_integer_value(json_object_get(phases, mem_phase_names[k]));
        ck_assert_int_eq(v, sum[0] + (k ? sum[k] : 0));
        peak = v > peak ? v : peak;
    }
    ck_assert_int_eq(json_integer_value(json_object_get(j, "peak_bytes")), peak);
    free(out);
    free(errs);
    return j;
}

START_TEST(test_bin_json_and_config_json)
{
    char args[2048];
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --device cuda", configs);
    json_t *a = rec_json(args, NULL);
    /* the published config.json gives the preset's plan */
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --device cuda --set model.path=%s/checkpoint/llada-8b-instruct",
             configs, getenv("DLLM_TEST_DATA"));
    json_t *b = rec_json(args, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "peak_bytes")),
                     json_integer_value(json_object_get(b, "peak_bytes")));
    ck_assert_int_eq(json_integer_value(json_object_get(a, "cap_bytes")), 80000000000LL);
    ck_assert(json_is_true(json_object_get(a, "update_on_device")));
    ck_assert_str_eq(json_string_value(json_object_get(a, "phase")), "train");
    json_decref(a);
    json_decref(b);
    /* a small model from its config.json (GQA): 2 ranks, and the cap in GiB */
    snprintf(args, sizeof args,
             "%s/llada-8b-gsm8k-d1.yaml --device cuda --set model.path=%s/llada/tiny_gqa --ranks 2 "
             "--max-gpu-memory 1GiB", configs, getenv("DLLM_TEST_DATA"));
    json_t *c = rec_json(args, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(c, "cap_bytes")), 1LL << 30);
    ck_assert(json_is_true(json_object_get(c, "fits")));
    ck_assert_msg(strstr(json_string_value(json_object_get(c, "what")), "48 sequences per rank"),
                  "%s", json_string_value(json_object_get(c, "what")));
    json_decref(c);
}
END_TEST

/* The CPU backend's buffers for the d1 recipe: far beyond one GPU, no cap, exit 0. */
START_TEST(test_bin_cpu)
{
    char args[2048];
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --device cpu", configs);
    json_t *j = plan_json(args);
    ck_assert(json_is_true(json_object_get(j, "fits")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "cap_bytes")), 0);
    /* train.recompute layer (the default): one layer's activations and probabilities */
    ck_assert(json_integer_value(json_object_get(j, "peak_bytes")) > 100LL * 1000000000LL);
    json_decref(j);
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --device cpu --recompute none", configs);
    j = plan_json(args);
    ck_assert(json_integer_value(json_object_get(j, "peak_bytes")) > 400LL * 1000000000LL);
    json_decref(j);
    /* the config's key is what the plan reads when --recompute is not given */
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --device cpu --set train.recompute=none",
             configs);
    j = plan_json(args);
    ck_assert(json_integer_value(json_object_get(j, "peak_bytes")) > 400LL * 1000000000LL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "recompute")), "none");
    json_decref(j);
}
END_TEST

START_TEST(test_bin_qwen3_recipe)
{
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s/qwen3-8b-math.yaml --device cuda", configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs); /* the recipe fits one 80 GB GPU */
    ck_assert_msg(strstr(out, "qwen3 8.19B parameters") && strstr(out, "peak:") &&
                      strstr(out, "rollout: sampler, activations, logits"), "%s", out);
    free(out);
    free(errs);
    /* the recipe decodes a quarter of the sequences at once (rollout.batch 64): a smaller
     * rollout peak than all 256 at once, which --rollout-batch sets */
    char args[2048];
    snprintf(args, sizeof args, "%s/qwen3-8b-math.yaml --phase rollout --rollout-batch 256",
             configs);
    const long long all = peak_of(args);
    snprintf(args, sizeof args, "%s/qwen3-8b-math.yaml --phase rollout", configs);
    ck_assert(peak_of(args) < all);
    snprintf(args, sizeof args, "%s/qwen3-8b-math.yaml --phase rollout --rollout-batch 64", configs);
    const long long q = peak_of(args);
    snprintf(args, sizeof args, "%s/qwen3-8b-math.yaml --phase rollout", configs);
    ck_assert_int_eq(peak_of(args), q);
}
END_TEST

START_TEST(test_bin_bad_input)
{
    static const struct { const char *args, *want; } bad[] = {
        {"--max-gpu-memory 80", "--max-gpu-memory"},
        {"--max-gpu-memory 80PB", "--max-gpu-memory"},
        {"--max-gpu-memory", "--max-gpu-memory"},
        {"--recompute sometimes", "--recompute"},
        {"--recompute every:0", "--recompute"},
        {"--ranks 0", "--ranks"},
        {"--ranks 5", "--ranks"},
        {"--micro-batch x", "--micro-batch"},
        {"--rollout-batch 1000", "--rollout-batch"},
        {"--device tpu", "--device"},
        {"--bogus", "--bogus"},
        {"--preset huge", "--preset"},
        {"--set grpo.bogus=1", "grpo.bogus"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out, *errs;
        int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml %s", configs, bad[i].args);
        ck_assert_msg(rc == 2, "'%s': exit %d", bad[i].args, rc);
        ck_assert_msg(strstr(errs, bad[i].want), "'%s': message does not name %s: %s", bad[i].args,
                      bad[i].want, errs);
        free(out);
        free(errs);
    }
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --set model.path=/nonexistent/model", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "model.path") && strstr(errs, "--preset"), "%s", errs);
    free(out);
    free(errs);
    /* the CPU backend's buffers are planned for LLaDA only */
    rc = tu_dllm_take(&out, &errs, "plan %s/qwen3-8b-math.yaml --device cpu", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--device cpu"), "%s", errs);
    free(out);
    free(errs);
    rc = tu_dllm_take(&out, &errs, "plan");
    ck_assert_int_eq(rc, 2);
    free(out);
    free(errs);
}
END_TEST

/* train with a cap: a plan that does not fit is refused (exit 2, the message names the
 * cap and what to change) before anything is written; one that fits is printed first and
 * the run goes on. */
/* A refusal's micro-batch suggestion is the largest halving that fits (found by
 * bisection): with the cap at the peak of micro-batch 32, 8 or 1 (tiny model, 64 asked
 * for) that one is named; under the smallest's peak none is; a micro-batch of 2 or 3 (a
 * single halving) that cannot fit is refused, not searched for ever. */
START_TEST(test_bin_suggest_bisects)
{
    char args[1024];
    long long pk[7]; /* micro-batch 64 >> i */
    for (int i = 0; i < 7; i++) {
        snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --preset tiny --device cuda "
                 "--micro-batch %d", configs, 64 >> i);
        pk[i] = peak_of(args);
        ck_assert_msg(pk[i] > 0 && (i == 0 || pk[i] < pk[i - 1]), "peak %lld at %d", pk[i],
                      64 >> i);
    }
    const int want[] = {32, 8, 1};
    for (int w = 0; w < 3; w++) {
        int i = 0;
        while ((64 >> i) != want[w])
            i++;
        char *out, *errs, fix[64];
        int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny "
                              "--device cuda --micro-batch 64 --max-gpu-memory %lldb",
                              configs, pk[i]);
        snprintf(fix, sizeof fix, "This fits: --micro-batch %d ", want[w]);
        ck_assert_msg(rc == 2 && strstr(errs, fix), "cap %lld: exit %d: %s", pk[i], rc, errs);
        free(out), free(errs);
    }
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --device "
                          "cuda --micro-batch 64 --max-gpu-memory %lldb", configs, pk[6] - 1);
    ck_assert_msg(rc == 2 && !strstr(errs, "This fits: --micro-batch"), "exit %d: %s", rc, errs);
    free(out), free(errs);
    for (int mb = 2; mb <= 3; mb++) {
        rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --device "
                          "cuda --micro-batch %d --max-gpu-memory 1MB", configs, mb);
        ck_assert_msg(rc == 2 && strstr(errs, "does not fit"), "micro-batch %d: exit %d: %s", mb,
                      rc, errs);
        free(out), free(errs);
    }
}
END_TEST

START_TEST(test_bin_train_cap)
{
    char yaml[300], runs[300];
    snprintf(yaml, sizeof yaml, "%s/tiny-rl.yaml", tu_dir);
    snprintf(runs, sizeof runs, "%s/runs", tu_dir);
    FILE *f = fopen(yaml, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "experiment: cap\nmodel: {arch: llada, preset: tiny}\n"
               "task: {name: sudoku, format: plain}\n"
               "log: {dir: %s}\ngrpo: {steps: 1, prompts_per_step: 2}\n"
               "rollout: {group_size: 2, gen_length: 8, block_length: 8, steps: 4}\n"
               "eval: {every: 0}\n", runs);
    fclose(f);
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "train %s --max-gpu-memory 1MB", yaml);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(errs, "memory plan does not fit --max-gpu-memory 1MB") &&
                      strstr(errs, "the train phase peaks at"), "%s", errs);
    ck_assert_msg(strstr(out, "fits in 0.00 GB (0.00 GiB): no"), "%s", out);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "train %s --max-gpu-memory 12XB", yaml);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--max-gpu-memory"), "%s", errs);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    /* train refuses by `plan`'s number: one byte under it refused, at it accepted */
    char args[600];
    snprintf(args, sizeof args, "%s --device cuda", yaml);
    const long long peak = peak_of(args);
    rc = tu_dllm_take(&out, &errs, "train %s --max-gpu-memory %lldb", yaml, peak - 1);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, errs);
    char want[96];
    snprintf(want, sizeof want, "the train phase peaks at %.2f GB (%lld bytes)", peak / 1e9, peak);
    ck_assert_msg(strstr(errs, "the memory plan does not fit") && strstr(errs, want) &&
                      strstr(errs, "dllm-rl plan"), "%s", errs);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    /* at the peak: the plan first, then the run */
    rc = tu_dllm_take(&out, &errs, "train %s --max-gpu-memory %lldb", yaml, peak);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    const char *plan = strstr(out, "device memory (train phase, recorded)"),
               *fits = strstr(out, "): yes"), *hdr = strstr(out, "train: ");
    ck_assert_msg(plan && fits && hdr && plan < fits && fits < hdr, "%s", out);
    free(out), free(errs);
    /* without a cap on the CPU no plan is printed */
    rc = tu_dllm_take(&out, &errs, "train %s --force", yaml);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    ck_assert_msg(!strstr(out, "memory plan") && !strstr(out, "device memory ("), "%s", out);
    free(out), free(errs);
}
END_TEST

/* sft with a cap: its recorded device memory refused before anything is written, printed
 * before the run when it fits, a bad size named. */
START_TEST(test_bin_sft_cap)
{
    char runs[300];
    snprintf(runs, sizeof runs, "%s/sftruns", tu_dir);
    char *out, *errs;
    const char *fmt = "sft %s/sft-tiny.yaml --set data.train=%s/data/addition.jsonl --set "
                      "log.dir=%s --set sft.steps=2 --set checkpoint.every=0 --max-gpu-memory %s";
    int rc = tu_dllm_take(&out, &errs, fmt, configs, configs, runs, "1MB");
    ck_assert_msg(rc == 2, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(errs, "the device memory does not fit --max-gpu-memory 1MB") &&
                      strstr(errs, "sft.batch_size"), "%s", errs);
    ck_assert_msg(strstr(out, "device memory (train phase, recorded): sft") &&
                      strstr(out, "update: forward and backward"), "%s", out);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, fmt, configs, configs, runs, "12XB");
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--max-gpu-memory"), "%s", errs);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, fmt, configs, configs, runs, "1GB");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    const char *plan = strstr(out, "fits in 1.00 GB (0.93 GiB): yes"), *hdr = strstr(out, "sft: ");
    ck_assert_msg(plan && hdr && plan < hdr, "%s", out);
    free(out), free(errs);
}
END_TEST

START_TEST(test_bin_phase)
{
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase rollout", configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(out, "device memory (rollout phase, recorded)") &&
                      strstr(out, "rollout: sampler, activations, logits") && strstr(out, "peak: ") &&
                      !strstr(out, "update:"), "%s", out);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase train --max-gpu-memory 10GB",
             configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "does not fit") && strstr(errs, "--rollout-batch"), "%s", errs);
    free(out), free(errs);
    char args[2048];
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --phase score", configs);
    json_t *j = rec_json(args, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "phase")), "score");
    json_decref(j);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase update", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--phase"), "%s", errs);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase train --device cpu", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--device cpu"), "%s", errs);
    free(out), free(errs);
}
END_TEST

/* --time: the modelled step of the recording backend (src/plan_time.h), labelled so */
START_TEST(test_bin_time)
{
    {   /* --max-gpu-memory: the recorded peak against the cap (exit 2 naming what to do) */
        char *o2, *e2;
        int rc2 = tu_dllm_take(&o2, &e2, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --time "
                               "--max-gpu-memory 1MB", configs);
        ck_assert_msg(rc2 == 2 && strstr(e2, "does not fit: the train phase peaks") &&
                          strstr(e2, "--ranks"),
                      "exit %d: %s", rc2, e2);
        free(o2), free(e2);
        rc2 = tu_dllm_take(&o2, &e2, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --time "
                           "--max-gpu-memory 80GB", configs);
        ck_assert_msg(rc2 == 0, "exit %d: %s", rc2, e2);
        free(o2), free(e2);
    }
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --time --json",
                 configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    const char *keys[] = {"\"modelled\": true", "\"measured\": false", "\"gpu\": \"h100\"",
                          "\"rollout_step\": {\"modelled_s\"", "\"score\": {", "\"update_step\": {",
                          "\"ideal_s\"", "\"launches\"", "\"host_syncs\"", "\"transfer_bytes\"",
                          "\"flops_by_unit\": {\"fp8_tensor_core\"", "\"bytes\"",
                          "\"fp8_over_bf16_rollout_step\": "};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(out, keys[i]), "no %s in %s", keys[i], out);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --time --gpu h200",
             configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(out, "modelled step time (h200; not a measurement)"), "%s", out);
    ck_assert_msg(strstr(out, "rollout_step") && strstr(out, "update_step"), "%s", out);
    free(out), free(errs);
    /* an INT8 rollout copy in any build (the device layout is arithmetic): its products on
     * INT8 tensor cores, none on FP8 ones; block scaling read from the config (k padded to
     * whole 128-wide blocks: more INT8 FLOPs than channel's at the tiny width of 64) */
    double i8[2];
    for (int b = 0; b < 2; b++) {
        rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --time --json "
                          "--set rollout.precision=int8 --set rollout.int8.scaling=%s", configs,
                          b ? "block" : "channel");
        ck_assert_msg(rc == 0, "int8: exit %d: %s", rc, errs);
        const char *r = strstr(out, "\"rollout_step\": {");
        ck_assert_ptr_nonnull(r);
        const char *f8 = strstr(r, "\"fp8_tensor_core\": "), *q8 = strstr(r, "\"int8_tensor_core\": ");
        ck_assert(f8 && q8);
        ck_assert_msg(atof(f8 + strlen("\"fp8_tensor_core\": ")) == 0.0, "%s", out);
        i8[b] = atof(q8 + strlen("\"int8_tensor_core\": "));
        ck_assert_msg(i8[b] > 0, "%s", out);
        free(out), free(errs);
    }
    ck_assert_msg(i8[1] > i8[0], "block %g, channel %g INT8 FLOPs", i8[1], i8[0]);
    /* a bf16 trainer with LoRA (the recipe's rank 128): every product of the update on
     * BF16 tensor cores, the adapters' (bf16_lora_fwd, bf16_lora_bwd) and the frozen
     * head's input gradient included; the fp32 trainer's on CUDA cores; the per-kind
     * breakdown names them, in the text as in the JSON */
    for (int tb = 0; tb < 2; tb++) {
        rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --time --json "
                          "--set model.trainer_precision=%s", configs, tb ? "bf16" : "fp32");
        ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
        const char *u = strstr(out, "\"update_step\": {");
        ck_assert_ptr_nonnull(u);
        const char *f32 = strstr(u, "\"fp32_cuda_core\": "), *b16 = strstr(u, "\"bf16_tensor_core\": ");
        ck_assert(f32 && b16);
        double fl = atof(f32 + strlen("\"fp32_cuda_core\": "));
        double bl = atof(b16 + strlen("\"bf16_tensor_core\": "));
        ck_assert_msg(tb ? bl > 0 && fl == 0 : fl > bl, "trainer %s: update FLOPs bf16 %g, fp32 %g",
                      tb ? "bf16" : "fp32", bl, fl);
        const char *ops = strstr(u, "\"ops\": [{\"op\": ");
        ck_assert_msg(ops, "no ops list: %s", u);
        ck_assert_msg(!tb || (strstr(ops, "\"op\": \"bf16_lora_fwd\"") &&
                              strstr(ops, "\"op\": \"bf16_lora_bwd\"")),
                      "no LoRA linears (bf16_lora_fwd, _bwd)");
        free(out), free(errs);
    }
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny --time", configs);
    ck_assert_msg(rc == 0 && strstr(out, "where the modelled time goes") &&
                  strstr(out, "linear_quant_act_fwd"), "exit %d: %s", rc, out);
    free(out), free(errs);
    /* bad input: exit 2 naming the flag */
    const char *bad[][2] = {{"--gpu h100", "--gpu"},
                            {"--time --gpu a100", "--gpu"},
                            {"--time --phase train", "--phase"},
                            {"--time --device cpu", "--device cuda"},
                            {"--time --set rollout.precision=nvfp4", "nvfp4"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --preset tiny %s", configs,
                 bad[i][0]);
        ck_assert_msg(rc == 2, "%s: exit %d", bad[i][0], rc);
        ck_assert_msg(strstr(errs, bad[i][1]), "%s: %s", bad[i][0], errs);
        free(out), free(errs);
    }
}
END_TEST

static Suite *suite(bool bin)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("library");
    tcase_add_test(tc, test_parse_size);
    tcase_add_test(tc, test_recorded_tiny);
    tcase_add_test(tc, test_recorded_suggest_and_bad_options);
    tcase_add_test(tc, test_tiny_llada_cpu);
    suite_add_tcase(s, tc);
    if (bin) {
        tc = tcase_create("binary");
        tcase_add_test(tc, test_bin_d1_recipe);
        tcase_add_test(tc, test_bin_json_and_config_json);
        tcase_add_test(tc, test_bin_qwen3_recipe);
        tcase_add_test(tc, test_bin_cpu);
        tcase_add_test(tc, test_bin_bad_input);
        tcase_add_test(tc, test_bin_suggest_bisects);
        tcase_add_test(tc, test_bin_train_cap);
        tcase_add_test(tc, test_bin_sft_cap);
        tcase_add_test(tc, test_bin_phase);
        tcase_add_test(tc, test_bin_time);
        suite_add_tcase(s, tc);
    }
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    const bool bin = tu_have_bin() && getenv("DLLM_TEST_DATA");
    if (bin) {
        snprintf(configs, sizeof configs, "%s/../../configs", getenv("DLLM_TEST_DATA"));
        if (!tu_scratch(ctx))
            return NULL;
    } else {
        tu_partial(ctx, "the binary's cases need DLLM_BIN (the dllm-rl binary) and "
                        "DLLM_TEST_DATA (the library's cases ran)");
    }
    return suite(bin);
}
