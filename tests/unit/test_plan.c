/* test_plan.c: the device-memory plan (src/plan/mem_plan.h) and `dllm-rl plan`.
 *
 *  - sizes: GB/GiB/G/MB... parsed to exact byte counts, bad sizes refused naming the flag;
 *  - a tiny LLaDA and a tiny Qwen3 preset: items checked against byte counts derived
 *    here by hand from the dimensions (not through the plan's own formulas), the
 *    phase peaks, the cap, the recomputation modes, ranks and bad options;
 *  - the binary: the d1 LLaDA-8B recipe fits 80 GB with per-layer recomputation and
 *    not without it, is refused at 40 GB with a message naming what to change, gives
 *    the same plan from the published config.json as from the preset; the Qwen3-8B
 *    recipe is planned; bad flags are exit 2 naming the flag;
 *  - what the device path holds now (src/plan/mem_plan_device.h) for a tiny LLaDA, by hand; the
 *    emulated allocator's check of it is tests/unit/test_plan_device.c; `plan --phase`;
 *  - train with --max-gpu-memory: a tiny run under a 1 MB cap is refused with exit 2 and
 *    the message before anything is written; under 1 GB the plan is printed first. */
#include "src/plan/mem_plan.h"
#include "src/plan/mem_plan_device.h"
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

/* ---- a tiny LLaDA, by hand --------------------------------------------------------------- */

/* LLaDA tiny: C 64, L 2, NH = NKV 4, HD 16, F 176, V 128. The config: LoRA r 4 on all
 * seven linears, 8 prompts x 8 completions, 64 generated tokens in blocks of 16, FP8
 * block-scaled rollouts, elbo (4 samples) weights, one_step ratio; 10 prompt tokens. */
static const char *const tiny_sets[] = {"model.lora.rank=4", "grpo.prompts_per_step=8",
                                        "rollout.group_size=8", "rollout.gen_length=64",
                                        "rollout.block_length=16", "rollout.steps=32", NULL};

static void tiny_llada_plan(mem_plan *p, mem_plan_opts *o, const char *const *extra)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    dllm_cfg cfg;
    cfg_with(&cfg, tiny_sets);
    for (int i = 0; extra && extra[i]; i++)
        ck_assert_msg(dllm_cfg_set(&cfg, extra[i], &err) == 0, "%s", err.msg);
    o->prompt_tokens = 10;
    ck_assert_msg(mem_plan_build(p, &mc, &cfg, o, &err) == 0, "%s", err.msg);
}

