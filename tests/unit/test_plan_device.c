/* test_plan_device.c: the plan of what the device path holds (src/plan/mem_plan_device.h)
 * against the CUDA emulation's allocator (kernels/cuda_emu/emu_hooks.h).
 *
 * For tiny LLaDA, Dream and Qwen3 models at every precision (fp32 trainer, bf16 trainer,
 * bf16, FP8 and INT8 (channel, block) rollout copies), with and without LoRA, at several batches and lengths,
 * one rollout, one scoring forward, or a step's device work (rollout, the l_mu and l_pi
 * scoring forwards, the next step's rollout; or with the update on the device between
 * them: dllm_tf_device_train, the kept forward, its backward, clip, AdamW and the sync,
 * for LoRA and full fine-tuning, fp32 and bf16 trainers, recompute none, layer and
 * every:K, on 2- and 5-layer models, and one wider model whose bf16 trainer's
 * bf16_linear_bwd_x would grow the backend workspace if it widened its weight to fp32
 * instead of rounding dout to bf16) runs on the emulated device and
 * its peak of device bytes is compared with the plan's phase (rollout, score, train):
 *   - the whole peak within 10%;
 *   - the peak less the two fixed workspaces (cuBLASLt's 32 MiB, the backend's) within
 *     10% of the plan's other items, so the tiny model's own bytes are what is checked;
 *   - the backend workspace exactly as planned.
 * Each case runs in its own forked child (the parent never starts the emulated device), so
 * every peak starts from an empty device. Bookkeeping of the emulated allocator, not a GPU
 * measurement. Other builds report SKIP (77). */
#include "config.h"

#include "dllm/arch.h"
#include "dllm/policy.h"
#include "dllm/policy_infer.h"
#include "dllm/transformer.h"
#include "src/plan/mem_plan_device.h"
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
    int mode;                /* 0 a rollout; 1 a scoring forward at the rollout copy; 2 a
                                step's device work: rollout, then l_mu (rollout copy) and
                                l_pi (trainer view) scoring forwards; 3 the same with the
                                update on the device between the scorings and the next
                                rollout (kept forward, backward, clip, AdamW, sync) */
    int layers;              /* 0: the tiny preset's 2; else the tiny model with this many */
    int rec;                 /* mode 3: train.recompute (0 none, K every K layers) */
    int C, F;                /* 0: tiny's; else d_model and mlp_hidden (LLaDA), so wide
                                that a widened fp32 weight in bf16_linear_bwd_x would grow
                                the workspace */
} pcase;

