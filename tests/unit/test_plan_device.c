/* test_plan_device.c: the recorded plan (src/plan/plan_memory.h) against the CUDA
 * emulation's allocator (kernels/cuda_emu/emu_hooks.h).
 *
 * For tiny LLaDA, Dream and Qwen3 models at every precision (fp32 trainer, bf16 trainer,
 * bf16, FP8 and INT8 (channel, block) rollout copies), with and without LoRA, at several
 * batches and lengths, with CFG, a phase's device work (pm_work: a rollout; a scoring
 * forward; or a training step: the device trainer, a rollout, the scoring at both views,
 * the update -- kept forward, backward, clip, AdamW, the rollout copy's rebuild -- and
 * the next rollout, some with the evaluation's greedy rollouts after it, for LoRA and full
 * fine-tuning, fp32 and bf16 trainers, recompute
 * none, layer and every:K, on 2- and 5-layer models, and one wider model whose bf16
 * trainer's bf16_linear_bwd_x would grow the backend workspace if it widened its weight
 * to fp32) runs on the emulated device from a real model, and the same work is recorded
 * on a shape-only model of its dimensions (pm_record, what `plan` and `train` use):
 *   - the emulated allocator's peak equals the recorded peak to the byte;
 *   - the recorded items sum to the peak, and its backend workspace is the emulated
 *     backend's.
 * Each case runs in its own forked child (the parent never starts the emulated device), so
 * every peak starts from an empty device. Bookkeeping of the emulated allocator, not a GPU
 * measurement. Other builds report SKIP (77). */
#include "config.h"

#include "dllm/arch.h"
#include "dllm/policy.h"
#include "dllm/policy_infer.h"
#include "dllm/transformer.h"
#include "src/plan/plan_memory.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/emu_hooks.h"

typedef struct {
    const char *arch, *prec; /* bench rollout's precision names */
    int lora, B, P, G;
    bool cfg;                /* LLaDA CFG rollout */
    int mode;                /* 0 a rollout; 1 a scoring forward at the rollout copy; 2 and
                                3 a training step (PM_TRAIN; 2 listed first, at recompute
                                none, 3 at rec) */
    int layers;              /* 0: the tiny preset's 2; else the tiny model with this many */
    int rec;                 /* train.recompute (0 none, K every K layers) */
    int C, F;                /* 0: tiny's; else d_model and mlp_hidden (LLaDA), so wide
                                that a widened fp32 weight in bf16_linear_bwd_x would grow
                                the workspace */
    dllm_cache cache;        /* rollout.cache (LLaDA) */
    double thr;              /* rollout.threshold (0: off) */
    int blk;                 /* block length (0: G, one block) */
} pcase;