START_TEST(test_tiny_llada_items)
{
    mem_plan p;
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    tiny_llada_plan(&p, &o, NULL);
    const int64_t C = 64, L = 2, F = 176, V = 128, HD = 16, r = 4;
    /* parameters: wte and head V x C, final norm C; per layer q, k, v, out C x C,
     * gate, up, down C x F, two norms */
    const int64_t lin = L * (4 * 64 * 64 + 3 * 64 * 176); /* 100352 */
    const int64_t P = 2 * 128 * 64 + 64 + lin + L * 2 * 64; /* 117056 */
    ck_assert_int_eq(lin, 100352);
    ck_assert_int_eq(P, 117056);
    ck_assert_int_eq(p.n_params, P);
    /* LoRA: q, k, v, out r(64+64) each; gate, up r(64+176); down r(176+64) */
    const int64_t Nl = L * (4 * r * 128 + 2 * r * 240 + r * 240); /* 9856 */
    ck_assert_int_eq(p.n_lora, Nl);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "trainer weights (bf16)"), 234112);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "LoRA A/B (fp32)"), 39424);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "LoRA gradients (fp32)"), 39424);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "AdamW moments m, v (fp32)"), 78848);
    ck_assert_ptr_null(item(&p, MEM_RESIDENT, "KL reference LoRA (fp32)")); /* beta 0 */
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "FP8 rollout copy: codes"), 100352);
    /* 128x128 blocks: q, k, v, out one each; gate, up 2 x 1; down 1 x 2: 10 per layer */
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "FP8 rollout copy: scales (fp32)"), 4 * 2 * 10);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "RoPE table (fp32 cos, sin)"), 4 * 74 * HD);
    const int64_t resident = 234112 + 39424 * 2 + 78848 + 100352 + 80 + 4736 + (32 << 20);
    ck_assert_int_eq(p.phase_bytes[MEM_RESIDENT], resident);

    /* rollout: 64 sequences x 74 tokens = 4736 tokens on the canvas at once */
    ck_assert_int_eq(p.seqs, 64);
    ck_assert_int_eq(p.T, 74);
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "sampler state"),
                     5 * 64 * 74 + 6 * 64 * 64 + 12 * 64 * 16);
    /* x, h, norm (192) + q, k, v (192) + attention out (64) + gate, up, product (528) */
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "layer working set (no grad)"), 4736LL * 2 * 976);
    /* 1-byte codes of the widest input (176) + 2 group scales of 4 bytes */
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "FP8 activation codes + scales"), 4736LL * 184);
    /* the block's rows: 64 x 16 = 1024 = one chunk of 1024 x V fp32 */
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "head chunk (fp32 logits)"), 1024LL * V * 4);

    /* likelihood: 64 canvases of 74 per forward; 64 x 64 scored rows, chunks of 1024 */
    ck_assert_int_eq(p.mb_lik, 64);
    ck_assert_int_eq(bytes_of(&p, MEM_LIKELIHOOD, "layer working set (no grad)"), 4736LL * 2 * 976);
    ck_assert_int_eq(bytes_of(&p, MEM_LIKELIHOOD, "LoRA x A^T (bf16)"), 4736LL * 2 * r);
    ck_assert_int_eq(bytes_of(&p, MEM_LIKELIHOOD, "per-token log-probs (fp64)"), 3LL * 64 * 64 * 8);

    /* update, recomputation per layer: 3 layer inputs of 4736 x 64 bf16, one layer's
     * activations: 2 (976 + 4 r LoRA... x 7 targets) + 8 (rstd) + 16 (LSE, 4 heads) */
    ck_assert_int_eq(p.mb_upd, 64);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "layer inputs (L+1)"), 3LL * 4736 * C * 2);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "layer activations (1 layer, recomputed)"),
                     4736LL * (2 * (976 + 7 * r) + 8 + 16));
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "backward scratch (one layer)"), 4736LL * 2 * (976 + r));
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "head rows and their gradient (bf16)"), 64LL * 64 * C * 4);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "rollout-copy rebuild stripe (fp32)"), 128LL * F * 4);
    (void)L;

    /* peaks: resident + each phase's items; the overall peak is the largest */
    int64_t sum[MEM_NPHASE] = {0};
    for (int i = 0; i < p.n_items; i++)
        sum[p.items[i].phase] += p.items[i].bytes;
    int64_t peak = 0;
    for (int ph = 1; ph < MEM_NPHASE; ph++) {
        ck_assert_int_eq(p.phase_bytes[ph], resident + sum[ph]);
        peak = p.phase_bytes[ph] > peak ? p.phase_bytes[ph] : peak;
    }
    ck_assert_int_eq(p.peak, peak);
    ck_assert_int_eq(p.phase_bytes[p.peak_phase], peak);
    ck_assert(p.fits); /* a tiny model in 80 GB */
}
END_TEST

/* An INT8 rollout copy on the GPU path is planned with its own items: a byte per code and
 * scales per row (channel) or per 128x128 block; activations per token or 1x128 group. */
START_TEST(test_tiny_llada_int8)
{
    mem_plan p;
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    static const char *const chan[] = {"rollout.precision=int8", NULL};
    tiny_llada_plan(&p, &o, chan);
    ck_assert_ptr_null(item(&p, MEM_RESIDENT, "FP8 rollout copy: codes"));
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "INT8 rollout copy: codes"), 100352);
    /* one scale per output row: per layer 4 x 64 + 2 x 176 + 64 */
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "INT8 rollout copy: scales (fp32)"), 4 * 2 * 672);
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "INT8 activation codes + scales"), 4736LL * 180);
    static const char *const blk[] = {"rollout.precision=int8", "rollout.int8.scaling=block", NULL};
    tiny_llada_plan(&p, &o, blk);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "INT8 rollout copy: scales (fp32)"), 4 * 2 * 10);
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "INT8 activation codes + scales"), 4736LL * 184);
}
END_TEST