static const pcase CASES[] = {
    {"llada", "fp32", 0, 2, 4, 8, false, 0, 0, 0, 0, 0},  {"llada", "bf16", 0, 3, 6, 8, false, 0, 0, 0, 0, 0},
    {"llada", "fp8", 0, 2, 8, 16, false, 0, 0, 0, 0, 0},  {"llada", "fp8", 4, 4, 4, 8, false, 0, 0, 0, 0, 0},
    {"llada", "bf16", 8, 2, 5, 12, true, 0, 0, 0, 0, 0},  {"llada", "fp32", 3, 1, 3, 6, false, 0, 0, 0, 0, 0},
    {"qwen3", "fp32", 0, 2, 4, 6, false, 0, 0, 0, 0, 0},  {"qwen3", "bf16", 4, 3, 5, 4, false, 0, 0, 0, 0, 0},
    {"qwen3", "fp8", 0, 2, 6, 5, false, 0, 0, 0, 0, 0},   {"dream", "bf16", 0, 2, 4, 6, false, 0, 0, 0, 0, 0},
    {"dream", "fp8", 5, 3, 3, 4, false, 0, 0, 0, 0, 0},   {"dream", "fp32", 0, 1, 6, 8, false, 0, 0, 0, 0, 0},
    {"llada", "fp8", 4, 3, 6, 8, false, 1, 0, 0, 0, 0},       {"qwen3", "fp32", 0, 4, 5, 6, false, 1, 0, 0, 0, 0},
    {"dream", "bf16", 8, 2, 7, 5, false, 1, 0, 0, 0, 0},      {"llada", "bf16-trainer", 4, 2, 4, 8, false, 0, 0, 0, 0, 0},
    {"llada", "fp8", 4, 2, 4, 8, false, 2, 0, 0, 0, 0},       {"qwen3", "bf16", 3, 2, 5, 4, false, 2, 0, 0, 0, 0},
    {"dream", "fp8", 0, 2, 4, 6, false, 2, 0, 0, 0, 0},       {"llada", "fp32", 0, 2, 3, 8, true, 2, 0, 0, 0, 0},
    /* the update on the device: LoRA and full fine-tuning, fp32 and bf16 trainers, each
     * recompute mode (none; layer; every:K inside 5 layers; K at or above L: none) */
    {"llada", "fp8", 4, 2, 4, 8, false, 3, 0, 1, 0, 0},
    {"llada", "fp32", 0, 2, 3, 8, true, 3, 0, 0, 0, 0},
    {"qwen3", "bf16", 3, 2, 5, 4, false, 3, 5, 2, 0, 0},
    {"dream", "fp8", 0, 2, 4, 6, false, 3, 0, 1, 0, 0},
    {"llada", "bf16-trainer", 4, 2, 4, 8, false, 3, 0, 0, 0, 0},
    {"dream", "bf16-trainer", 5, 3, 3, 4, false, 3, 5, 3, 0, 0},
    {"qwen3", "fp32", 0, 2, 4, 6, false, 3, 5, 5, 0, 0},
    {"llada", "fp32", 0, 2, 4, 8, false, 3, 5, 2, 0, 0},
    {"qwen3", "bf16-trainer", 8, 2, 4, 4, false, 3, 0, 1, 0, 0},
    {"llada", "bf16-trainer", 4, 2, 4, 8, false, 3, 2, 1, 128, 2304},
    /* INT8 rollout copies (the producers quantise for every linear but o_proj): channel
     * and block scaling, a rollout, a scoring forward, a step with the update */
    {"llada", "int8", 0, 2, 8, 16, false, 0, 0, 0, 0, 0},
    {"qwen3", "int8-block", 4, 2, 6, 5, false, 0, 0, 0, 0, 0},
    {"dream", "int8", 0, 3, 5, 6, false, 1, 0, 0, 0, 0},
    {"llada", "int8-block", 4, 2, 4, 8, false, 2, 0, 0, 0, 0},
    {"qwen3", "int8", 0, 2, 5, 4, false, 3, 0, 1, 0, 0},
    {"llada", "int8-block", 0, 2, 4, 8, false, 3, 0, 0, 128, 2304},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static double rel(int64_t plan, int64_t got)
{
    return got ? (double)(plan - got) / (double)got : (plan ? 1.0 : 0.0);
}

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
    dllm_emu_reset_stats();
    dllm_policy *p = NULL;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    if (c->mode == 3) { /* as rl_run_open: the recomputation, then training on the device */
        dllm_tf *m = dllm_policy_model(p);
        ck_assert_int_eq(dllm_tf_set_recompute(m, c->rec), 0);
        ck_assert_msg(dllm_tf_device_train(m, &err) == 0, "%s", err.msg);
    }
    const dllm_model_config mc = *dllm_policy_config(p);
    const int B = c->B, P = c->P, G = c->G, T = P + G;
    int32_t *tok = malloc(sizeof *tok * (size_t)B * T);
    for (int i = 0; i < B * T; i++)
        tok[i] = 3 + (i * 7) % (mc.vocab_size - 3);
    for (int i = 0; i < B * T; i++)
        if (tok[i] == mc.mask_token_id || tok[i] == mc.eos_token_id)
            tok[i] = 5;
    mem_dev_shape s = {.lora_rank = c->lora, .lora_mask = LORA_ALL, .B = B, .P = P, .G = G,
                       .cfg = c->cfg};
    if (pc.n_lora_targets)
        s.lora_mask = dllm_arch_lora_bit(dllm_arch_get(mc.arch), two[0]) |
                      dllm_arch_lora_bit(dllm_arch_get(mc.arch), two[1]);
    ck_assert_int_eq(dllm_policy_has_lora(p), c->lora > 0);
    ck_assert_int_eq(dllm_precision_parse(&s.prec, pc.trainer, pc.rollout, pc.fp8_format,
                                          pc.fp8_scaling, pc.fp8_pow2_scale, &err), 0);
    ck_assert_int_eq(dllm_precision_parse_int8(&s.prec, pc.int8_scaling, &err), 0);
    const dllm_sampler_cfg sc = {.gen_length = G, .block_length = G, .steps = G / 2,
                               .temperature = 1.0, .remasking = REMASK_LOW_CONFIDENCE,
                               .mask_token = DLLM_MASK_TOKEN_FORBID, .mask_id = mc.mask_token_id,
                               .eos_id = mc.eos_token_id, .eot_id = -1,
                               .vocab = mc.embedding_size, .cfg_scale = c->cfg ? 1.0 : 0.0};
    if (c->mode != 1) {
        dllm_rollout ro = {0};
        ck_assert_msg(dllm_policy_rollout(p, tok, NULL, B, P, &sc, 1.0, 9, &ro, &err) == 0, "%s",
                      err.msg);
        dllm_rollout_free(&ro);
    }
    if (c->mode != 0) { /* forwards of B canvases scoring their G generated rows */
        int32_t *rows = malloc(sizeof *rows * (size_t)B * G), *tg = malloc(sizeof *tg * B * G);
        float *lp = malloc(sizeof *lp * (size_t)B * G);
        for (int b = 0; b < B; b++)
            for (int g = 0; g < G; g++) {
                rows[b * G + g] = b * T + P + g;
                tg[b * G + g] = tok[b * T + P + g];
                tok[b * T + P + g] = mc.arch == DLLM_ARCH_QWEN3 ? tok[b * T + P + g]
                                                                : mc.mask_token_id;
            }
        for (int k = 0; k < (c->mode >= 2 ? 2 : 1); k++) {
            void *ctx;
            dllm_logp_fn f = dllm_policy_logp(p, k ? DLLM_PREC_TRAIN_NOGRAD : DLLM_PREC_ROLLOUT,
                                              &ctx);
            ck_assert_ptr_nonnull(f);
            ck_assert_int_eq(f(ctx, tok, NULL, B, T, rows, tg, B * G, lp), 0);
        }
        s.sB = B, s.sT = T, s.sR = B * G, s.score_rollout = true;
        if (c->mode == 3) { /* rl_step's update: the kept forward of the same canvases */
            dllm_tf *m = dllm_policy_model(p);
            const int R = B * G;
            float *lg = malloc(sizeof *lg * (size_t)R);
            dllm_tf_zero_grad(m);
            void *ctx;
            /* the loss gradient built on the device, as rl_step at temperature 1 */
            dllm_logp_fn f = dllm_policy_train_logp(p, &ctx);
            ck_assert_ptr_nonnull(f);
            ck_assert_int_eq(f(ctx, tok, NULL, B, T, rows, tg, R, lg), 0);
            for (int i = 0; i < R; i++) /* any dL/dlogp: sizes are what count */
                lg[i] = 1e-3f * (float)(i % 7 - 3);
            dllm_policy_backward_logp(ctx, lg);
            dllm_adamw_args a = {1, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0};
            double gn = dllm_tf_optim_step(m, &a);
            ck_assert(gn > 0 && isfinite(gn));
            ck_assert_msg(dllm_policy_sync_rollout(p, NULL, &err) == 0, "%s", err.msg);
            s.update = true, s.uB = B, s.uT = T, s.uR = R, s.recompute = c->rec;
            free(lg);
        }
        free(rows), free(tg), free(lp);
    }
    if (c->mode >= 2) { /* the next step's rollout, with the scoring buffers kept */
        for (int i = 0; i < B * T; i++)
            if (tok[i] == mc.mask_token_id)
                tok[i] = 5;
        dllm_rollout ro = {0};
        ck_assert_msg(dllm_policy_rollout(p, tok, NULL, B, P, &sc, 1.0, 10, &ro, &err) == 0, "%s",
                      err.msg);
        dllm_rollout_free(&ro);
    }
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    int64_t ws = (int64_t)dllm_backend_cuda_workspace_bytes();
    dllm_policy_free(p);
    free(tok);
    if (*dir) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
    }

    mem_dev_plan pl;
    const mem_dev_phase ph = c->mode == 3 ? MEM_DEV_TRAIN : (mem_dev_phase)c->mode;
    ck_assert_msg(mem_plan_device(&pl, &mc, &s, ph, &err) == 0, "%s", err.msg);
    int64_t got = (int64_t)st.peak_bytes, own = got - ws - ((int64_t)32 << 20);
    char upd[64] = "";
    if (c->mode == 3)
        snprintf(upd, sizeof upd, " + update (L %d, recompute %d)", mc.n_layers, c->rec);
    printf("%-5s %-12s lora %d B %d P %d G %d%s %s%s: peak %lld, plan %lld (%+.2f%%); without "
           "the workspaces %lld, plan %lld (%+.2f%%)\n", c->arch, c->prec, c->lora, B, P, G,
           c->cfg ? " cfg" : "", c->mode ? mem_dev_phase_names[ph] : "", upd, (long long)got,
           (long long)pl.peak, 100 * rel(pl.peak, got), (long long)own,
           (long long)(pl.peak - pl.fixed), 100 * rel(pl.peak - pl.fixed, own));
    if (c->mode == 3) /* the update's items are in the plan and the peak */
        ck_assert(pl.update > 0 && pl.update < pl.kept);
    /* bf16_linear_bwd_x on BF16 tensor cores asks for dout in bf16 (N x OC x 2 bytes), not
     * for the weight widened to fp32 (F x C x 4, which grew the workspace to 2 MiB here):
     * it stays at its first 1 MiB */
    if (c->C && trainer_bf16)
        ck_assert_int_eq(ws, (int64_t)1 << 20);
    if (own <= 0 || rel(pl.peak - pl.fixed, own) > 0.10 || rel(pl.peak - pl.fixed, own) < -0.10) {
        mem_plan_device_print(&pl, c->arch, 0, stdout);
        fflush(stdout); /* the forked child exits without flushing */
        ck_abort_msg("the plan's own bytes %lld are not within 10%% of the measured %lld",
                     (long long)(pl.peak - pl.fixed), (long long)own);
    }
    ck_assert_msg(rel(pl.peak, got) <= 0.10 && rel(pl.peak, got) >= -0.10,
                  "plan %lld vs peak %lld", (long long)pl.peak, (long long)got);
    ck_assert_int_eq(pl.backend_ws, ws);
}
END_TEST