static const pcase CASES[] = {
    {"llada", "fp32", 0, 2, 4, 8, false, 0, 0, 0, 0, 0, 0, 0, 0},  {"llada", "bf16", 0, 3, 6, 8, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llada", "fp8", 0, 2, 8, 16, false, 0, 0, 0, 0, 0, 0, 0, 0},  {"llada", "fp8", 4, 4, 4, 8, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llada", "bf16", 8, 2, 5, 12, true, 0, 0, 0, 0, 0, 0, 0, 0},  {"llada", "fp32", 3, 1, 3, 6, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", "fp32", 0, 2, 4, 6, false, 0, 0, 0, 0, 0, 0, 0, 0},  {"qwen3", "bf16", 4, 3, 5, 4, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", "fp8", 0, 2, 6, 5, false, 0, 0, 0, 0, 0, 0, 0, 0},   {"dream", "bf16", 0, 2, 4, 6, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"dream", "fp8", 5, 3, 3, 4, false, 0, 0, 0, 0, 0, 0, 0, 0},   {"dream", "fp32", 0, 1, 6, 8, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llada", "fp8", 4, 3, 6, 8, false, 1, 0, 0, 0, 0, 0, 0, 0},       {"qwen3", "fp32", 0, 4, 5, 6, false, 1, 0, 0, 0, 0, 0, 0, 0},
    {"dream", "bf16", 8, 2, 7, 5, false, 1, 0, 0, 0, 0, 0, 0, 0},      {"llada", "bf16-trainer", 4, 2, 4, 8, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llada", "fp8", 4, 2, 4, 8, false, 2, 0, 0, 0, 0, 0, 0, 0},       {"qwen3", "bf16", 3, 2, 5, 4, false, 2, 0, 0, 0, 0, 0, 0, 0},
    {"dream", "fp8", 0, 2, 4, 6, false, 2, 0, 0, 0, 0, 0, 0, 0},       {"llada", "fp32", 0, 2, 3, 8, true, 2, 0, 0, 0, 0, 0, 0, 0},
    /* the update on the device: LoRA and full fine-tuning, fp32 and bf16 trainers, each
     * recompute mode (none; layer; every:K inside 5 layers; K at or above L: none) */
    {"llada", "fp8", 4, 2, 4, 8, false, 3, 0, 1, 0, 0, 0, 0, 0},
    {"llada", "fp32", 0, 2, 3, 8, true, 3, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", "bf16", 3, 2, 5, 4, false, 3, 5, 2, 0, 0, 0, 0, 0},
    {"dream", "fp8", 0, 2, 4, 6, false, 3, 0, 1, 0, 0, 0, 0, 0},
    {"llada", "bf16-trainer", 4, 2, 4, 8, false, 3, 0, 0, 0, 0, 0, 0, 0},
    {"dream", "bf16-trainer", 5, 3, 3, 4, false, 3, 5, 3, 0, 0, 0, 0, 0},
    {"qwen3", "fp32", 0, 2, 4, 6, false, 3, 5, 5, 0, 0, 0, 0, 0},
    {"llada", "fp32", 0, 2, 4, 8, false, 3, 5, 2, 0, 0, 0, 0, 0},
    {"qwen3", "bf16-trainer", 8, 2, 4, 4, false, 3, 0, 1, 0, 0, 0, 0, 0},
    {"llada", "bf16-trainer", 4, 2, 4, 8, false, 3, 2, 1, 128, 2304, 0, 0, 0},
    /* INT8 rollout copies (the producers quantise for every linear but o_proj): channel
     * and block scaling, a rollout, a scoring forward, a step with the update */
    {"llada", "int8", 0, 2, 8, 16, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", "int8-block", 4, 2, 6, 5, false, 0, 0, 0, 0, 0, 0, 0, 0},
    {"dream", "int8", 0, 3, 5, 6, false, 1, 0, 0, 0, 0, 0, 0, 0},
    {"llada", "int8-block", 4, 2, 4, 8, false, 2, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", "int8", 0, 2, 5, 4, false, 3, 0, 1, 0, 0, 0, 0, 0},
    {"llada", "int8-block", 0, 2, 4, 8, false, 3, 0, 0, 128, 2304, 0, 0, 0},
    /* cached and parallel denoising: the block cache, its fills and cached steps */
    {"llada", "fp8", 4, 2, 4, 16, false, 3, 0, 1, 0, 0, DLLM_CACHE_DUAL, 0.9, 4},
    {"llada", "bf16", 0, 3, 5, 16, false, 0, 0, 0, 0, 0, DLLM_CACHE_PREFIX, 0, 8},
    {"llada", "fp32", 0, 2, 4, 12, false, 0, 0, 0, 0, 0, DLLM_CACHE_NONE, 0.5, 4},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

START_TEST(test_peak_matches_plan)
{
    const pcase *c = &CASES[_i];
    dllm_err err = {0};
    bool trainer_bf16 = !strcmp(c->prec, "bf16-trainer"), i8block = !strcmp(c->prec, "int8-block");
    dllm_policy_cfg pc = {.preset = "tiny", .arch = c->arch, .seed = 5, .device = "cuda"};
    ck_assert_int_eq(dllm_policy_infer_cfg(&pc, trainer_bf16 ? "bf16" : i8block ? "int8" : c->prec,
                                           "--precision", &err), 0);
    if (trainer_bf16) /* a bf16 trainer rolling out at its own numerics */
        pc.trainer = "bf16", pc.rollout = "trainer";
    if (i8block)
        pc.int8_scaling = "block";
    /* LoRA after the precision (dllm_policy_infer_cfg clears it); odd ranks on two targets */
    static const char *const two[] = {"q_proj", "v_proj"};
    pc.lora_rank = c->lora, pc.lora_alpha = 16;
    if (c->lora % 2)
        pc.lora_targets = two, pc.n_lora_targets = 2;
    char dir[512] = "";
    if (c->layers) { /* the tiny model resized, from a checkpoint (host only) */
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/dllm_plan_dev_XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
        ck_assert_ptr_nonnull(mkdtemp(dir));
        dllm_model_config tc;
        ck_assert_int_eq(dllm_config_preset(&tc, dllm_arch_by_name(c->arch)->id, "tiny", &err),
                         0);
        tc.n_layers = c->layers;
        if (c->C) /* LLaDA: head_dim follows d_model */
            tc.d_model = c->C, tc.mlp_hidden = c->F, tc.head_dim = c->C / tc.n_heads;
        dllm_tf *tm = dllm_tf_create(&tc, 5);
        ck_assert_msg(dllm_tf_save(tm, dir, ST_F32, 0, &err) == 0, "%s", err.msg);
        dllm_tf_free(tm);
        pc.path = dir;
    }
    /* the shape: one rollout batch, one micro-batch of the same canvases */
    pm_shape s = {.pc = pc, .B = c->B, .P = c->P, .S = c->B, .mb = c->B, .recompute = c->rec,
                  .top_p = 1.0};
    for (int i = 0; i < pc.n_lora_targets; i++)
        snprintf(s.targets[i], sizeof s.targets[i], "%s", two[i]);
    s.dream = dllm_dream_cfg_default();
    const pm_phase ph = c->mode >= 2 ? PM_TRAIN : (pm_phase)c->mode;

    dllm_emu_reset_stats();
    dllm_policy *p = NULL;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    const dllm_model_config mc = *dllm_policy_config(p);
    const int blk = c->blk ? c->blk : c->G;
    s.sc = (dllm_sampler_cfg){.gen_length = c->G, .block_length = blk, .steps = c->G / 2,
                              .temperature = 1.0, .remasking = REMASK_LOW_CONFIDENCE,
                              .mask_token = DLLM_MASK_TOKEN_FORBID, .mask_id = mc.mask_token_id,
                              .eos_id = mc.eos_token_id, .eot_id = -1,
                              .vocab = mc.embedding_size, .cfg_scale = c->cfg ? 1.0 : 0.0,
                              .cache = c->cache, .threshold = c->thr};
    if (ph == PM_TRAIN && c->rec == 1) { /* with the evaluation's rollouts after the step */
        s.eval = true, s.eval_B = 2;
        s.eval_prec = c->lora % 2 ? DLLM_PREC_ROLLOUT : DLLM_PREC_TRAIN_NOGRAD;
        s.esc = s.sc;
        s.esc.gen_length = 2 * c->G, s.esc.block_length = c->G, s.esc.steps = c->G;
        s.esc.cache = DLLM_CACHE_NONE, s.esc.threshold = 0, s.esc.cfg_scale = 0;
    }
    bool upd = false;
    ck_assert_msg(pm_work(p, &s, ph, &upd, &err) == 0, "%s", err.msg);
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    int64_t ws = (int64_t)dllm_backend_cuda_workspace_bytes();
    dllm_policy_free(p);
    if (*dir) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
    }

    pm_plan pl;
    ck_assert_msg(pm_record(&mc, &s, ph, &pl, &err) == 0, "%s", err.msg);
    const int64_t got = (int64_t)st.peak_bytes;
    printf("%-5s %-12s lora %d B %d P %d G %d%s %s (L %d, recompute %d%s%s): emulated peak "
           "%lld, recorded %lld\n", c->arch, c->prec, c->lora, c->B, c->P, c->G,
           c->cfg ? " cfg" : "", pm_phase_names[ph], mc.n_layers, c->rec,
           upd ? ", update on the device" : "", s.eval ? ", evaluation" : "",
           (long long)got, (long long)pl.peak);
    /* the update runs on the device exactly where dllm_tf_device_train takes it */
    ck_assert_int_eq(upd, pl.update);
    if (ph == PM_TRAIN)
        ck_assert_int_eq(upd, !trainer_bf16 || c->lora > 0);
    int64_t sum = 0, pws = -1, pqa = 0;
    for (int i = 0; i < pl.n; i++) {
        sum += pl.items[i].bytes;
        if (!strcmp(pl.items[i].tag, "backend workspace"))
            pws = pl.items[i].bytes;
        if (!strcmp(pl.items[i].tag, "fused producers: codes, bf16 copies"))
            pqa = pl.items[i].bytes;
    }
    if (got != pl.peak) {
        pm_print(&pl, c->arch, 0, stdout);
        fflush(stdout); /* the forked child exits without flushing */
    }
    ck_assert_msg(got == pl.peak, "emulated peak %lld, recorded %lld (%+lld)", (long long)got,
                  (long long)pl.peak, (long long)(pl.peak - got));
    ck_assert_int_eq(sum, pl.peak);
    /* the workspace at the peak is at most what the emulated backend grew it to */
    ck_assert_msg(pws <= ws, "recorded workspace %lld, emulated %lld", (long long)pws,
                  (long long)ws);
    /* bf16_linear_bwd_x on BF16 tensor cores asks for dout in bf16 (N x OC x 2 bytes), not
     * for the weight widened to fp32 (F x C x 4, which grew the workspace to 2 MiB here):
     * it stays at its first 1 MiB (beside it, the producers' bf16 copies' buffer) */
    if (c->C && trainer_bf16)
        ck_assert_int_eq(ws - pqa, (int64_t)1 << 20);
}
END_TEST

/* `sft`'s device work (pm_work_sft: the device trainer, one batch forward and backward,
 * AdamW, and validation's model and its generation beside it) from real tiny models on
 * the emulated device against its recording on shape-only ones: equal to the byte. */
typedef struct {
    const char *arch, *trainer;
    int lora, B, T;
    bool eval;
} scase;

static const scase SCASES[] = {
    {"llada", "fp32", 0, 4, 12, true},  {"llada", "bf16", 4, 3, 10, false},
    {"qwen3", "fp32", 4, 2, 9, true},   {"dream", "bf16", 0, 3, 8, true},
    {"qwen3", "bf16", 0, 2, 7, false},
};
#define NSCASES ((int)(sizeof SCASES / sizeof SCASES[0]))

START_TEST(test_sft_peak_matches_plan)
{
    const scase *c = &SCASES[_i];
    dllm_err err = {0};
    dllm_policy_cfg pc = {.preset = "tiny", .arch = c->arch, .seed = 5, .device = "cuda",
                          .trainer = c->trainer, .rollout = "trainer", .lora_rank = c->lora,
                          .lora_alpha = 16};
    const dllm_policy_cfg ec = {.preset = "tiny", .arch = c->arch, .seed = 6, .device = "cuda",
                                .trainer = c->trainer, .rollout = "trainer"};
    pm_sft_shape s = {.pc = pc, .B = c->B, .T = c->T, .eval = c->eval, .eval_B = 3, .P = 5};
    dllm_emu_reset_stats();
    dllm_policy *p = NULL;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    const dllm_model_config mc = *dllm_policy_config(p);
    s.esc = (dllm_sampler_cfg){.gen_length = 8, .block_length = 4, .steps = 4,
                               .temperature = 1.0, .remasking = REMASK_LOW_CONFIDENCE,
                               .mask_token = DLLM_MASK_TOKEN_FORBID, .mask_id = mc.mask_token_id,
                               .eos_id = mc.eos_token_id, .eot_id = -1,
                               .vocab = mc.embedding_size};
    bool upd = false;
    ck_assert_msg(pm_work_sft(p, &s, &ec, &upd, &err) == 0, "%s", err.msg);
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    dllm_policy_free(p);
    pm_plan pl;
    ck_assert_msg(pm_record_sft(&mc, &s, &pl, &err) == 0, "%s", err.msg);
    printf("sft %-5s %s trainer lora %d, %d x %d tokens%s: emulated peak %lld, recorded %lld\n",
           c->arch, c->trainer, c->lora, c->B, c->T, c->eval ? ", validation" : "",
           (long long)st.peak_bytes, (long long)pl.peak);
    ck_assert_int_eq(upd, pl.update);
    if (st.peak_bytes != (size_t)pl.peak) {
        pm_print(&pl, c->arch, 0, stdout);
        fflush(stdout);
    }
    ck_assert_int_eq((int64_t)st.peak_bytes, pl.peak);
}
END_TEST

/* Full fine-tuning under a bf16 trainer updates on the device too (fp32 masters beside the
 * rounded view): its recorded train phase has the update's items and holds more than LoRA
 * under it, which trains there over the packed linears. */
START_TEST(test_bf16_full_update_on_device)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    pm_shape s = {.pc = {.trainer = "bf16", .rollout = "fp8", .fp8_format = "e4m3",
                         .fp8_scaling = "block", .seed = 1},
                  .B = 2, .P = 4, .S = 2, .mb = 2, .recompute = 1, .top_p = 1.0};
    s.dream = dllm_dream_cfg_default();
    s.sc = (dllm_sampler_cfg){.gen_length = 8, .block_length = 8, .steps = 4, .temperature = 1,
                              .remasking = REMASK_LOW_CONFIDENCE,
                              .mask_token = DLLM_MASK_TOKEN_FORBID, .mask_id = mc.mask_token_id,
                              .eos_id = mc.eos_token_id, .eot_id = -1, .vocab = mc.embedding_size};
    pm_plan pl;
    ck_assert_msg(pm_record(&mc, &s, PM_TRAIN, &pl, &err) == 0, "%s", err.msg);
    ck_assert(pl.update);
    int upd = 0;
    for (int i = 0; i < pl.n; i++)
        upd += !strncmp(pl.items[i].tag, "update:", 7);
    ck_assert_int_ge(upd, 2);
    s.pc.lora_rank = 4, s.pc.lora_alpha = 8; /* LoRA over the packed linears trains there */
    pm_plan lo;
    ck_assert_msg(pm_record(&mc, &s, PM_TRAIN, &lo, &err) == 0, "%s", err.msg);
    ck_assert(lo.update);
    upd = 0;
    for (int i = 0; i < lo.n; i++)
        upd += !strncmp(lo.items[i].tag, "update:", 7);
    ck_assert_int_ge(upd, 2);
    ck_assert_msg(pl.peak > lo.peak, "full %lld, LoRA %lld", (long long)pl.peak,
                  (long long)lo.peak);
}
END_TEST
#endif

Suite *tu_suite(tu_ctx *ctx)
{
#ifndef DLLM_CUDA_EMULATION
    return tu_skip(ctx, "the recorded plan is checked against the CUDA emulation's allocator "
                        "(configure --enable-cuda-emulation)");
#else
    (void)ctx; /* forked: each case on a fresh emulated device */
    Suite *s = suite_create("plan_device");
    TCase *tc = tcase_create("peak");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_peak_matches_plan, 0, NCASES);
    tcase_add_loop_test(tc, test_sft_peak_matches_plan, 0, NSCASES);
    tcase_add_test(tc, test_bf16_full_update_on_device);
    suite_add_tcase(s, tc);
    return s;
#endif
}