START_TEST(test_tiny_llada_recompute_and_cap)
{
    mem_plan lay, none, ev;
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    tiny_llada_plan(&lay, &o, NULL);
    const int64_t a_layer = 2 * (976 + 7 * 4) + 8 + 16; /* 2032 bytes per token */
    o.recompute = MEM_RECOMPUTE_NONE;
    tiny_llada_plan(&none, &o, NULL);
    ck_assert_int_eq(bytes_of(&none, MEM_UPDATE, "layer activations (all L layers)"), 2LL * 4736 * a_layer);
    ck_assert_int_eq(bytes_of(&none, MEM_UPDATE, "layer inputs (L+1)"), 3LL * 4736 * 128);
    ck_assert(none.phase_bytes[MEM_UPDATE] > lay.phase_bytes[MEM_UPDATE]);
    ck_assert_int_eq(none.phase_bytes[MEM_UPDATE] - lay.phase_bytes[MEM_UPDATE], 4736LL * a_layer);
    o.recompute = MEM_RECOMPUTE_EVERY;
    o.recompute_every = 2; /* L = 2: one segment, inputs at its start and the end */
    tiny_llada_plan(&ev, &o, NULL);
    ck_assert_int_eq(bytes_of(&ev, MEM_UPDATE, "layer inputs (ceil(L/K)+1)"), 2LL * 4736 * 128);
    ck_assert_int_eq(bytes_of(&ev, MEM_UPDATE, "layer activations (K layers, recomputed)"),
                     4736LL * (2 * a_layer + 128));

    /* the cap: fits at exactly the peak, not one byte below */
    mem_plan_opts_defaults(&o);
    o.cap = lay.peak;
    mem_plan p;
    tiny_llada_plan(&p, &o, NULL);
    ck_assert(p.fits);
    o.cap = lay.peak - 1;
    tiny_llada_plan(&p, &o, NULL);
    ck_assert(!p.fits);
    char advice[900];
    mem_plan_advice(&p, advice, sizeof advice);
    ck_assert_msg(strstr(advice, "--micro-batch") && strstr(advice, "--recompute") &&
                      strstr(advice, "model.lora.rank") && strstr(advice, "--ranks"),
                  "%s", advice);

    /* a smaller micro-batch shrinks the update; a smaller head chunk the head */
    mem_plan_opts_defaults(&o);
    o.micro_batch = 8;
    o.head_chunk = 100;
    tiny_llada_plan(&p, &o, NULL);
    ck_assert_int_eq(p.mb_upd, 8);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "layer inputs (L+1)"), 3LL * 8 * 74 * 128);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "head chunk (fp32 logits, then gradient)"), 100LL * 128 * 4);
}
END_TEST

START_TEST(test_tiny_llada_options)
{
    mem_plan p;
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    dllm_cfg cfg;
    cfg_with(&cfg, tiny_sets);
    /* default 200 prompt tokens: T = 264. 2 ranks: 4 prompts x 8 per rank */
    o.ranks = 2;
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), 0);
    ck_assert_int_eq(p.seqs, 32);
    /* 3 ranks do not divide 8 prompts */
    o.ranks = 3;
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "--ranks"), "%s", err.msg);
    o.ranks = 1;
    o.rollout_batch = 65;
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "--rollout-batch"), "%s", err.msg);
    o.rollout_batch = 16;
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), 0);
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "layer working set (no grad)"), 16LL * (200 + 64) * 2 * 976);
    o.rollout_batch = 0;
    o.recompute = MEM_RECOMPUTE_EVERY;
    o.recompute_every = 3;
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "--recompute"), "%s", err.msg);
    /* the trajectory ratio: 32 passes per sequence (steps 32, shrink 1), each scoring
     * the 2 tokens one step commits (64 / 32); a micro-batch of 40 canvases holds one
     * whole sequence (32 canvases) */
    o.recompute = MEM_RECOMPUTE_LAYER;
    o.micro_batch = 40;
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.logp_estimator=trajectory", &err), 0);
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), 0);
    ck_assert_int_eq(p.mb_upd, 32);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "head rows and their gradient (bf16)"), 32LL * 2 * 64 * 4);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "layer inputs (L+1)"), 3LL * 32 * 264 * 64 * 2);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.logp_estimator=one_step", &err), 0);
    o.micro_batch = 0;
    /* grpo.beta > 0 keeps the reference LoRA */
    o.recompute = MEM_RECOMPUTE_LAYER;
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.beta=0.04", &err), 0);
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), 0);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "KL reference LoRA (fp32)"), 39424);
}
END_TEST