/* Full fine-tuning under a bf16 trainer updates on the host (dllm_tf_device_train refuses
 * it): a device update of it is an input error naming the key, not a plan. */
START_TEST(test_bf16_full_update_refused)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    mem_dev_shape s = {.lora_mask = LORA_ALL, .B = 2, .P = 4, .G = 8, .sB = 2, .sT = 12,
                       .sR = 16, .score_rollout = true, .update = true, .uB = 2, .uT = 12,
                       .uR = 16, .recompute = 1};
    ck_assert_int_eq(dllm_precision_parse(&s.prec, "bf16", "fp8", "e4m3", "block", false, &err),
                     0);
    mem_dev_plan pl;
    ck_assert_int_eq(mem_plan_device(&pl, &mc, &s, MEM_DEV_TRAIN, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.trainer_precision"));
    s.lora_rank = 4; /* LoRA over the packed linears trains there */
    ck_assert_int_eq(mem_plan_device(&pl, &mc, &s, MEM_DEV_TRAIN, &err), 0);
    ck_assert(pl.update > 0);
    s.update = false; /* and without the update the plan has none of its items */
    ck_assert_int_eq(mem_plan_device(&pl, &mc, &s, MEM_DEV_TRAIN, &err), 0);
    ck_assert(pl.update == 0);
}
END_TEST
#endif

Suite *tu_suite(tu_ctx *ctx)
{
#ifndef DLLM_CUDA_EMULATION
    return tu_skip(ctx, "the device plan is checked against the CUDA emulation's allocator "
                        "(configure --enable-cuda-emulation)");
#else
    (void)ctx; /* forked: each case on a fresh emulated device */
    Suite *s = suite_create("plan_device");
    TCase *tc = tcase_create("peak");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_peak_matches_plan, 0, NCASES);
    tcase_add_test(tc, test_bf16_full_update_refused);
    suite_add_tcase(s, tc);
    return s;
#endif
}