/* The check `train` makes at its start: silent when the plan fits; when it does not,
 * the plan printed and an input error naming what to change. */
START_TEST(test_check_run)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    dllm_cfg cfg;
    cfg_with(&cfg, tiny_sets);
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(mem_plan_check_run(&mc, &cfg, NULL, f, &err), 0);
    ck_assert_int_eq(ftell(f), 0);
    mem_plan_opts small;
    mem_plan_opts_defaults(&small);
    small.cap = 1 << 20;
    ck_assert_int_eq(mem_plan_check_run(&mc, &cfg, &small, f, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "does not fit"), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "resident buffers alone"), "%s", err.msg); /* 32 MiB workspace > 1 MiB */
    ck_assert(ftell(f) > 0);
    rewind(f);
    char line[512];
    bool seen = false;
    while (fgets(line, sizeof line, f))
        seen |= strstr(line, "fits in 0.00 GB (0.00 GiB): no") != NULL;
    ck_assert(seen);
    fclose(f);
    /* a cap between the resident buffers and the peak: the single change that fits */
    mem_plan p;
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), 0);
    const int64_t cap = p.phase_bytes[MEM_RESIDENT] + (p.peak - p.phase_bytes[MEM_RESIDENT]) * 3 / 4;
    f = tmpfile();
    o.cap = cap;
    ck_assert_int_eq(mem_plan_check_run(&mc, &cfg, &o, f, &err), DLLM_EXIT_INPUT);
    fclose(f);
    const char *fix = strstr(err.msg, "This fits: --micro-batch ");
    ck_assert_msg(fix != NULL, "%s", err.msg);
    o.micro_batch = atoi(fix + strlen("This fits: --micro-batch "));
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), 0);
    ck_assert(p.fits);
    o.micro_batch *= 2; /* the largest halving that fits */
    ck_assert_int_eq(mem_plan_build(&p, &mc, &cfg, &o, &err), 0);
    ck_assert(!p.fits);
    /* 3 ranks do not divide 8 prompts */
    mem_plan_opts_defaults(&o);
    o.ranks = 3;
    ck_assert_int_eq(mem_plan_check_run(&mc, &cfg, &o, stderr, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "--ranks"), "%s", err.msg);
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
    if (!strcmp(fp8_fast_path(), "bf16-dot"))
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

/* ---- a tiny Qwen3 (autoregressive), full fine-tuning --------------------------------------- */

START_TEST(test_tiny_qwen3_items)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_QWEN3, "tiny", &err), 0);
    static const char *const sets[] = {"model.arch=qwen3", "rollout.precision=trainer", "grpo.beta=0.04",
                                       "rollout.gen_length=64", "rollout.block_length=64",
                                       "rollout.steps=64", NULL};
    dllm_cfg cfg;
    cfg_with(&cfg, sets);
    mem_plan_opts o;
    mem_plan_opts_defaults(&o);
    o.prompt_tokens = 10;
    mem_plan p;
    ck_assert_msg(mem_plan_build(&p, &mc, &cfg, &o, &err) == 0, "%s", err.msg);
    /* C 64, L 2, NH 4, NKV 2, HD 16, F 176, V 128: q 64x64, k, v 32x64, out 64x64,
     * three MLP 64x176, norms 2 x 64 + q/k norms 2 x 16 per layer; untied head */
    const int64_t P = 2 * 128 * 64 + 64 + 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 64 * 176 + 128 + 32);
    ck_assert_int_eq(P, 108928);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "master weights (fp32)"), 4 * P);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "gradients (fp32)"), 4 * P);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "AdamW moments m, v (fp32)"), 8 * P);
    ck_assert_int_eq(bytes_of(&p, MEM_RESIDENT, "KL reference weights (bf16)"), 2 * P);
    ck_assert_ptr_null(item(&p, MEM_RESIDENT, "FP8 rollout copy: codes"));
    ck_assert_ptr_null(item(&p, MEM_UPDATE, "rollout-copy rebuild stripe (fp32)"));
    /* KV cache: k and v, 2 layers, 64 sequences x 74 positions x 32, bf16 */
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "KV cache (bf16)"), 2LL * 2 * 64 * 74 * 32 * 2);
    /* prefill 64 prompts x 10 tokens: x, h, norm 192 + q 64, k, v 64 + out 64 + MLP 528 */
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "layer working set (no grad)"), 640LL * 2 * (192 + 64 + 64 + 64 + 528));
    /* decoding: one head row per sequence */
    ck_assert_int_eq(bytes_of(&p, MEM_ROLLOUT, "head chunk (fp32 logits)"), 64LL * 128 * 4);
    /* the update: 64 sequences of 74 tokens, 3 layer inputs; no LoRA activations */
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "layer inputs (L+1)"), 3LL * 4736 * 64 * 2);
    ck_assert_int_eq(bytes_of(&p, MEM_UPDATE, "layer activations (1 layer, recomputed)"),
                     4736LL * (2 * (192 + 128 + 64 + 528) + 8 + 16));
}
END_TEST

/* ---- the binary ------------------------------------------------------------------------- */

static char configs[1024];

START_TEST(test_bin_d1_recipe)
{
    char *out, *errs;
    /* fits 80 GB with recomputation per layer (the default) */
    int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --device cuda", configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(out, "fits in 80.00 GB (74.51 GiB): yes"), "%s", out);
    ck_assert_msg(strstr(out, "recompute layer"), "%s", out);
    ck_assert_msg(strstr(out, "FP8 rollout copy: codes") && strstr(out, "LoRA A/B (fp32)"), "%s", out);
    /* beside the design, today's device path's train phase: `--phase train`'s number */
    const char *now = strstr(out, "today's device path (fp32 activations");
    ck_assert_msg(now && strstr(now, "its train phase peaks at ") && !strstr(now, ", over the cap;"),
                  "%s", out);
    double now_gb = atof(strstr(now, "peaks at ") + strlen("peaks at "));
    free(out);
    free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --device cuda --phase train",
                      configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    const char *pk = strstr(out, "\npeak: ");
    ck_assert_ptr_nonnull(pk);
    const char *gb = strstr(pk, "MiB (");
    ck_assert_ptr_nonnull(gb);
    ck_assert_msg(fabs(atof(gb + strlen("MiB (")) - now_gb) < 0.006, "%s", out);
    free(out);
    free(errs);
    /* not without recomputation */
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --device cuda --recompute none", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out, "fits in 80.00 GB (74.51 GiB): no"), "%s", out);
    ck_assert_msg(strstr(errs, "layer activations (all L layers)") && strstr(errs, "This fits: --recompute layer"),
                  "%s", errs);
    free(out);
    free(errs);
    /* 40 GB: refused, naming what to change */
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --device cuda --max-gpu-memory 40GB", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out, "fits in 40.00 GB (37.25 GiB): no"), "%s", out);
    ck_assert_msg(strstr(errs, "does not fit") && strstr(errs, "--micro-batch") &&
                      strstr(errs, "--recompute") && strstr(errs, "model.lora.rank") &&
                      strstr(errs, "--ranks"),
                  "%s", errs);
    /* ... and fits with the one change the message proposes */
    const char *fix = strstr(errs, "This fits: --micro-batch ");
    ck_assert_msg(fix != NULL, "%s", errs);
    int mb = atoi(fix + strlen("This fits: --micro-batch "));
    ck_assert_int_eq(mb, 32);
    free(out);
    free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --max-gpu-memory 40GB --micro-batch %d", configs, mb);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    free(out);
    free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --max-gpu-memory 40GB --micro-batch %d", configs,
             2 * mb);
    ck_assert_int_eq(rc, 2);
    free(out);
    free(errs);
    /* full fine-tuning: the resident buffers alone are too large for 80 GB */
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --set model.lora.rank=0", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out, "master weights (fp32)") && strstr(errs, "resident buffers alone") &&
                      strstr(errs, "model.lora.rank > 0"),
                  "%s", errs);
    free(out);
    free(errs);
}
END_TEST

/* The plan as JSON: the phases are resident + their items; `key` of the JSON. */
static json_t *plan_json(const char *args)
{
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s --json", args);
    ck_assert_msg(rc == 0 || rc == 2, "exit %d: %s", rc, errs);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", je.text, out);
    ck_assert_int_eq(json_is_true(json_object_get(j, "fits")), rc == 0);
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
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml", configs);
    json_t *a = plan_json(args);
    /* the published config.json gives the preset's plan */
    snprintf(args, sizeof args, "%s/llada-8b-gsm8k-d1.yaml --set model.path=%s/checkpoint/llada-8b-instruct",
             configs, getenv("DLLM_TEST_DATA"));
    json_t *b = plan_json(args);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "peak_bytes")),
                     json_integer_value(json_object_get(b, "peak_bytes")));
    ck_assert_int_eq(json_integer_value(json_object_get(a, "params")), 8015581184LL);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "cap_bytes")), 80000000000LL);
    json_decref(a);
    json_decref(b);
    /* a small model from its config.json (GQA): 2 ranks, and the cap in GiB */
    snprintf(args, sizeof args,
             "%s/llada-8b-gsm8k-d1.yaml --set model.path=%s/llada/tiny_gqa --ranks 2 --max-gpu-memory 1GiB",
             configs, getenv("DLLM_TEST_DATA"));
    json_t *c = plan_json(args);
    ck_assert_int_eq(json_integer_value(json_object_get(c, "sequences_per_rank")), 48);
    ck_assert_int_eq(json_integer_value(json_object_get(c, "cap_bytes")), 1LL << 30);
    ck_assert(json_is_true(json_object_get(c, "fits")));
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
    int rc = tu_dllm_take(&out, &errs, "plan %s/qwen3-8b-math.yaml", configs);
    ck_assert_msg(rc == 0 || rc == 2, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(out, "qwen3 8.19B parameters") && strstr(out, "KV cache (bf16)") &&
                      strstr(out, "peak:"),
                  "%s", out);
    ck_assert(!strstr(out, "FP8 rollout copy")); /* rollout at trainer precision */
    free(out);
    free(errs);
    /* a quarter of the sequences decoded at once: a smaller rollout peak */
    json_t *all, *quarter;
    char args[2048];
    snprintf(args, sizeof args, "%s/qwen3-8b-math.yaml", configs);
    all = plan_json(args);
    snprintf(args, sizeof args, "%s/qwen3-8b-math.yaml --rollout-batch 64", configs);
    quarter = plan_json(args);
    ck_assert(json_integer_value(json_object_get(json_object_get(quarter, "phases"), "rollout")) <
              json_integer_value(json_object_get(json_object_get(all, "phases"), "rollout")));
    json_decref(all);
    json_decref(quarter);
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
        {"--head-chunk -3", "--head-chunk"},
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
                      strstr(errs, "resident buffers alone"), "%s", errs);
    ck_assert_msg(strstr(out, "fits in 0.00 GB (0.00 GiB): no"), "%s", out);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "train %s --max-gpu-memory 12XB", yaml);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--max-gpu-memory"), "%s", errs);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    /* a cap the design plan fits and today's device path does not (its train phase, as
     * `plan --phase train` itemises it): refused by the device path's number */
    rc = tu_dllm_take(&out, &errs, "plan %s --device cuda --json", yaml);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    const char *pk = strstr(out, "\"peak_bytes\": ");
    ck_assert_ptr_nonnull(pk);
    long long design = atoll(pk + strlen("\"peak_bytes\": "));
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s --device cuda --phase train", yaml);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    const char *by = strstr(out, " GB; ");
    ck_assert_ptr_nonnull(by);
    long long now = atoll(by + strlen(" GB; "));
    free(out), free(errs);
    ck_assert_msg(now > design, "device path %lld bytes, design %lld", now, design);
    rc = tu_dllm_take(&out, &errs, "train %s --max-gpu-memory %lldb", yaml, (design + now) / 2);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, errs);
    char want[96];
    snprintf(want, sizeof want, "its train phase peaks at %.2f GB (%lld bytes", now / 1e9, now);
    ck_assert_msg(strstr(errs, "the device path does not fit") && strstr(errs, want) &&
                      strstr(errs, "--phase train"), "%s", errs);
    ck_assert_msg(access(runs, F_OK) != 0, "the refused run wrote %s", runs);
    free(out), free(errs);
    /* a cap it fits: the plan first, then the run */
    rc = tu_dllm_take(&out, &errs, "train %s --max-gpu-memory 1GB", yaml);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    const char *plan = strstr(out, "fits in 1.00 GB (0.93 GiB): yes"), *hdr = strstr(out, "train: ");
    ck_assert_msg(plan && hdr && plan < hdr, "%s", out);
    free(out), free(errs);
    /* without a cap on the CPU no plan is printed */
    rc = tu_dllm_take(&out, &errs, "train %s --force", yaml);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    ck_assert_msg(!strstr(out, "memory plan"), "%s", out);
    free(out), free(errs);
}
END_TEST

/* ---- the device path of today, by hand ----------------------------------------------- */

static int64_t dev_bytes(const mem_dev_plan *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->items[i].name, name))
            return p->items[i].bytes;
    ck_abort_msg("no device item '%s'", name);
    return -1;
}

START_TEST(test_device_now_tiny)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    mem_dev_shape s = {.B = 2, .P = 4, .G = 8, .sB = 2, .sT = 12, .sR = 16, .score_rollout = true};
    ck_assert_int_eq(dllm_precision_parse(&s.prec, "fp32", "trainer", NULL, NULL, false, &err), 0);
    mem_dev_plan p;
    ck_assert_msg(mem_plan_device(&p, &mc, &s, MEM_DEV_ROLLOUT, &err) == 0, "%s", err.msg);
    /* fp32 trainer view: all 117056 parameters; staging: gate's 176 x 64; RoPE: 512
     * positions x 8 frequencies, cos and sin; the sampler's logits rows: the 16 generated
     * rows (fewer than the 1024 of a head() call), 16 x 128 fp32 */
    ck_assert_int_eq(dev_bytes(&p, "trainer view (fp32)"), 4 * 117056);
    ck_assert_int_eq(dev_bytes(&p, "staging matrix"), 4 * 176 * 64);
    ck_assert_int_eq(dev_bytes(&p, "RoPE table"), 2 * 4 * 512 * 8);
    ck_assert_int_eq(dev_bytes(&p, "cuBLASLt workspace"), 32 << 20);
    ck_assert_int_eq(p.backend_ws, 0); /* no bf16 or FP8 linear runs */
    const int64_t nr = 2 * 8, sampler = 2 * 12 * 5 + nr * 30 + 4 * 3 + 4 + 8 * 2 + nr * 128 * 4;
    ck_assert_int_eq(dev_bytes(&p, "device sampler"), sampler);
    int64_t sum = 0;
    for (int i = 0; i < p.n; i++)
        sum += p.items[i].bytes;
    ck_assert_int_eq(p.peak, sum);
    ck_assert_int_eq(p.kept, sum - sampler);
    /* the FP8 rollout copy: fp32 embedding and three norms per layer pair (34048 bytes; no
     * fp32 head: its forwards read the bf16 one), 100352 codes, 20 block scales (per layer
     * q k v out 1, gate up down 2), bf16 head */
    ck_assert_int_eq(dllm_precision_parse(&s.prec, "fp32", "fp8", "e4m3", "block", false, &err), 0);
    ck_assert_int_eq(mem_plan_device(&p, &mc, &s, MEM_DEV_ROLLOUT, &err), 0);
    ck_assert_int_eq(dev_bytes(&p, "rollout copy (fp8)"), 34048 + 100352 + 4 * 20 + 2 * 128 * 64);
    /* the sampler's 24 rows: RMSNorm and SwiGLU write the codes and 1x128 scales of the
     * widest fused input (down's 176) into a buffer of their own, counted with the
     * workspace: 256-byte rounded 24 x 176 codes and 24 x 2 scales */
    ck_assert_int_eq(dev_bytes(&p, "FP8 activations (fused)"), 4352 + 256);
    ck_assert_int_eq(p.backend_ws, (1 << 20) + 4352 + 256);
    for (int i = 0; i < p.n; i++) /* the rollout never reads the trainer view */
        ck_assert_msg(strcmp(p.items[i].name, "trainer view (fp32)"), "trainer view planned");
    /* a run holds both views and every activation set */
    mem_dev_plan r = p, sc, t;
    ck_assert_int_eq(mem_plan_device(&sc, &mc, &s, MEM_DEV_SCORE, &err), 0);
    ck_assert_int_eq(mem_plan_device(&t, &mc, &s, MEM_DEV_TRAIN, &err), 0);
    ck_assert_int_eq(dev_bytes(&t, "trainer view (fp32)"), 4 * 117056);
    ck_assert(t.peak > r.peak && t.peak > sc.peak);
    /* the INT8 rollout copy in the device layout (rows padded to 4; the row stride to 4 under
     * channel scaling, to whole 128-wide k-blocks under block scaling): channel, the
     * 100352 codes unpadded (64 and 176 are multiples of 4) and one scale per row (per
     * layer 4 x 64 + 2 x 176 + 64 = 672); block, strides 128 (inputs of 64) and 256
     * (down's 176): 2 x (4 x 64 x 128 + 2 x 176 x 128 + 64 x 256) = 188416 codes and the
     * 20 block scales of the FP8 copy */
    ck_assert_int_eq(dllm_precision_parse(&s.prec, "fp32", "int8", NULL, NULL, false, &err), 0);
    ck_assert_int_eq(mem_plan_device(&p, &mc, &s, MEM_DEV_ROLLOUT, &err), 0);
    ck_assert_int_eq(dev_bytes(&p, "rollout copy (int8)"),
                     34048 + 100352 + 4 * 2 * 672 + 2 * 128 * 64);
    /* the producers write every fused input's codes and per-row scales: down's 176 wide,
     * 256-byte rounded 24 x 176 codes and 24 scales */
    ck_assert_int_eq(dev_bytes(&p, "INT8 activations (fused)"), 4352 + 256);
    ck_assert_int_eq(p.backend_ws, (1 << 20) + 4352 + 256);
    ck_assert_int_eq(dllm_precision_parse_int8(&s.prec, "block", &err), 0);
    ck_assert_int_eq(mem_plan_device(&p, &mc, &s, MEM_DEV_ROLLOUT, &err), 0);
    ck_assert_int_eq(dev_bytes(&p, "rollout copy (int8)"), 34048 + 188416 + 4 * 20 + 2 * 128 * 64);
    ck_assert_int_eq(dev_bytes(&p, "INT8 activations (fused)"), 24 * 256 + 256);
    /* no device linear for NVFP4 */
    ck_assert_int_eq(dllm_precision_parse(&s.prec, "fp32", "nvfp4", NULL, NULL, false, &err), 0);
    ck_assert_int_eq(mem_plan_device(&p, &mc, &s, MEM_DEV_TRAIN, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "rollout.precision"), "%s", err.msg);
}
END_TEST

START_TEST(test_bin_phase)
{
    char *out, *errs;
    int rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase rollout", configs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, errs);
    ck_assert_msg(strstr(out, "device memory now (rollout phase)") && strstr(out, "device sampler") &&
                      strstr(out, "peak: "), "%s", out);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase train --max-gpu-memory 10GB",
             configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "does not fit") && strstr(errs, "--rollout-batch"), "%s", errs);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase score --json", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--json"), "%s", errs);
    free(out), free(errs);
    rc = tu_dllm_take(&out, &errs, "plan %s/llada-8b-gsm8k-d1.yaml --phase update", configs);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(errs, "--phase"), "%s", errs);
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
        ck_assert_msg(rc2 == 2 && strstr(e2, "recorded device peak") && strstr(e2, "--ranks"),
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
    tcase_add_test(tc, test_tiny_llada_items);
    tcase_add_test(tc, test_tiny_llada_int8);
    tcase_add_test(tc, test_tiny_llada_recompute_and_cap);
    tcase_add_test(tc, test_tiny_llada_options);
    tcase_add_test(tc, test_tiny_qwen3_items);
    tcase_add_test(tc, test_check_run);
    tcase_add_test(tc, test_tiny_llada_cpu);
    tcase_add_test(tc, test_device_now_tiny);
    suite_add_tcase(s, tc);
    if (bin) {
        tc = tcase_create("binary");
        tcase_add_test(tc, test_bin_d1_recipe);
        tcase_add_test(tc, test_bin_json_and_config_json);
        tcase_add_test(tc, test_bin_qwen3_recipe);
        tcase_add_test(tc, test_bin_cpu);
        tcase_add_test(tc, test_bin_bad_input);
        tcase_add_test(tc, test_bin_train_cap);
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
